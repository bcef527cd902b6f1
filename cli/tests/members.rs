//! Changing the voters of a running cell with `holdfast cell member`, under a lock
//! workload (issue #16): the node being replaced is the leader, the new node joins as
//! a learner and catches up before it votes, the old leader is then killed, and the
//! cell must need the new node for its quorum. The whole history goes through the
//! drills' checker, and a hold taken before the change is still there after it.

mod common;

use common::proc_cell::*;
use common::BIN;
use holdfast_drills::history::{EventKind as K, FaultKind};
use holdfast_drills::record::Recorder;
use holdfast_proto::lock::v1 as pb;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn cli(args: &[&str]) -> Value {
    let out = Command::new(BIN).args(args).args(["--insecure", "-o", "json"]).env("RUST_LOG", "error").output().unwrap();
    assert!(out.status.success(), "holdfast {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("holdfast {args:?}: not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_the_leader_under_a_lock_workload_loses_no_acknowledged_grant() {
    let mut cell = ProcCell::start(None).await;
    let (leader, _) = cell.leader_among(&[1, 2, 3]).await;
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let (raft4, client4) = cell.spawn_new(4);
    let mut clients = Vec::new();
    for id in 1..=4 {
        clients.push(cell.client(id).await);
    }

    // --- a hold taken before the change, its session kept alive through any node
    let mut c = cell.client(leader).await;
    let keeper_session = session(&mut c, 60_000).await;
    let long = c.acquire(acquire_req(keeper_session, "long", "long-1", 0)).await.expect("acquire long").into_inner().token;
    let sessions = [keeper_session, session(&mut c, 60_000).await, session(&mut c, 60_000).await];
    let keeper = keep_alive(clients.clone(), sessions.to_vec(), Duration::from_secs(2));

    // --- two sessions cycle acquire/release through every node while the leader is replaced
    let rec = Recorder::create(&cell.dir.path().join("members-history.jsonl")).unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    let workers: Vec<_> = sessions[1..].iter().map(|s| tokio::spawn(cycles(rec.clone(), clients.clone(), *s, until))).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let originals = [1, 2, 3].iter().map(|id| cell.node(*id).raft.clone()).collect::<Vec<_>>().join(",");
    rec.record(K::FaultInjected { kind: FaultKind::ReplaceNode, target: format!("node-{leader}") });
    let member = format!("4={raft4},{client4}");
    let after = cli(&["cell", "member", "replace", "--raft-endpoint", &originals, "--old", &leader.to_string(), "--member", &member]);
    let voters = |v: &Value| -> Vec<u64> {
        let mut ids: Vec<u64> = v.as_array().unwrap().iter().filter(|m| m["role"] == "voter").map(|m| m["node_id"].as_u64().unwrap()).collect();
        ids.sort();
        ids
    };
    let mut want: Vec<u64> = survivors.iter().copied().chain([4]).collect();
    want.sort();
    assert_eq!(voters(&after), want, "voters after the replacement: {after}");
    // The old leader has left the group: stop it.
    cell.kill(leader);

    let mut granted = 0;
    for w in workers {
        granted += w.await.unwrap();
    }

    // --- the hold from before the change is intact, at the new leader
    let among: Vec<u64> = survivors.iter().copied().chain([4]).collect();
    let (new_leader, _) = cell.leader_among(&among).await;
    let c = cell.client(new_leader).await;
    let d = until_ok("describe long", || {
        let mut c = c.clone();
        async move { c.describe(pb::DescribeRequest { shard: shard(), name: "long".into() }).await }
    })
    .await
    .into_inner();
    assert_eq!(holders(&d), vec![(keeper_session, long)], "the hold taken before the replacement was lost");

    // --- node 4 votes: with one more original node gone, the cell still commits
    cell.kill(survivors[0]);
    let remaining = [survivors[1], 4];
    let (leader_now, _) = cell.leader_among(&remaining).await;
    let listed = cli(&["cell", "member", "list", "--raft-endpoint", &cell.node(leader_now).raft]);
    assert_eq!(voters(&listed), want, "{listed}");
    let c = cell.client(leader_now).await;
    let token = until_ok("acquire with node 4 in the quorum", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req(sessions[1], "after", "after-1", 0)).await }
    })
    .await
    .into_inner()
    .token;
    assert!(token > long, "tokens went back: {token} after {long}");
    keeper.abort();

    // --- the whole history, read by the checker, with the final state of each name
    record_holders(&rec, &c, &["a", "b", "c"]).await;
    let history = rec.history();
    let report = holdfast_drills::checker::check(&history);
    assert!(report.is_clean(), "{:#?}\n{:#?}", report.violations, report.malformed);
    assert!(granted >= 10, "the workload hardly ran ({granted} grants)");
}
