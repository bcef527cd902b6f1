//! Three (to five) real nodes over gRPC on loopback with RocksDB in temp dirs: replication,
//! failover, restart and snapshot catch-up, minority partitions, membership changes.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{serial, timings, TestCluster, WAIT};
use holdfast_proto::raft::v1 as pb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use holdfast_raft::testing::AppendLog;
use holdfast_raft::types::ServerState;
use holdfast_raft::{NodeId, RaftTimings, WriteError};
use tracing::info;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_replicate_to_every_node() {
    let _serial = serial().await;
    let mut c = TestCluster::start(3, timings()).await;

    info!("--- write 50 values through the leader");
    let mut last = 0;
    for v in 0..50 {
        last = c.write(v).await.expect("write").index;
    }

    info!("--- every node applies all of them, in order");
    c.wait_applied(&[1, 2, 3], last, "replication").await;
    let want: Vec<u64> = (0..50).collect();
    for id in 1..=3 {
        assert_eq!(c.values(id), want, "node {id}");
    }

    info!("--- restart the whole group; after recovery no node serves less than before");
    for id in 1..=3 {
        c.stop_node(id).await;
    }
    for id in 1..=3 {
        c.start_node(id).await;
    }
    for id in 1..=3 {
        c.nodes[&id].wait_for_recovery(WAIT).await.expect("recovery");
        assert_eq!(c.values(id), want, "node {id} after restart");
    }
    let idx = c.write(50).await.expect("write after restart").index;
    assert!(idx > last);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_leader_after_leader_shutdown_holds_every_committed_entry() {
    let _serial = serial().await;
    let mut c = TestCluster::start(3, timings()).await;

    info!("--- commit 20 values");
    let mut acked = Vec::new();
    for v in 0..20 {
        c.write(v).await.expect("write");
        acked.push(v);
    }
    let old = c.leader(WAIT).await;
    let old_term = c.nodes[&old].metrics().current_term;

    info!(old, "--- shut the leader down");
    c.stop_node(old).await;
    let rest: Vec<NodeId> = c.nodes.keys().copied().collect();
    let new = c.leader_among(&rest, WAIT).await;
    assert_ne!(new, old);
    assert!(c.nodes[&new].metrics().current_term > old_term, "a new term");

    info!(new, "--- the new leader commits, and holds every acknowledged value");
    let idx = c.write(20).await.expect("write to new leader").index;
    acked.push(20);
    c.wait_applied(&rest, idx, "after failover").await;
    for id in &rest {
        assert_eq!(c.values(*id), acked, "node {id}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_catches_up_through_a_snapshot() {
    let _serial = serial().await;
    // Snapshot every 20 entries and keep no log behind it: a node that misses more than
    // that cannot be fed from the log.
    let t = RaftTimings { snapshot_every_logs: 20, logs_kept_after_snapshot: 0, ..timings() };
    let mut c = TestCluster::start(3, t).await;
    let mut last = 0;
    for v in 0..10 {
        last = c.write(v).await.expect("write").index;
    }
    let leader = c.leader(WAIT).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    c.wait_applied(&[follower], last, "before stop").await;
    let follower_last_log = c.nodes[&follower].metrics().last_log_index.expect("log");

    info!(follower, "--- stop a follower, write 100 more; the leader snapshots and purges");
    c.stop_node(follower).await;
    for v in 10..110 {
        last = c.write(v).await.expect("write").index;
    }
    let purged = c
        .raft(leader)
        .wait(Some(WAIT))
        .metrics(|m| m.purged.as_ref().is_some_and(|p| p.index > follower_last_log + 20), "leader purged past the follower's log")
        .await
        .expect("leader purges")
        .purged
        .expect("purged")
        .index;

    info!(follower, purged, "--- restart the follower from its directory");
    c.start_node(follower).await;
    c.wait_applied(&[follower], last, "catch-up after restart").await;
    let want: Vec<u64> = (0..110).collect();
    assert_eq!(c.values(follower), want);
    let m = c.nodes[&follower].metrics();
    let snap = m.snapshot.expect("the follower holds a snapshot").index;
    assert!(snap >= purged, "caught up through the leader's snapshot ({snap} >= {purged})");

    info!("--- and it keeps following: one more write reaches it");
    let idx = c.write(110).await.expect("write").index;
    c.wait_applied(&[1, 2, 3], idx, "after catch-up").await;
    assert_eq!(c.values(follower).len(), 111);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_cut_off_cannot_commit_while_majority_moves_on() {
    let _serial = serial().await;
    let c = TestCluster::start(3, timings()).await;
    for v in 0..5 {
        c.write(v).await.expect("write");
    }
    let old = c.leader(WAIT).await;
    let others: Vec<NodeId> = (1..=3).filter(|id| *id != old).collect();
    let committed_before = c.nodes[&old].metrics().local_committed.expect("committed").index;

    info!(old, "--- cut the leader off from both followers");
    c.faults.isolate(old, 1..=3);
    let isolated_write = tokio::time::timeout(Duration::from_secs(3), c.nodes[&old].write(AppendLog::command(999))).await;
    match &isolated_write {
        Err(_elapsed) => info!("isolated write timed out (outcome unknown, as it must be)"),
        Ok(Err(e)) => info!(error = %e, "isolated write refused"),
        Ok(Ok(a)) => panic!("a cut-off leader committed a write at {}", a.index),
    }

    info!("--- the majority elects a new leader and commits");
    // Two followers may race for the term once they lose the leader: retry on the
    // leader of the moment until one commits, within the deadline.
    let deadline = std::time::Instant::now() + WAIT;
    let applied = loop {
        let new = c.leader_among(&others, WAIT).await;
        match c.nodes[&new].write(AppendLog::command(5)).await {
            Ok(a) => break a,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "the majority never committed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    c.wait_applied(&others, applied.index, "majority").await;
    let old_m = c.nodes[&old].metrics();
    assert!(old_m.local_committed.as_ref().map_or(0, |l| l.index) <= committed_before, "the cut-off node committed nothing new: {:?}", old_m.local_committed);

    info!("--- heal; the old leader steps down and converges, without its unknown write");
    c.faults.heal_all();
    c.wait_applied(&[old], applied.index, "old leader after heal").await;
    let leader = c.leader(WAIT).await;
    assert_ne!(leader, old, "the old leader misses a committed entry; it cannot win an election");
    let want: Vec<u64> = (0..6).collect();
    for id in 1..=3 {
        assert_eq!(c.values(id), want, "node {id}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_while_writes_go_on() {
    let _serial = serial().await;
    let mut c = TestCluster::start(3, timings()).await;
    c.start_node(4).await;

    info!("--- a writer keeps writing through whoever leads");
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let rafts: Vec<(NodeId, holdfast_raft::Raft<AppendLog>)> = c.nodes.iter().map(|(id, n)| (*id, n.raft().clone())).collect();
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        tokio::spawn(async move {
            let mut target = 1;
            let mut v = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let raft = &rafts.iter().find(|(id, _)| *id == target).expect("known node").1;
                let res = tokio::time::timeout(Duration::from_secs(5), raft.client_write(holdfast_raft::Request::new(AppendLog::command(v)))).await;
                match res.map(|r| r.map_err(WriteError::from)) {
                    Ok(Ok(r)) => {
                        acked.lock().unwrap().push((v, r.log_id.index));
                        v += 1;
                    }
                    Ok(Err(WriteError::NotLeader { leader_id: Some(l), .. })) => target = l,
                    Ok(Err(WriteError::NoQuorum)) => tokio::time::sleep(Duration::from_millis(50)).await,
                    // Unknown outcome: move on to a new value, never count it as acked.
                    _ => {
                        v += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        })
    };

    let leader = c.leader_among(&[1, 2, 3], WAIT).await;
    let channel = holdfast_rpc::Transport::insecure().connect(&c.nodes[&leader].raft_addr().to_string()).await.expect("admin client");
    let mut admin = RaftAdminClient::new(channel);
    let n4 = c.nodes[&4].node().clone();

    info!("--- add node 4 as a learner (blocking until it caught up), over the admin gRPC API");
    admin
        .add_learner(pb::AddLearnerRequest {
            learner: Some(pb::Member { node_id: 4, raft_addr: n4.raft_addr.clone(), client_addr: n4.client_addr.clone() }),
            blocking: true,
        })
        .await
        .expect("add learner");

    info!("--- promote it: voters {{1,2,3,4}}");
    admin.change_membership(pb::ChangeMembershipRequest { voters: vec![1, 2, 3, 4], keep_removed_as_learners: false }).await.expect("promote");

    let removed = (1..=3).find(|id| *id != leader).expect("a follower");
    let voters: Vec<NodeId> = (1..=4).filter(|id| *id != removed).collect();
    info!(removed, "--- remove a voter");
    let resp = admin
        .change_membership(pb::ChangeMembershipRequest { voters: voters.clone(), keep_removed_as_learners: false })
        .await
        .expect("remove voter")
        .into_inner();
    let m = resp.membership.expect("membership");
    assert_eq!(m.configs.len(), 1, "joint config finished");
    assert_eq!(m.configs[0].node_ids, voters);
    assert!(!m.nodes.contains_key(&removed));

    let metrics = admin.metrics(pb::MetricsRequest {}).await.expect("metrics").into_inner();
    assert!(metrics.has_leader && metrics.leader_id == leader && metrics.server_state == "Leader");
    assert_eq!(metrics.membership.expect("membership").configs[0].node_ids, voters);

    info!("--- a few more writes under the new membership, then stop the writer");
    let seen = acked.lock().unwrap().len();
    let deadline = tokio::time::Instant::now() + WAIT;
    while acked.lock().unwrap().len() < seen + 10 {
        assert!(tokio::time::Instant::now() < deadline, "writes stalled after the membership change");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 10, "writes went on during the changes: {}", acked.len());
    // The index each write was acknowledged at (the leader's metrics may lag its acks).
    let last = acked.iter().map(|(_, index)| *index).max().expect("acked");
    let acked: Vec<u64> = acked.into_iter().map(|(v, _)| v).collect();

    info!(acked = acked.len(), "--- every acknowledged write is on every remaining voter, once");
    c.wait_applied(&voters, last, "final").await;
    for id in &voters {
        let values = c.values(*id);
        let set: BTreeSet<u64> = values.iter().copied().collect();
        assert_eq!(set.len(), values.len(), "node {id}: no value applied twice");
        let missing: Vec<u64> = acked.iter().copied().filter(|v| !set.contains(v)).collect();
        assert!(
            missing.is_empty(),
            "node {id} lacks acknowledged values {missing:?}; it has {values:?}; acked {acked:?}; others: {:?}",
            voters.iter().map(|i| (*i, c.values(*i))).collect::<Vec<_>>()
        );
    }
    assert!(matches!(c.nodes[&4].metrics().state, ServerState::Follower | ServerState::Leader), "node 4 votes");
    c.shutdown().await;
}

/// An InstallSnapshot stream is bounded by what arrives, never by what its header
/// claims: a header announcing a terabyte is refused before anything is allocated,
/// and a transfer that stops half-way is refused as truncated. The node serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_header_claiming_too_much_is_refused_and_the_node_serves_on() {
    use holdfast_proto::raft::v1::install_snapshot_request::Part;
    use holdfast_raft::MAX_SNAPSHOT_BYTES;
    let _serial = serial().await;
    let c = TestCluster::start(3, timings()).await;
    let leader = c.leader(WAIT).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let mut raft = raw_raft_client(&c, follower).await;
    let header = |total_bytes: u64| pb::InstallSnapshotRequest {
        part: Some(Part::Header(pb::SnapshotHeader {
            vote: Some(pb::Vote { leader_id: Some(pb::LeaderId { term: 1, node_id: leader }), committed: true }),
            meta: Some(pb::SnapshotMeta {
                last_log_id: None,
                last_membership_log_id: None,
                last_membership: Some(pb::Membership {
                    configs: vec![pb::NodeIdSet { node_ids: vec![1, 2, 3] }],
                    nodes: (1..=3).map(|id| (id, pb::Node::default())).collect(),
                }),
            }),
            total_bytes,
        })),
    };
    let rss_before = holdfast_testkit::rss_bytes(None);
    for claimed in [1u64 << 40, u64::MAX, MAX_SNAPSHOT_BYTES + 1] {
        let e = raft.install_snapshot(tokio_stream::iter(vec![header(claimed)])).await.expect_err("a snapshot over the cap");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("accepts at most"), "refused for its size, not its shape: {e:?}");
    }
    // Under the cap but cut short: 1 KiB of an announced 512 MiB.
    let parts = vec![header(512 << 20), pb::InstallSnapshotRequest { part: Some(Part::Chunk(vec![7; 1024])) }];
    let e = raft.install_snapshot(tokio_stream::iter(parts)).await.expect_err("a truncated snapshot");
    assert_eq!(e.code(), tonic::Code::DataLoss, "{e:?}");
    let grown = holdfast_testkit::rss_bytes(None).saturating_sub(rss_before);
    assert!(grown < 64 << 20, "the claims made this process grow by {} MiB", grown >> 20);

    still_follows(&c, follower, "after the refused snapshots").await;
    c.shutdown().await;
}

/// Issue #15, item 4: the leader lease rests on followers that acknowledged the leader
/// refusing to vote for anyone else until the lease has passed. openraft keeps that
/// memory in RAM: a follower that restarts forgets it and would vote at once, so a
/// candidate could win while the old leader, cut off but alive, still believes its
/// lease and confirms renewals. A restarted node therefore grants no vote and no
/// pre-vote, and campaigns for none, for one lease (the longest election timeout)
/// after it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_grants_no_vote_until_the_old_leaders_lease_has_passed() {
    use holdfast_proto::raft::v1::raft_service_client::RaftServiceClient;
    let _serial = serial().await;
    let mut c = TestCluster::start(3, timings()).await;
    let leader = c.leader(WAIT).await;
    let idx = c.write(1).await.expect("write").index;
    c.wait_applied(&[1, 2, 3], idx, "before the restart").await;
    let (f, other) = {
        let mut fs = (1..=3).filter(|id| *id != leader);
        (fs.next().unwrap(), fs.next().unwrap())
    };
    let term = c.nodes[&leader].metrics().current_term;

    info!("--- follower {f} restarts, and the leader's heartbeats no longer reach it");
    c.faults.set_unreachable(leader, f);
    c.stop_node(f).await;
    c.start_node(f).await;
    let started = tokio::time::Instant::now();

    info!("--- at once, node {other} asks it for a (pre-)vote at the next term");
    let channel = holdfast_rpc::Transport::insecure().connect(&c.nodes[&f].raft_addr().to_string()).await.expect("raft client");
    let mut raft = RaftServiceClient::new(channel);
    let ask = || pb::VoteRequest {
        vote: Some(pb::Vote { leader_id: Some(pb::LeaderId { term: term + 1, node_id: other }), committed: false }),
        last_log_id: Some(pb::LogId { leader_id: Some(pb::LeaderId { term, node_id: leader }), index: idx + 100 }),
        leadership_transfer: false,
    };
    let pre = raft.pre_vote(ask()).await;
    let vote = raft.vote(ask()).await;
    let lease = Duration::from_millis(timings().election_max_ms);
    assert!(started.elapsed() < lease, "the asks took too long to prove anything");
    for (what, answer) in [("pre-vote", pre), ("vote", vote)] {
        match answer {
            Ok(r) => assert!(!r.into_inner().vote_granted, "the restarted follower granted a {what} within its first lease"),
            Err(e) => assert!(e.message().contains("quiet"), "{what} refused for another reason: {e:?}"),
        }
    }

    info!("--- healed, the group settles on one leader and writes go on");
    c.faults.heal_all();
    c.leader(WAIT).await;
    let idx = c.write(2).await.expect("write after").index;
    c.wait_applied(&[1, 2, 3], idx, "after").await;
    c.shutdown().await;
}

/// Replication runs as one `StreamAppend` stream per follower. A request on it that does
/// not decode ends the stream with `INVALID_ARGUMENT`; the follower serves on, and the
/// leader's own stream to it still carries writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_on_a_replication_stream_is_refused_and_the_node_serves_on() {
    use futures_util::StreamExt;
    let _serial = serial().await;
    let c = TestCluster::start(3, timings()).await;
    let leader = c.leader(WAIT).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let mut raft = raw_raft_client(&c, follower).await;
    // No vote: not an AppendEntries a leader could send.
    let mut answers = raft.stream_append(tokio_stream::iter(vec![pb::AppendEntriesRequest::default()])).await.expect("the stream opens").into_inner();
    let e = answers.next().await.expect("an answer").expect_err("a malformed request refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(answers.next().await.is_none(), "the stream ends after the refusal");

    still_follows(&c, follower, "after the refused stream").await;
    c.shutdown().await;
}

/// A follower that takes the replication stream and stops answering (frozen, or its
/// packets dropped) must not wedge replication: once an answer is overdue by the RPC's
/// soft TTL the stream ends with a timeout, and openraft opens a new one. A stream with
/// nothing unanswered is idle, not stalled, and stays open. Nothing is dialled before
/// openraft yields the first request (its backoff from an unreachable peer lives in the
/// request stream). And a peer of an older version, without the stream, is replicated
/// to one unary request at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replication_stream_times_out_an_idle_one_stays_open_an_unreachable_peer_is_not_dialled_early_and_an_old_peer_gets_unary_calls() {
    use std::pin::Pin;

    use futures_util::{Stream, StreamExt};
    use holdfast_proto::raft::v1::raft_service_server::{RaftService, RaftServiceServer};
    use holdfast_raft::types::{AppendEntriesRequest, LeaderId, RpcError, Vote};
    use holdfast_raft::{GrpcNetworkFactory, NetworkOptions, Node};
    use openraft::network::{RPCOption, RaftNetworkV2};
    use tonic::{Request, Response, Status, Streaming};

    /// With `streams`, answers the first request of a replication stream and then no
    /// other; without, knows no `StreamAppend` and answers unary AppendEntries.
    struct Peer {
        streams: bool,
    }
    type Answers = Pin<Box<dyn Stream<Item = Result<pb::StreamAppendResponse, Status>> + Send>>;
    #[tonic::async_trait]
    impl RaftService for Peer {
        type StreamAppendStream = Answers;
        async fn stream_append(&self, r: Request<Streaming<pb::AppendEntriesRequest>>) -> Result<Response<Answers>, Status> {
            if !self.streams {
                return Err(Status::unimplemented("StreamAppend"));
            }
            let mut inbound = r.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                let matched = pb::stream_append_response::Result::Matched(pb::stream_append_response::Matched { log_id: None });
                if inbound.next().await.is_some() {
                    let _ = tx.send(Ok(pb::StreamAppendResponse { result: Some(matched) })).await;
                }
                while inbound.next().await.is_some() {}
                drop(tx);
            });
            Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
        }
        async fn append_entries(&self, _: Request<pb::AppendEntriesRequest>) -> Result<Response<pb::AppendEntriesResponse>, Status> {
            let success = pb::append_entries_response::Result::Success(pb::append_entries_response::Success {});
            Ok(Response::new(pb::AppendEntriesResponse { result: Some(success) }))
        }
        async fn vote(&self, _: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
            Err(Status::unimplemented("test peer"))
        }
        async fn pre_vote(&self, _: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
            Err(Status::unimplemented("test peer"))
        }
        async fn install_snapshot(&self, _: Request<Streaming<pb::InstallSnapshotRequest>>) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
            Err(Status::unimplemented("test peer"))
        }
        async fn transfer_leader(&self, _: Request<pb::TransferLeaderRequest>) -> Result<Response<pb::TransferLeaderResponse>, Status> {
            Err(Status::unimplemented("test peer"))
        }
        async fn identify(&self, _: Request<pb::IdentifyRequest>) -> Result<Response<pb::IdentifyResponse>, Status> {
            Err(Status::unimplemented("test peer"))
        }
    }
    async fn serve(peer: Peer) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let transport = holdfast_rpc::Transport::insecure();
        let router = transport.grpc_server().add_service(RaftServiceServer::new(peer));
        tokio::spawn(async move { transport.serve_grpc(router, listener, std::future::pending()).await });
        addr
    }
    let heartbeat = || AppendEntriesRequest {
        vote: Vote { leader_id: LeaderId { term: 1, node_id: 1 }, committed: true },
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    let factory = GrpcNetworkFactory::new(1, NetworkOptions::default(), holdfast_rpc::Transport::insecure());
    let option = RPCOption::new(Duration::from_millis(200));
    let soft_ttl = option.soft_ttl();

    info!("--- a follower that answers once, then goes mute: idle, then stalled");
    let addr = serve(Peer { streams: true }).await;
    let mut conn = factory.connect(2, &Node::new(&addr, &addr));
    let (tx, rx) = tokio::sync::mpsc::channel::<AppendEntriesRequest>(4);
    tx.send(heartbeat()).await.expect("send");
    let mut answers = conn.stream_append(tokio_stream::wrappers::ReceiverStream::new(rx), option.clone()).await.expect("the stream opens");
    let first = answers.next().await;
    assert!(matches!(first, Some(Ok(Ok(None)))), "the first request answered: {first:?}");
    assert!(tokio::time::timeout(soft_ttl * 4, answers.next()).await.is_err(), "an idle stream ended");
    tx.send(heartbeat()).await.expect("send");
    let sent = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), answers.next()).await.expect("a stalled stream must end, not hang");
    assert!(matches!(answer, Some(Err(RpcError::Timeout(_)))), "{answer:?}");
    assert!(sent.elapsed() >= soft_ttl, "timed out after {:?}, before the soft TTL {soft_ttl:?}", sent.elapsed());
    assert!(answers.next().await.is_none(), "nothing after the timeout");
    drop(answers);

    info!("--- an unreachable follower: nothing is dialled before openraft yields a request");
    // openraft backs off inside the request stream; a dial before it would make every
    // refused connection an immediate retry (a tight reconnect loop).
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr").to_string();
    let mut conn = factory.connect(4, &Node::new(&closed, &closed));
    let waiting = conn.stream_append(futures_util::stream::pending::<AppendEntriesRequest>(), option.clone());
    assert!(tokio::time::timeout(soft_ttl * 2, waiting).await.is_err(), "it dialled before the first request");
    let refused = conn.stream_append(tokio_stream::iter(vec![heartbeat()]), option.clone()).await.err();
    assert!(matches!(refused, Some(RpcError::Unreachable(_))), "{refused:?}");

    info!("--- a follower of an older version, without the stream");
    let addr = serve(Peer { streams: false }).await;
    let mut conn = factory.connect(3, &Node::new(&addr, &addr));
    let refused = conn.stream_append(tokio_stream::iter(vec![heartbeat()]), option.clone()).await.err();
    assert!(matches!(refused, Some(RpcError::Network(_))), "the first stream is refused: {refused:?}");
    let answers: Vec<_> = conn.stream_append(tokio_stream::iter(vec![heartbeat(), heartbeat()]), option).await.expect("unary from now on").collect().await;
    assert!(matches!(answers.as_slice(), [Ok(Ok(None)), Ok(Ok(None))]), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_lost_its_majority_for_good_comes_back_as_a_new_group_of_its_survivor() {
    use holdfast_raft::recover::{read_stopped, write_new_member, RecoverError};
    let _serial = serial().await;
    // Snapshots every 20 entries, 5 kept behind: the survivor holds a snapshot and a log
    // after it, and a recovery must read both.
    let t = RaftTimings { snapshot_every_logs: 20, logs_kept_after_snapshot: 5, ..timings() };
    let mut c = TestCluster::start(3, t).await;
    for v in 0..30 {
        c.write(v).await.expect("write");
    }
    let survivor = 2;
    c.wait_applied(&[survivor], c.nodes[&1].metrics().last_applied.expect("applied").index, "before the loss").await;
    assert!(matches!(read_stopped(&c.dir(survivor), AppendLog::default()), Err(RecoverError::Locked { .. })), "a running node's directory is refused");

    info!("--- nodes 1 and 3 are lost for good; the survivor is stopped for its recovery");
    c.stop_node(1).await;
    c.stop_node(3).await;
    c.stop_node(survivor).await;
    let copy = read_stopped(&c.dir(survivor), AppendLog::default()).expect("read the survivor");
    let want: Vec<u64> = (0..30).collect();
    assert_eq!(copy.state.values, want, "the snapshot and the log after it");
    assert!(copy.replayed > 0, "entries after the snapshot were replayed");
    assert_eq!(copy.members.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(copy.node_id, survivor);
    let node = holdfast_raft::Node::new(c.addr(survivor).to_string(), c.addr(survivor).to_string());
    let snapshot = holdfast_raft::ReplicatedState::snapshot(&copy.state);
    assert!(
        matches!(
            write_new_member(&c.dir(survivor), survivor, node.clone(), snapshot.clone(), copy.last_log_id, copy.term),
            Err(RecoverError::TargetNotEmpty(_))
        ),
        "a recovery never writes over a directory"
    );
    let lost = c.dir(survivor).with_extension("lost");
    std::fs::rename(c.dir(survivor), &lost).expect("keep the survivor's directory aside");
    write_new_member(&c.dir(survivor), survivor, node, snapshot, copy.last_log_id, copy.term).expect("write the new member");

    info!("--- the survivor alone is the new group: it elects itself, holds every value, takes writes");
    c.start_node(survivor).await;
    assert_eq!(c.leader_among(&[survivor], WAIT).await, survivor);
    assert_eq!(c.values(survivor), want);
    let idx = c.write(30).await.expect("a write to the new group").index;
    assert!(idx > copy.last_log_id.index, "the new group's log goes on after the copy's");
    assert!(c.nodes[&survivor].metrics().current_term > copy.term, "and in a later term");

    info!("--- a pristine node 4 joins with the ordinary member commands");
    c.start_node(4).await;
    let channel = holdfast_rpc::Transport::insecure().connect(&c.nodes[&survivor].raft_addr().to_string()).await.expect("admin client");
    let mut admin = RaftAdminClient::new(channel);
    let n4 = c.nodes[&4].node().clone();
    admin
        .add_learner(pb::AddLearnerRequest { learner: Some(pb::Member { node_id: 4, raft_addr: n4.raft_addr, client_addr: n4.client_addr }), blocking: true })
        .await
        .expect("add learner");
    admin.change_membership(pb::ChangeMembershipRequest { voters: vec![survivor, 4], keep_removed_as_learners: false }).await.expect("promote");

    info!("--- a lost member that comes back on its old disk is not folded in");
    c.start_node(1).await;
    let leader = c.leader_among(&[survivor, 4], WAIT).await;
    let idx = c.nodes[&leader].write(AppendLog::command(31)).await.expect("write with both voters").index;
    c.wait_applied(&[survivor, 4], idx, "after the member was added").await;
    assert_eq!(c.values(4), (0..32).collect::<Vec<_>>());
    assert_eq!(c.values(1), want, "the lost member took nothing from the new group");
    let members = c.nodes[&survivor].metrics().membership_config.membership().voter_ids().collect::<Vec<_>>();
    assert_eq!(members, vec![survivor, 4]);
    c.stop_node(1).await;
    c.shutdown().await;
}

/// A bare `RaftService` client to node `id`, as a misbehaving peer would dial it.
async fn raw_raft_client(c: &TestCluster, id: NodeId) -> holdfast_proto::raft::v1::raft_service_client::RaftServiceClient<holdfast_rpc::Channel> {
    let channel = holdfast_rpc::Transport::insecure().connect(&c.nodes[&id].raft_addr().to_string()).await.expect("raft client");
    holdfast_proto::raft::v1::raft_service_client::RaftServiceClient::new(channel)
}

/// After a refused request, `follower` still follows: a write reaches every node.
async fn still_follows(c: &TestCluster, follower: NodeId, after: &str) {
    let idx = c.write(1).await.expect("write").index;
    c.wait_applied(&[1, 2, 3], idx, after).await;
    assert_eq!(c.values(follower), vec![1]);
}
