//! A 3-node cell of real `holdfast cell run` processes on loopback: failures only a
//! process can have — stopped by SIGSTOP, its wall clock stepped by libfaketime, its
//! disk full, its syncs or writes failing (an `LD_PRELOAD` shim). Each test reads as
//! phases; waits are on conditions with deadlines.

mod common;

use common::proc_cell::*;
use holdfast_drills::record::Recorder;
use holdfast_proto::lock::v1 as pb;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstopped_leader_confirms_no_renewal_and_grants_nothing_after_it_resumes() {
    let cell = ProcCell::start(None).await;
    let (old, old_term) = cell.leader_among(&[1, 2, 3]).await;
    let mut c_old = cell.client(old).await;
    // A TTL far longer than the stop: the old leader's own countdown would still
    // confirm A, so only rule 1 (renew under the leader lease) can refuse it.
    let a = session(&mut c_old, 20_000).await;
    renew(&mut c_old, a).await.unwrap();

    // --- SIGSTOP the leader past its election timeout
    cell.signal(old, "-STOP");
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    let (new, new_term) = cell.leader_among(&others).await;
    assert!(new_term > old_term);

    // --- while it is stopped, a renewal and an acquire queue up at its socket
    let mut c1 = c_old.clone();
    let pending_renew = tokio::spawn(async move { renew(&mut c1, a).await });
    let mut c2 = c_old.clone();
    let pending_acquire = tokio::spawn(async move { c2.acquire(acquire_req(a, "x", "a-x", 0)).await });

    // --- the new leader serves: A renews there, B takes x
    let mut c_new = cell.client(new).await;
    until_ok("renew at the new leader", || {
        let mut c = c_new.clone();
        async move { renew(&mut c, a).await }
    })
    .await;
    let b = session(&mut c_new, TTL_MS).await;
    let tb = until_ok("acquire at the new leader", || {
        let mut c = c_new.clone();
        async move { c.acquire(acquire_req(b, "x", "b-x", 0)).await }
    })
    .await
    .into_inner()
    .token;

    // --- resume the old leader: what it answers now must not confirm or grant
    cell.signal(old, "-CONT");
    let renewed = tokio::time::timeout(Duration::from_secs(15), pending_renew).await.expect("renewal never answered").unwrap();
    match renewed {
        Ok(ttl) => panic!("the resumed deposed leader confirmed a renewal ({ttl} ms)"),
        Err(e) => assert!(["NOT_LEADER", "UNAVAILABLE"].contains(&code(&e).as_str()) || e.code() == tonic::Code::Unavailable, "{e:?}"),
    }
    let acquired = tokio::time::timeout(Duration::from_secs(15), pending_acquire).await.expect("acquire never answered").unwrap();
    if let Ok(r) = acquired {
        panic!("the resumed deposed leader granted token {}", r.into_inner().token);
    }

    // --- the cell's record: B holds x, and nothing from the old leader survived
    let (leader, _) = cell.leader_among(&[1, 2, 3]).await;
    let d = cell.client(leader).await.describe(pb::DescribeRequest { shard: shard(), name: "x".into() }).await.unwrap().into_inner();
    assert_eq!(holders(&d), vec![(b, tb)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_steps_of_hours_change_no_expiry() {
    assert!(Path::new(LIBFAKETIME).exists(), "libfaketime is missing: run scripts/setup.sh");
    let dir = tempfile::tempdir().unwrap();
    let clock: PathBuf = dir.path().join("faketime");
    std::fs::write(&clock, "+0\n").unwrap();
    let cell = ProcCell::start(Some(&clock)).await;
    let (l, _) = cell.leader_among(&[1, 2, 3]).await;
    let mut c = cell.client(l).await;

    // --- live session L holds "live"; dead session D holds "dead"; W waits for "dead"
    let live = session(&mut c, TTL_MS).await;
    let t_live = c.acquire(acquire_req(live, "live", "l-1", 0)).await.unwrap().into_inner().token;
    let dead = session(&mut c, TTL_MS).await;
    c.acquire(acquire_req(dead, "dead", "d-1", 0)).await.unwrap();
    let w = session(&mut c, 10 * TTL_MS).await;
    let mut keep = c.clone();
    let keeper = tokio::spawn(async move {
        loop {
            for s in [live, w] {
                if let Err(e) = renew(&mut keep, s).await {
                    return e;
                }
            }
            tokio::time::sleep(Duration::from_millis(TTL_MS / 3)).await;
        }
    });
    let sent = Instant::now();
    let remaining = renew(&mut c, dead).await.unwrap();
    let dead_deadline = sent + Duration::from_millis(remaining);
    let mut cw = c.clone();
    let waiter = tokio::spawn(async move {
        let r = cw.acquire(acquire_req(w, "dead", "w-1", 20_000)).await;
        (Instant::now(), r)
    });

    // --- every node's wall clock jumps 5 hours forward, then 3 hours back
    std::fs::write(&clock, "+5h\n").unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let d = c.describe(pb::DescribeRequest { shard: shard(), name: "live".into() }).await.unwrap().into_inner();
    let held_for = d.holders[0].held_for_ms;
    assert!(held_for >= 4 * 3_600_000, "libfaketime did not step the server's wall clock (held_for {held_for} ms)");
    std::fs::write(&clock, "-3h\n").unwrap();

    // --- D expires at its TTL, measured on the monotonic clock: not at the jump,
    // --- not never; L is never expired
    let (granted_at, r) = tokio::time::timeout(Duration::from_secs(25), waiter).await.expect("waiter never answered").unwrap();
    let got = r.expect("the waiter was not granted the dead session's lock");
    assert!(got.into_inner().token > 0);
    assert!(granted_at >= dead_deadline, "granted {:?} before D's deadline: a clock step shortened a TTL", dead_deadline - granted_at);
    assert!(granted_at - sent <= Duration::from_millis(TTL_MS + 1_500), "D lived {:?}: a clock step lengthened a TTL", granted_at - sent);
    assert!(!keeper.is_finished(), "a live session was refused: {:?}", keeper.await);
    keeper.abort();
    let d = c.describe(pb::DescribeRequest { shard: shard(), name: "live".into() }).await.unwrap().into_inner();
    assert_eq!(holders(&d), vec![(live, t_live)]);
}

/// Fills the filesystem holding `dir` until a write fails with "no space left".
fn fill_disk(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0xa5u8; 1 << 20];
    loop {
        match f.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    // Also the last partial block's worth: small writes until nothing fits.
    while f.write_all(&[0u8; 512]).is_ok() {}
    let _ = f.sync_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fills_exits_non_zero_and_the_cell_serves_on() {
    if !common::needs_root("a_leader_whose_disk_fills_exits_non_zero_and_the_cell_serves_on", "tmpfs mounts") {
        return;
    }
    let mut cell = ProcCell::start_on_tmpfs().await;
    let (old, _) = cell.leader_among(&[1, 2, 3]).await;
    let c_old = cell.client(old).await;
    let s = {
        let mut c = c_old.clone();
        session(&mut c, 60_000).await
    };

    // --- the leader's disk fills up; writes go on at it (1 KiB values, 8 at a time)
    fill_disk(&cell.data_dir(old));
    let started = Instant::now();
    let value = vec![b'v'; 1024];
    let mut next = 0u64;
    let status = loop {
        if let Some(status) = cell.exited(old) {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the leader kept running 90 s after its disk filled ({next} acquires sent)");
        // Eight lock names, each taken and given back: every call is a write.
        let batch: Vec<_> = (0..8u64)
            .map(|k| {
                next += 1;
                let mut c = c_old.clone();
                let mut req = acquire_req(s, &format!("k{k}"), &format!("r{next}"), 0);
                req.value = value.clone();
                tokio::spawn(async move {
                    let took = tokio::time::timeout(Duration::from_secs(2), c.acquire(req)).await;
                    if let Ok(Ok(r)) = took {
                        let release = pb::ReleaseRequest { shard: shard(), name: format!("k{k}"), token: r.into_inner().token, session_id: 0 };
                        let _ = tokio::time::timeout(Duration::from_secs(2), c.release(release)).await;
                    }
                })
            })
            .collect();
        for b in batch {
            let _ = b.await;
        }
    };
    // --- it stopped itself: a non-zero exit a supervisor sees, not a zombie leader
    assert!(!status.success(), "the node exited with success after a fatal storage error: {status}");
    eprintln!("the leader exited with {status} {:?} after its disk filled ({next} acquires sent)", started.elapsed());

    // --- the other two elect a leader and grant
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    let (new, _) = cell.leader_among(&others).await;
    let mut c_new = cell.client(new).await;
    let s2 = session(&mut c_new, TTL_MS).await;
    let t = until_ok("acquire at the new leader", || {
        let mut c = c_new.clone();
        async move { c.acquire(acquire_req(s2, "after", "after-1", 0)).await }
    })
    .await
    .into_inner()
    .token;
    assert!(t > 0);
}

/// Issue #42, disk faults: a leader whose fsyncs fail with EIO stops (exit 1); it
/// answers no grant once it has seen its disk fail, every grant it answered before is
/// in the cell's record, and the other two serve on with larger tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_fsyncs_fail_stops_and_the_cell_serves_on() {
    leader_disk_fails(holdfast_testkit::diskfault::DiskFault::FailSync).await;
}

/// The same with its writes failing (EIO), as a dying disk or a lost volume does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_writes_fail_stops_and_the_cell_serves_on() {
    leader_disk_fails(holdfast_testkit::diskfault::DiskFault::FailWrite).await;
}

async fn leader_disk_fails(fault: holdfast_testkit::diskfault::DiskFault) {
    let mut cell = ProcCell::start_with(Runs { disk_faults: true, ..Runs::default() }).await;
    let (old, _) = cell.leader_among(&[1, 2, 3]).await;
    let c_old = cell.client(old).await;
    let s = session(&mut c_old.clone(), 60_000).await;
    let unix_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    // (lock, token, answered at unix ms): one lock each, held on.
    let mut answered: Vec<(String, u64, u64)> = Vec::new();
    let mut n = 0u64;
    let acquire_at_old = |n: u64| {
        let mut c = c_old.clone();
        async move {
            let name = format!("k{n}");
            let r = tokio::time::timeout(Duration::from_secs(2), c.acquire(acquire_req(s, &name, &format!("r{n}"), 0))).await;
            (name, r)
        }
    };
    for _ in 0..5 {
        n += 1;
        let (name, r) = acquire_at_old(n).await;
        answered.push((name, r.unwrap().unwrap().into_inner().token, unix_ms()));
    }

    eprintln!("--- node {old}'s disk fails ({fault:?}); acquires go on at it");
    cell.disk_fault(old, fault);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = cell.exited(old) {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the leader kept running 60 s after its disk failed");
        n += 1;
        if let (name, Ok(Ok(r))) = acquire_at_old(n).await {
            answered.push((name, r.into_inner().token, unix_ms()));
        }
    };
    assert!(!status.success(), "the node exited with success after its disk failed: {status}");
    let injected = cell.disk_faults_injected(old);
    let first = injected.first().unwrap_or_else(|| panic!("the shim injected nothing into node {old}")).0;
    eprintln!("node {old} exited {status} {:?} after the fault was set; first fault {:?}; {} grants answered", started.elapsed(), injected[0], answered.len());
    // A grant already on its way may land a moment after the first failed call: not
    // one after the node had time to stop on it.
    let late: Vec<_> = answered.iter().filter(|(_, _, at)| *at > first + 1_000).collect();
    assert!(late.is_empty(), "node {old} answered grants more than 1 s after its disk failed: {late:?}");

    eprintln!("--- the other two elect a leader; every grant answered is in its record; tokens grow");
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    let (new, _) = cell.leader_among(&others).await;
    let mut c_new = cell.client(new).await;
    for (name, token, _) in &answered {
        let d = until_ok("describe at the new leader", || {
            let mut c = c_new.clone();
            let req = pb::DescribeRequest { shard: shard(), name: name.clone() };
            async move { c.describe(req).await }
        })
        .await
        .into_inner();
        assert_eq!(holders(&d), vec![(s, *token)], "the acknowledged grant of {name} is not in the cell's record");
    }
    let s2 = session(&mut c_new, TTL_MS).await;
    let t = until_ok("acquire at the new leader", || {
        let mut c = c_new.clone();
        async move { c.acquire(acquire_req(s2, "after", "after-1", 0)).await }
    })
    .await
    .into_inner()
    .token;
    let highest = answered.iter().map(|(_, t, _)| *t).max().unwrap();
    assert!(t > highest, "token {t} after the failover is not above {highest}");
}

/// Issue #15, SIGTERM under load: a leader asked to stop hands leadership over before
/// it stops (the others do not wait out its lease and an election timeout), exits 0,
/// and every grant it acknowledged is in the cell's record afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_by_sigterm_hands_over_first_and_loses_no_acknowledged_grant() {
    let mut cell = ProcCell::start(None).await;
    let (old, old_term) = cell.leader_among(&[1, 2, 3]).await;
    let s = session(&mut cell.client(old).await, 60_000).await;
    let mut clients = Vec::new();
    for id in 1..=3 {
        clients.push(cell.client(id).await);
    }

    // --- a workload: acquires of new names, each through whichever node answers
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let workload = tokio::spawn(async move {
        let mut acked: Vec<(String, u64)> = Vec::new();
        let mut at = 0;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let name = format!("k{}", acked.len());
            let req = acquire_req(s, &name, &format!("r-{name}"), 0);
            match tokio::time::timeout(Duration::from_secs(2), clients[at].acquire(req)).await {
                Ok(Ok(r)) => acked.push((name, r.into_inner().token)),
                // Not the leader, stopping, or unreachable: the same request id elsewhere.
                _ => {
                    at = (at + 1) % clients.len();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        acked
    });
    tokio::time::sleep(Duration::from_secs(1)).await;

    // --- SIGTERM the leader: another node leads within a fraction of the lease
    let sent = Instant::now();
    cell.signal(old, "-TERM");
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    let (_, new_term) = cell.leader_among(&others).await;
    let took = sent.elapsed();
    assert!(new_term > old_term);
    // Without a handover the others wait out the 2 s lease, then an election timeout.
    assert!(took < Duration::from_millis(1_000), "a new leader took {took:?} after SIGTERM: no handover");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = cell.exited(old) {
            break status;
        }
        assert!(Instant::now() < deadline, "the stopped leader did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "a graceful stop must exit 0: {status}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = workload.await.unwrap();
    eprintln!("new leader {took:?} after SIGTERM; {} grants acknowledged", acked.len());
    assert!(acked.len() > 10, "the workload hardly ran: {}", acked.len());

    // --- every acknowledged grant is in the record, with its token
    let (leader, _) = cell.leader_among(&others).await;
    let mut c = cell.client(leader).await;
    for (name, token) in &acked {
        let d = c.describe(pb::DescribeRequest { shard: shard(), name: name.clone() }).await.unwrap().into_inner();
        assert_eq!(holders(&d), vec![(s, *token)], "acknowledged grant of {name} lost");
    }
}

/// Issue #15, kill -9 cycles: a 3-node cell under a lock workload (two sessions cycling
/// acquire and release on three names), one node — any, leader or not — SIGKILLed and
/// restarted every few seconds. The whole history goes through the drills' checker:
/// tokens never go back or repeat, no acknowledged grant is missing from a later read.
/// 40 s in CI; `KILL9_SECS=600` for a long run. The kill order comes from a
/// seed that is printed (`KILL9_SEED` replays it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_lose_no_acknowledged_grant_and_tokens_only_grow() {
    use holdfast_drills::history::{EventKind as K, FaultKind};
    let secs: u64 = std::env::var("KILL9_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("KILL9_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_0015);
    eprintln!("kill -9 cycles: {secs} s, seed {seed}");
    let mut cell = ProcCell::start(None).await;
    let (leader, _) = cell.leader_among(&[1, 2, 3]).await;
    let mut clients = Vec::new();
    for id in 1..=3 {
        clients.push(cell.client(id).await);
    }
    let sessions = [session(&mut cell.client(leader).await, 60_000).await, session(&mut cell.client(leader).await, 60_000).await];
    // Kept alive through whichever node leads, every 5 s (a long run outlives any TTL).
    let keeper = keep_alive(clients.clone(), sessions.to_vec(), Duration::from_secs(5));
    let rec = Recorder::create(&cell.dir.path().join("kill9-history.jsonl")).unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let workers: Vec<_> = sessions.iter().map(|s| tokio::spawn(cycles(rec.clone(), clients.clone(), *s, until))).collect();

    // --- every 3 s, SIGKILL a node picked by the seed; restart it 1 s later
    let mut rng = seed;
    while Instant::now() + Duration::from_secs(4) < until {
        tokio::time::sleep(Duration::from_secs(2)).await;
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let victim = 1 + (rng >> 33) % 3;
        rec.record(K::FaultInjected { kind: FaultKind::KillNode, target: format!("node-{victim}") });
        cell.kill_and_restart_after(victim, Duration::from_secs(1)).await;
    }
    let mut granted = 0;
    for w in workers {
        granted += w.await.unwrap();
    }
    keeper.abort();

    // --- the cell's record of each name, read after everything was acknowledged
    let (leader, _) = cell.leader_among(&[1, 2, 3]).await;
    record_holders(&rec, &cell.client(leader).await, &["a", "b", "c"]).await;
    let history = rec.history();
    let report = holdfast_drills::checker::check(&history);
    eprintln!("{granted} grants acknowledged, {} history lines", history.events.len());
    assert!(report.is_clean(), "seed {seed}: {:#?}\n{:#?}", report.violations, report.malformed);
    assert!(granted >= 20, "seed {seed}: the workload hardly ran ({granted} grants)");
}
