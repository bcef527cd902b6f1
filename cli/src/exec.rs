//! `holdfast lock exec NAME -- CMD`: hold a lock while a child runs, like `consul lock`.
//!
//! The session renews itself (the SDK); the child gets the token in `HOLDFAST_TOKEN`
//! (and the lock and namespace in `HOLDFAST_LOCK`, `HOLDFAST_NS`) to fence its writes.
//! If the lease is lost, the child is sent SIGTERM, then SIGKILL after 5 s, and exec
//! exits 1; otherwise it releases the lock and exits with the child's status.

use holdfast_client::{AcquireOptions, Client, SessionOptions};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;
use tracing::warn;

pub async fn run(client: Client, ns: &str, shard: &str, name: &str, ttl_ms: u64, wait_ms: u64, command: &[String]) -> Result<(), String> {
    let (program, args) = command.split_first().ok_or("nothing to run after --")?;
    let session =
        client.create_session(SessionOptions::new(ns, shard, Duration::from_millis(ttl_ms)).label("holdfast lock exec")).await.map_err(|e| e.to_string())?;
    let lock = session.acquire(name, AcquireOptions::new().wait(Duration::from_millis(wait_ms))).await.map_err(|e| e.to_string())?;
    eprintln!("holding {ns}/{shard}/{name} with token {}; running {program}", lock.token().0);
    let mut child = Command::new(program)
        .args(args)
        .env("HOLDFAST_TOKEN", lock.token().0.to_string())
        .env("HOLDFAST_LOCK", name)
        .env("HOLDFAST_NS", ns)
        .stdin(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| e.to_string())?;
            lock.release().await.map_err(|e| e.to_string())?;
            let _ = session.close().await;
            match status.code() {
                Some(0) => Ok(()),
                // The command's own status, as `consul lock` does.
                Some(c) => std::process::exit(c),
                None => Err(format!("{program} was killed by a signal")),
            }
        }
        reason = lock.lost() => {
            warn!(%reason, "lease lost: stopping the command");
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            }
            if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
            Err(format!("lost the lock ({reason}); {program} was stopped"))
        }
    }
}
