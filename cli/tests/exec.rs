//! `holdfast lock exec` as scripts use it (issue #18), against a 3-node cell of real
//! processes: the child's exit status comes back, a lock that cannot be had is exit
//! 75, Ctrl-C stops the child's whole process group and releases the lock, a lost
//! lease stops the child and exits 76, and a `lock exec` killed without a word takes its
//! child's whole group with it while the lock is still held.

mod common;

use common::proc_cell::*;
use common::{kill, BIN};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn endpoints(cell: &ProcCell) -> String {
    cell.nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",")
}

/// `holdfast lock exec --ns pay NAME [flags] -- CMD...`, not yet waited for.
fn exec(cell: &ProcCell, name: &str, flags: &[&str], cmd: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["lock", "exec", "--insecure", "--ns", "pay", name])
        .args(flags)
        .arg("--")
        .args(cmd)
        .env("HOLDFAST_ENDPOINTS", endpoints(cell))
        .env("RUST_LOG", "error")
        .stdin(Stdio::null());
    c
}

fn running(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

fn read_when_written(path: &Path) -> String {
    let end = Instant::now() + WAIT;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s.trim().to_owned();
            }
        }
        assert!(Instant::now() < end, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Holders of `name`, as the cell's leader describes them.
async fn holders_of(cell: &ProcCell, name: &str) -> Vec<(u64, u64)> {
    let mut c = cell.client(cell.leader_among(&[1, 2, 3]).await.0).await;
    let d = c.describe(holdfast_proto::lock::v1::DescribeRequest { shard: shard(), name: name.into() }).await.unwrap().into_inner();
    holders(&d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_exec_exit_codes_signals_and_lease_loss() {
    let cell = ProcCell::start(None).await;
    let dir = tempfile::tempdir().unwrap();

    // ---- the child's status comes back; the token is exported; the lock is released
    let out = exec(&cell, "job", &[], &["sh", "-c", "test -n \"$HOLDFAST_TOKEN\" && exit 7"]).output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(holders_of(&cell, "job").await, vec![], "released after the child exited");
    let out = exec(&cell, "job", &[], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = exec(&cell, "job", &[], &["/nonexistent/command"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", String::from_utf8_lossy(&out.stderr));

    // ---- held elsewhere past the wait: 75, and the command never runs
    let mut c = cell.client(cell.leader_among(&[1, 2, 3]).await.0).await;
    let other = session(&mut c, 30_000).await;
    until_ok("hold busy", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req(other, "busy", "other", 0)).await }
    })
    .await;
    let marker = dir.path().join("ran");
    let out = exec(&cell, "busy", &["--wait-ms", "300"], &["touch", marker.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!marker.exists(), "the command ran without the lock");

    // ---- Ctrl-C: the child's whole group stops (a background grandchild too), the
    //      lock is released at once, and the status says which signal ended it
    let pids = dir.path().join("pids");
    let script = format!("sleep 1000 & echo $! > {0}.bg; trap 'exit 3' INT; echo $$ > {0}.tmp; mv {0}.tmp {0}; wait; wait", pids.display());
    let mut child = exec(&cell, "interrupted", &[], &["sh", "-c", &script]).stderr(Stdio::null()).spawn().unwrap();
    let sh = read_when_written(&pids).to_owned();
    let bg = std::fs::read_to_string(format!("{}.bg", pids.display())).unwrap().trim().to_owned();
    assert!(running(&sh) && running(&bg));
    assert_eq!(holders_of(&cell, "interrupted").await.len(), 1);
    kill("INT", child.id());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "the child's own status after its INT trap");
    assert!(!running(&sh) && !running(&bg), "the child's group was stopped: sh {sh} alive {}, sleep {bg} alive {}", running(&sh), running(&bg));
    assert_eq!(holders_of(&cell, "interrupted").await, vec![], "released on Ctrl-C");

    // ---- holdfast itself SIGKILLed (as the OOM killer does): the child's group (a
    //      background grandchild too) dies with it at once, while the dead session still
    //      holds the lock: the command never runs without it
    let pids = dir.path().join("killed-pids");
    let script = format!("sleep 1000 & echo $! > {0}.bg; echo $$ > {0}.tmp; mv {0}.tmp {0}; wait", pids.display());
    let mut child = exec(&cell, "killed", &["--ttl-ms", "10000"], &["sh", "-c", &script]).stderr(Stdio::null()).spawn().unwrap();
    let sh = read_when_written(&pids).to_owned();
    let bg = std::fs::read_to_string(format!("{}.bg", pids.display())).unwrap().trim().to_owned();
    assert!(running(&sh) && running(&bg));
    kill("KILL", child.id());
    child.wait().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while running(&sh) || running(&bg) {
        assert!(Instant::now() < end, "holdfast lock exec was killed and its child runs on: sh {sh} alive {}, sleep {bg} alive {}", running(&sh), running(&bg));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(holders_of(&cell, "killed").await.len(), 1, "the child was gone before the dead session's lock ran out");

    // ---- the lease is lost (holdfast paused past its TTL): the child is stopped, 76
    let pid_file = dir.path().join("lost-pid");
    let script = format!("echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 1000", pid_file.display());
    let mut child = exec(&cell, "lost", &["--ttl-ms", "2000"], &["sh", "-c", &script]).stderr(Stdio::null()).spawn().unwrap();
    let sleeper = {
        let end = Instant::now() + WAIT;
        while !pid_file.exists() {
            assert!(Instant::now() < end, "the child never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::read_to_string(&pid_file).unwrap().trim().to_owned()
    };
    kill("STOP", child.id());
    // Paused: no renewal; the cell expires the session after its TTL.
    let end = Instant::now() + WAIT;
    while !holders_of(&cell, "lost").await.is_empty() {
        assert!(Instant::now() < end, "the session never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kill("CONT", child.id());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(76), "lease lost");
    assert!(!running(&sleeper), "the child was stopped when the lease was lost");
}

/// Leader election (issue #18): a leader process (`lock exec` holding the election's
/// lock) and two SDK candidates queued behind it. The leader is SIGKILLed: within its
/// TTL and a margin exactly one candidate is elected, with a larger token; when it
/// resigns, the other is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_has_one_leader_at_a_time_and_a_killed_leader_is_replaced() {
    use holdfast_client::{Client, SessionOptions};
    let cell = ProcCell::start(None).await;
    let eps: Vec<String> = cell.nodes.iter().map(|n| n.client.clone()).collect();
    let client = Client::connect(&eps).await.unwrap();
    let ttl = Duration::from_millis(2_000);

    let mut leader_proc = exec(&cell, "leader", &["--ttl-ms", "2000"], &["sleep", "1000"]).stderr(Stdio::null()).spawn().unwrap();
    let observer = client.create_session(SessionOptions::new("pay", "default", Duration::from_secs(10))).await.unwrap();
    let election = observer.election("leader");
    let end = Instant::now() + WAIT;
    let first = loop {
        if let Some(l) = election.leader().await.unwrap() {
            break l;
        }
        assert!(Instant::now() < end, "the leader process never got elected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let mut candidates = Vec::new();
    for name in ["c1", "c2"] {
        let s = client.create_session(SessionOptions::new("pay", "default", Duration::from_secs(3))).await.unwrap();
        let e = s.election("leader");
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let won = e.campaign(name).await;
            let _ = tx.send((name, won));
            // Hold the session (and the leadership) until the test ends.
            std::future::pending::<()>().await;
            drop(s);
        });
        candidates.push(rx);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(election.leader().await.unwrap().map(|l| l.token), Some(first.token), "the candidates queue behind the leader");

    // The leader's process dies without a word.
    let killed = Instant::now();
    kill("KILL", leader_proc.id());
    let _ = leader_proc.wait();
    let (won, lost) = {
        let (mut a, mut b) = (candidates.remove(0), candidates.remove(0));
        tokio::select! {
            r = &mut a => (r.unwrap(), b),
            r = &mut b => (r.unwrap(), a),
        }
    };
    let took = killed.elapsed();
    let (winner, lock) = (won.0, won.1.unwrap());
    assert!(took < ttl + Duration::from_secs(3), "the next leader took {took:?} (TTL {ttl:?})");
    assert!(lock.token() > first.token, "a new leader's token is larger");
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!((now.value.as_slice(), now.token), (winner.as_bytes(), lock.token()), "one leader, the elected one");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(election.leader().await.unwrap().map(|l| l.token), Some(lock.token()), "still one leader");

    // It resigns: the other candidate is elected, with a larger token still.
    let token = lock.token();
    lock.release().await.unwrap();
    let (other, won2) = tokio::time::timeout(WAIT, lost).await.unwrap().unwrap();
    assert_ne!(other, winner);
    assert!(won2.unwrap().token() > token);
}
