//! `holdfast lock exec NAME -- CMD`: hold a lock while a child runs, like `consul lock`.
//!
//! The session renews itself (the SDK); the child gets the token in `HOLDFAST_TOKEN`
//! (and the lock and namespace in `HOLDFAST_LOCK`, `HOLDFAST_NS`) to fence its writes.
//! The child runs in a process group of its own, so whatever it starts is stopped
//! with it:
//!
//! - SIGINT or SIGTERM to holdfast is passed on to the child's group; once the child
//!   has exited (or [`GRACE`] later, killed), the rest of its group is killed and the
//!   lock released;
//! - if the lease is lost first, the group gets SIGTERM, then SIGKILL after [`GRACE`];
//! - if `holdfast lock exec` itself dies without a word (SIGKILL, the OOM killer), the
//!   group is killed at once: the command must not run on without the lock. The
//!   group's leader is a guard ([`guard`], this binary again) that the kernel tells when
//!   its parent is gone (`PR_SET_PDEATHSIG`); it then kills the group, itself included.
//!
//! Exit status ([`EXIT_NOT_ACQUIRED`], [`EXIT_LEASE_LOST`]; docs/sdk.md, "lock exec"):
//! the child's own status; 128 + N if a signal N ended it; 75 when the lock was not
//! acquired (held past the wait, rate limited, unreachable); 76 when the lease was lost
//! while the child ran; 127 when the command could not be started; 1 for anything else
//! (bad arguments, an unknown namespace).

use holdfast_client::{AcquireOptions, Client, Error, SessionOptions};
use rustix::process::{Pid, Signal};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tracing::warn;

/// The first argument that makes this binary the guard of a `lock exec` command:
/// `holdfast __lock-exec-guard PARENT_PID -- COMMAND...` (not for people: `lock exec`
/// starts it).
pub const GUARD: &str = "__lock-exec-guard";

/// How long the child's group has to exit after a signal before it is killed.
pub const GRACE: Duration = Duration::from_secs(5);
/// The lock was not acquired (sysexits' EX_TEMPFAIL: try again later).
pub const EXIT_NOT_ACQUIRED: i32 = 75;
/// The lease was lost while the child ran; the child was stopped.
pub const EXIT_LEASE_LOST: i32 = 76;
/// The command could not be started (as a shell says it).
pub const EXIT_CANNOT_RUN: i32 = 127;

/// Signals `sig` to every process of group `pgid` (the child's). A group already gone
/// is no error.
fn signal_group(pgid: u32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// 128 + N for a signal N, else the exit code.
fn status_code(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Waits for the child up to [`GRACE`], then kills its group; then kills whatever is
/// left of the group either way (what the child started in the background).
async fn stop_group(child: &mut Child, pgid: u32) -> Option<ExitStatus> {
    let status = match tokio::time::timeout(GRACE, child.wait()).await {
        Ok(s) => s.ok(),
        Err(_) => {
            signal_group(pgid, Signal::KILL);
            child.wait().await.ok()
        }
    };
    signal_group(pgid, Signal::KILL);
    status
}

fn not_acquired(e: &Error) -> bool {
    e.code().is_some_and(|c| c.is_retryable() || matches!(c, holdfast_core::ErrorCode::LockHeld | holdfast_core::ErrorCode::Timeout)) || e.code().is_none()
}

/// Runs the command under the lock and exits with the status above.
pub async fn run(client: Client, ns: &str, shard: &str, name: &str, ttl_ms: u64, wait_ms: u64, command: &[String]) -> Result<(), String> {
    let (program, args) = command.split_first().ok_or("nothing to run after --")?;
    // Signals are ours from here on: a Ctrl-C while waiting for the lock leaves nothing
    // behind (the session is closed when dropped).
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let acquire = async {
        let session = client.create_session(SessionOptions::new(ns, shard, Duration::from_millis(ttl_ms)).label("holdfast lock exec")).await?;
        let lock = session.acquire(name, AcquireOptions::new().wait(Duration::from_millis(wait_ms))).await?;
        Ok::<_, Error>((session, lock))
    };
    let (session, lock) = tokio::select! {
        r = acquire => match r {
            Ok(held) => held,
            Err(e) if not_acquired(&e) => {
                eprintln!("error: {ns}/{shard}/{name} not acquired: {e}");
                std::process::exit(EXIT_NOT_ACQUIRED);
            }
            Err(e) => return Err(e.to_string()),
        },
        _ = interrupt.recv() => std::process::exit(128 + 2),
        _ = terminate.recv() => std::process::exit(128 + 15),
    };
    eprintln!("holding {ns}/{shard}/{name} with token {}; running {program}", lock.token().0);
    // The guard leads the command's group and dies with us (see the module's doc).
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to guard the command: {e}"))?;
    let spawned = Command::new(exe)
        .arg(GUARD)
        .arg(std::process::id().to_string())
        .arg("--")
        .arg(program)
        .args(args)
        .env("HOLDFAST_TOKEN", lock.token().0.to_string())
        .env("HOLDFAST_LOCK", name)
        .env("HOLDFAST_NS", ns)
        .stdin(Stdio::inherit())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot run {program}: {e}");
            let _ = lock.release().await;
            let _ = session.close().await;
            std::process::exit(EXIT_CANNOT_RUN);
        }
    };
    let pgid = child.id().ok_or("the child exited before it could be watched")?;
    let code = tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| e.to_string())?;
            // The child is done; what it left running in its group goes with it.
            signal_group(pgid, Signal::KILL);
            status_code(status)
        }
        _ = interrupt.recv() => {
            signal_group(pgid, Signal::INT);
            stop_group(&mut child, pgid).await.map_or(128 + 2, status_code)
        }
        _ = terminate.recv() => {
            signal_group(pgid, Signal::TERM);
            stop_group(&mut child, pgid).await.map_or(128 + 15, status_code)
        }
        reason = lock.lost() => {
            warn!(%reason, "lease lost: stopping the command");
            eprintln!("error: lost {ns}/{shard}/{name} ({reason}); stopping {program}");
            signal_group(pgid, Signal::TERM);
            stop_group(&mut child, pgid).await;
            std::process::exit(EXIT_LEASE_LOST);
        }
    };
    if let Err(e) = lock.release().await {
        eprintln!("warning: releasing {ns}/{shard}/{name}: {e} (it ends with the session)");
    }
    let _ = session.close().await;
    if code == 0 {
        Ok(())
    } else {
        std::process::exit(code)
    }
}

/// The guard: `holdfast __lock-exec-guard PARENT -- COMMAND...`, started by `lock exec`
/// (PARENT) as the leader of a new process group. Runs COMMAND in that group and exits
/// with its status (128 + N for a signal N; [`EXIT_CANNOT_RUN`] if it cannot start).
/// SIGINT and SIGTERM sent to the group reach COMMAND, and the guard waits on; but
/// when PARENT is gone (the kernel sends SIGTERM: `PR_SET_PDEATHSIG`), the guard
/// kills the whole group, itself included, so COMMAND never runs without the lock.
pub fn guard(args: &[String]) -> i32 {
    let (Some(parent), Some("--"), Some((program, rest))) = (args.first(), args.get(1).map(String::as_str), args.get(2..).and_then(|c| c.split_first())) else {
        eprintln!("error: usage: holdfast {GUARD} PARENT_PID -- COMMAND...");
        return 2;
    };
    let parent = parent.parse::<i32>().ok().and_then(Pid::from_raw);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the guard: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        // Handlers first: from here a signal is ours to judge, not the default death.
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            eprintln!("error: the guard cannot watch signals");
            return 1;
        };
        let orphaned = || parent.is_none() || rustix::process::getppid() != parent;
        // Told when the parent dies; a parent already gone (before this line) is seen
        // by the check that follows.
        if parent.is_none_or(|p| end_with_parent(p.as_raw_nonzero().get()).is_err()) {
            return kill_own_group();
        }
        let mut child = match Command::new(program).args(rest).stdin(Stdio::inherit()).spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: cannot run {program}: {e}");
                return EXIT_CANNOT_RUN;
            }
        };
        loop {
            tokio::select! {
                status = child.wait() => return status.map_or(1, status_code),
                // The group's signals reach the command too: wait for its answer. Only
                // the parent's death ends the guard's watch.
                _ = term.recv() => if orphaned() { return kill_own_group() },
                _ = int.recv() => {}
            }
        }
    })
}

/// Asks the kernel for SIGTERM when this process's parent ends, and fails if `parent`
/// is not (or no longer) the parent. The signal follows the parent *thread* that
/// started this process: tokio's workers, which live as long as the parent's runtime.
pub fn end_with_parent(parent: i32) -> Result<(), String> {
    rustix::process::set_parent_process_death_signal(Some(Signal::TERM)).map_err(|e| format!("cannot ask to end with the parent: {e}"))?;
    match rustix::process::getppid() {
        Some(p) if p.as_raw_nonzero().get() == parent => Ok(()),
        _ => Err(format!("the parent process {parent} is gone")),
    }
}

/// SIGKILL to the guard's group: the command, what it started, and the guard.
fn kill_own_group() -> i32 {
    let _ = rustix::process::kill_process_group(rustix::process::getpgrp(), Signal::KILL);
    128 + 9
}
