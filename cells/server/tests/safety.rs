//! The safety holes of issue #42, each on a real 3-node cell: a test that went red on the
//! code before its fix, named after the failure it pins.

mod common;

use common::*;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::raft::v1 as rpb;
use std::time::{Duration, Instant};
use tracing::info;

/// Hole 1: a node that comes back on an empty disk under its old id must not help elect
/// a leader that lost a committed grant.
///
/// The timeline: node 3 lags (cut off) while the leader commits a grant with node 2's
/// acknowledgement; node 2's volume is recreated (it restarts empty under id 2) and the
/// leader dies. Before the fix, node 2 voted for node 3 at once, node 3 led without the
/// grant, and handed the same token out again. Now node 2 refuses every request that
/// names the disk the membership records for it, so nodes 2 and 3 elect nobody until
/// the old leader is back; then tokens only grow, and node 2 serves again only once it
/// is removed and added back as a new member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_on_an_empty_disk_does_not_help_reissue_a_token() {
    let _g = serial().await;
    let mut cell = TestCell::start(0).await;
    let l = cell.leader().await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    let (fresh, lagging) = (others[0], others[1]);
    let mut c = cell.client(l).await;
    let s = create_session(&mut c, 60_000).await;
    let t1 = c.acquire(acquire_req(s, "a", "a-1", 0)).await.unwrap().into_inner().token;

    info!("--- node {lagging} lags; the leader commits a grant with node {fresh}'s acknowledgement");
    cell.faults.isolate(lagging, [l, fresh]);
    let t2 = c.acquire(acquire_req(s, "b", "b-1", 0)).await.unwrap().into_inner().token;
    assert!(t2 > t1);

    info!("--- node {fresh}'s volume is recreated: it restarts empty under its old id; the leader dies");
    cell.wipe_node(fresh).await;
    cell.stop_node(l).await;
    cell.faults.heal_all();

    info!("--- nodes {fresh} and {lagging} must not elect a leader without the grant");
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        for id in [fresh, lagging] {
            if cell.nodes[&id].leads() {
                // Whoever leads must not hand out t2 again.
                let mut c = cell.client(id).await;
                let r = c.acquire(acquire_req(s, "c", "c-1", 0)).await;
                if let Ok(r) = &r {
                    assert!(r.get_ref().token > t2, "node {id} led without the committed grant and issued token {} again", r.get_ref().token);
                }
                panic!("node {id} was elected by a node that lost its disk (acquire answered {r:?})");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cell.nodes[&fresh].raft_node().disk_refusals() > 0, "the empty node was never asked as the member it was");

    info!("--- the old leader is back: a leader with the whole log, and tokens only grow");
    cell.start_node(l).await;
    let leader = cell.leader_among(&[l, lagging]).await;
    let mut c = cell.client(leader).await;
    let t3 = c.acquire(acquire_req(s, "c", "c-1", 0)).await.unwrap().into_inner().token;
    assert!(t3 > t2, "token {t3} after {t2}");

    info!("--- node {fresh} is replaced as a new member: removed, then added on its new disk");
    let mut admin = cell.raft_admin(leader).await;
    let refused = admin.add_learner(rpb::AddLearnerRequest { learner: Some(cell.member(fresh)), blocking: false }).await.unwrap_err();
    assert!(refused.message().contains("remove it"), "{refused:?}");
    let kept: Vec<u64> = [l, lagging].into();
    admin.change_membership(rpb::ChangeMembershipRequest { voters: kept.clone(), keep_removed_as_learners: false }).await.unwrap();
    admin.add_learner(rpb::AddLearnerRequest { learner: Some(cell.member(fresh)), blocking: true }).await.unwrap();
    admin.change_membership(rpb::ChangeMembershipRequest { voters: vec![1, 2, 3], keep_removed_as_learners: false }).await.unwrap();
    info!("--- with node {fresh} back as a voter, the cell survives the loss of another node");
    cell.stop_node(lagging).await;
    let leader = cell.leader_among(&[l, fresh]).await;
    let mut c = cell.client(leader).await;
    let t4 = c.acquire(acquire_req(s, "d", "d-1", 0)).await.unwrap().into_inner().token;
    assert!(t4 > t3);
    cell.shutdown().await;
}

/// Hole 1, the other half: `Initialize` asks every first member for its disk and forms
/// nothing around a member that already holds Raft state (a survivor of a group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_refuses_to_form_a_second_group_around_a_member_with_state() {
    let _g = serial().await;
    let mut cell = TestCell::start(0).await;
    let l = cell.leader().await;
    let wiped = (1..=3).find(|id| *id != l).unwrap();
    cell.wipe_node(wiped).await;
    info!("--- `cell init` run on the wiped node, naming the old members");
    let mut admin = cell.raft_admin(wiped).await;
    let members = (1..=3).map(|id| cell.member(id)).collect();
    let e = admin.initialize(rpb::InitializeRequest { members }).await.unwrap_err();
    assert_eq!(code(&e), "ALREADY_EXISTS", "{e:?}");
    assert!(e.message().contains("already holds Raft state"), "{e:?}");
    info!("--- the old group serves on");
    let mut c = cell.client(cell.leader().await).await;
    let s = create_session(&mut c, TTL_MS).await;
    c.acquire(acquire_req(s, "x", "x-1", 0)).await.unwrap();
    cell.shutdown().await;
}

/// Hole 3: a release was checked against the token's holder when the leader received
/// it, and a token not held yet skipped the check; the entry named no one. Tokens are
/// predictable (`epoch << 40 | seq`): a release of the next token, received while the
/// commit that grants it is still in flight, ended the next holder's hold. Now the
/// entry names the session it was bound to (here nobody: the token was not held), and
/// the table applies it only if that session holds the token then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_the_next_token_sent_before_its_grant_does_not_end_it() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let l = cell.leader().await;
    let mut c = cell.client(l).await;
    let (h, w) = (create_session(&mut c, 60_000).await, create_session(&mut c, 60_000).await);
    let th = c.acquire(acquire_req(h, "x", "h-1", 0)).await.unwrap().into_inner().token;
    let mut cw = c.clone();
    let waiting = tokio::spawn(async move { cw.acquire(acquire_req(w, "x", "w-1", 20_000)).await });
    cell.wait_armed(l).await;

    info!("--- the followers' disks slow down: commits take a second");
    for f in (1..=3).filter(|id| *id != l) {
        cell.faults.slow_disk(f, Duration::from_millis(1_000));
    }
    info!("--- H releases (W is granted the next token in the same entry); before it commits, a release of that token arrives");
    let mut ch = c.clone();
    let release_h = tokio::spawn(async move { ch.release(pb::ReleaseRequest { shard: shard(), name: "x".into(), token: th, session_id: h }).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = th + 1;
    let stray = c.release(pb::ReleaseRequest { shard: shard(), name: "x".into(), token: next, session_id: 0 }).await;
    release_h.await.unwrap().unwrap();
    for f in 1..=3 {
        cell.faults.slow_disk(f, Duration::ZERO);
    }
    let tw = waiting.await.unwrap().unwrap().into_inner().token;
    assert_eq!(tw, next);
    assert_eq!(code(&stray.expect_err("a release of a token not held when sent ended the next holder's hold")), "NOT_HOLDER");
    let d = c.describe(pb::DescribeRequest { shard: shard(), name: "x".into() }).await.unwrap().into_inner();
    assert_eq!(d.holders.iter().map(|h| (h.session_id, h.token)).collect::<Vec<_>>(), vec![(w, tw)], "W's hold was ended by a release it did not send");
    cell.shutdown().await;
}
