//! A 3-node registry over real gRPC on loopback, RocksDB in temp dirs. Each test reads
//! as phases; names say what they pin.

mod common;

use common::*;
use holdfast_proto::registry::v1 as pb;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;
use tracing::info;

const LEASE: Duration = Duration::from_millis(LEASE_MS);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_is_served_and_bad_inputs_get_codes_and_change_nothing() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let leader = reg.leader().await;
    let mut c = reg.client(leader).await;

    info!("--- regions, cells, a namespace and a shard");
    topology(&mut c).await;
    let o = owner(&mut c, "pay", "default").await;
    assert_eq!((o.region.as_str(), o.cell.as_str(), o.epoch, o.state), ("east", "east-1", 1, pb::ShardState::Active as i32));
    let ns = c.get_namespace(pb::GetNamespaceRequest { name: "pay".into() }).await.unwrap().into_inner().config.unwrap();
    assert_eq!((ns.version, ns.lock_delay_ms), (1, Some(1_000)));

    info!("--- a follower answers NOT_LEADER with the leader's client address");
    let follower = *reg.nodes.keys().find(|id| **id != leader).unwrap();
    let e = reg.client(follower).await.get_owner(pb::GetOwnerRequest { ns: "pay".into(), shard: String::new(), fresh: false }).await.unwrap_err();
    assert_eq!(code(&e), "NOT_LEADER");
    let hint = holdfast_rpc::status::leader_of(&e).expect("a leader hint");
    assert_eq!(hint, reg.client_addr(leader).to_string());

    info!("--- an evacuated region to move into");
    c.create_region(pb::CreateRegionRequest { region: "gone".into() }).await.unwrap();
    c.register_cell(pb::RegisterCellRequest { cell: "gone-1".into(), region: "gone".into(), members: members(9000) }).await.unwrap();
    c.set_region_state(pb::SetRegionStateRequest { region: "gone".into(), state: pb::RegionState::Evacuated as i32 }).await.unwrap();

    info!("--- bad inputs, each refused with its code, each changing nothing");
    let before = listing(&mut c).await;
    let mut inverted = ns_config("fresh");
    inverted.ttl_min_ms = 10_000;
    inverted.ttl_max_ms = 5_000;
    let cases: Vec<(&str, &str, Result<(), tonic::Status>)> = vec![
        (
            "unknown region",
            "INVALID_ARGUMENT",
            c.register_cell(pb::RegisterCellRequest { cell: "mars-1".into(), region: "mars".into(), members: members(1) }).await.map(drop),
        ),
        (
            "unknown region state change",
            "INVALID_ARGUMENT",
            c.set_region_state(pb::SetRegionStateRequest { region: "mars".into(), state: pb::RegionState::Draining as i32 }).await.map(drop),
        ),
        ("duplicate namespace", "ALREADY_EXISTS", c.create_namespace(pb::CreateNamespaceRequest { config: Some(ns_config("pay")) }).await.map(drop)),
        ("inverted ttl bounds", "INVALID_ARGUMENT", c.create_namespace(pb::CreateNamespaceRequest { config: Some(inverted) }).await.map(drop)),
        (
            "move to an evacuated region",
            "INVALID_ARGUMENT",
            c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: String::new(), to_cell: "gone-1".into(), planned: true, ..Default::default() })
                .await
                .map(drop),
        ),
        (
            "move to the same cell",
            "INVALID_ARGUMENT",
            c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: String::new(), to_cell: "east-1".into(), planned: true, ..Default::default() })
                .await
                .map(drop),
        ),
        ("unknown shard", "UNKNOWN_SHARD", c.get_owner(pb::GetOwnerRequest { ns: "pay".into(), shard: "nope".into(), fresh: false }).await.map(drop)),
        ("unknown namespace", "UNKNOWN_NAMESPACE", c.get_namespace(pb::GetNamespaceRequest { name: "ghost".into() }).await.map(drop)),
        ("malformed name", "INVALID_ARGUMENT", c.create_region(pb::CreateRegionRequest { region: "Not A Name".into() }).await.map(drop)),
        (
            "stale namespace version",
            "CONFLICT",
            c.update_namespace(pb::UpdateNamespaceRequest { config: Some(ns_config("pay")), expected_version: 7 }).await.map(drop),
        ),
        (
            "renewal of an unknown cell",
            "INVALID_ARGUMENT",
            c.renew_ownership(pb::RenewOwnershipRequest { cell: "nope".into(), ..Default::default() }).await.map(drop),
        ),
    ];
    for (what, want, got) in cases {
        let e = got.expect_err(what);
        assert_eq!(code(&e), want, "{what}: {}", e.message());
        assert!(!e.message().is_empty());
    }
    assert_eq!(listing(&mut c).await, before, "a refused call changed the registry");

    info!("--- a move of a shard already moving is MOVING, and changes nothing");
    c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: String::new(), to_cell: "west-1".into(), planned: true, ..Default::default() }).await.unwrap();
    let before = listing(&mut c).await;
    let e = c
        .move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: String::new(), to_cell: "west-1".into(), planned: false, ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(code(&e), "MOVING", "{}", e.message());
    assert!(e.message().contains("already moving"), "{}", e.message());
    assert_eq!(listing(&mut c).await, before);
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_move_drains_the_source_and_its_seal_hands_over_at_the_next_epoch() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;

    info!("--- the source's renewal covers the shard; the target's does not");
    let r = renew(&mut c, "east-1").await;
    assert_eq!(r.lease_ms, LEASE_MS);
    assert_eq!(r.shards.iter().map(|s| (s.ns.as_str(), s.epoch, s.draining)).collect::<Vec<_>>(), vec![("pay", 1, false)]);
    assert_eq!(r.configs.iter().map(|c| (c.name.as_str(), c.version)).collect::<Vec<_>>(), vec![("pay", 1)]);
    assert!(renew(&mut c, "west-1").await.shards.is_empty());

    info!("--- begin a planned move: the source drains, the target still has nothing");
    let o = c
        .move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "west-1".into(), planned: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .owner
        .unwrap();
    assert_eq!((o.state, o.to_cell.as_str(), o.epoch), (pb::ShardState::Moving as i32, "west-1", 1));
    let r = renew(&mut c, "east-1").await;
    assert!(r.shards[0].draining, "the source must drain");
    assert!(renew(&mut c, "west-1").await.shards.is_empty());
    // A planned move never completes on a timer: still moving after a full lease.
    tokio::time::sleep(LEASE + Duration::from_millis(GRACE_MS + 300)).await;
    assert_eq!(owner(&mut c, "pay", "default").await.state, pb::ShardState::Moving as i32);

    info!("--- the source seals and reports its highest token");
    let highest = (1u64 << 40) | 17;
    let report = pb::ReportSealedRequest { ns: "pay".into(), shard: "default".into(), epoch: 1, highest_token: highest, held_locks: vec!["settle".into()] };
    let o = c.report_sealed(report.clone()).await.unwrap().into_inner().owner.unwrap();
    assert_eq!((o.region.as_str(), o.cell.as_str(), o.epoch, o.state), ("west", "west-1", 2, pb::ShardState::Active as i32));
    let again = c.report_sealed(report).await.unwrap().into_inner().owner.unwrap();
    assert_eq!(again, o, "a retried report gets the same answer");

    info!("--- the target's renewal covers epoch 2 with the held locks delayed; the source's nothing");
    let r = renew(&mut c, "west-1").await;
    assert_eq!(r.shards.len(), 1);
    let s = &r.shards[0];
    assert_eq!((s.epoch, s.draining, s.delayed_locks.clone(), s.previous_unsealed), (2, false, vec!["settle".to_owned()], false));
    assert!(renew(&mut c, "east-1").await.shards.is_empty());
    let e = c
        .report_sealed(pb::ReportSealedRequest { ns: "pay".into(), shard: "default".into(), epoch: 1, highest_token: 5, held_locks: vec![] })
        .await
        .unwrap_err();
    assert_eq!(code(&e), "STALE_EPOCH");
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unplanned_move_completes_only_after_the_sources_lease_ran_out() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;

    // A new leader treats every shard as covered for one lease after its election; let
    // that pass, so that only the renewal below covers the shard.
    tokio::time::sleep(LEASE).await;

    info!("--- the source renews (its lease now covers the shard), then the region 'goes down'");
    let sent = Instant::now();
    let r = renew(&mut c, "east-1").await;
    assert_eq!(r.shards.len(), 1);
    c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "west-1".into(), planned: false, ..Default::default() })
        .await
        .unwrap();

    info!("--- while it waits, a source that still renews is no longer given the shard");
    let r = renew(&mut c, "east-1").await;
    assert!(r.shards.is_empty(), "renewals stop covering a shard in an unplanned move");
    assert!(renew(&mut c, "west-1").await.shards.is_empty(), "the target gets nothing before the epoch bump");

    info!("--- the move completes after the lease, not before");
    let deadline = Instant::now() + WAIT;
    let done = loop {
        let o = owner(&mut c, "pay", "default").await;
        if o.state == pb::ShardState::Active as i32 {
            assert_eq!((o.cell.as_str(), o.region.as_str(), o.epoch), ("west-1", "west", 2));
            break Instant::now();
        }
        assert_eq!(o.epoch, 1);
        // Renewing keeps the cell's lease alive but must not extend the moving shard.
        renew(&mut c, "east-1").await;
        assert!(Instant::now() < deadline, "the unplanned move never completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = done - sent;
    // The registry granted `now + LEASE` with `now` after `sent`, and waits GRACE more.
    let bound = LEASE + Duration::from_millis(GRACE_MS);
    assert!(waited >= bound, "moved after {waited:?}, before the source's {LEASE:?} lease (+ grace) ran out");
    // Lease + grace + the duty tick, with a generous margin for a loaded machine.
    assert!(waited <= LEASE + Duration::from_millis(GRACE_MS + 2_000), "moved only after {waited:?}");
    info!(?waited, "unplanned move completed");

    info!("--- the target adopts epoch 2 knowing the source never sealed");
    let r = renew(&mut c, "west-1").await;
    assert_eq!(r.shards.iter().map(|s| (s.epoch, s.previous_unsealed)).collect::<Vec<_>>(), vec![(2, true)]);
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_continue_after_the_registry_leader_is_killed_and_the_new_leader_waits_a_lease() {
    let _g = serial().await;
    let mut reg = TestRegistry::start().await;
    let l1 = reg.leader().await;
    let mut c = reg.client(l1).await;
    topology(&mut c).await;

    info!("--- kill the registry leader (one region's voter)");
    let killed = Instant::now();
    reg.stop_node(l1).await;
    let l2 = reg.leader().await;
    assert_ne!(l1, l2);
    let mut c = reg.client(l2).await;

    info!("--- the survivors know everything and accept writes");
    assert_eq!(owner(&mut c, "pay", "default").await.epoch, 1);
    c.create_namespace(pb::CreateNamespaceRequest { config: Some(ns_config("search")) }).await.unwrap();
    c.place_shard(pb::PlaceShardRequest { ns: "search".into(), shard: "s1".into(), cell: "west-1".into() }).await.unwrap();
    assert_eq!(owner(&mut c, "search", "s1").await.cell, "west-1");
    let mut updated = ns_config("pay");
    updated.lock_delay_ms = Some(2_000);
    let cfg = c.update_namespace(pb::UpdateNamespaceRequest { config: Some(updated), expected_version: 1 }).await.unwrap().into_inner().config.unwrap();
    assert_eq!((cfg.version, cfg.lock_delay_ms), (2, Some(2_000)));

    info!("--- an unplanned move right away waits out the lease the old leader may have granted");
    c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "west-1".into(), planned: false, ..Default::default() })
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while owner(&mut c, "pay", "default").await.epoch != 2 {
        assert!(Instant::now() < deadline, "the unplanned move never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = killed.elapsed();
    let bound = LEASE + Duration::from_millis(GRACE_MS);
    assert!(waited >= bound, "a new leader moved a shard {waited:?} after the old one died, within one lease (+ grace)");
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumed_from_a_revision_misses_nothing() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;
    let start = c.list_shards(pb::ListShardsRequest::default()).await.unwrap().into_inner().revision;
    assert_eq!(start, 1, "the placement is the first ownership event");

    info!("--- a watcher from the start sees the placement and a move begun");
    let mut w = c.watch_ownership(pb::WatchOwnershipRequest { from_revision: 0, ns: String::new() }).await.unwrap().into_inner();
    c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: String::new(), to_cell: "west-1".into(), planned: true, ..Default::default() }).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(tokio::time::timeout(WAIT, w.next()).await.unwrap().unwrap().unwrap());
    }
    info!("--- it disconnects; the move completes and another shard is placed meanwhile");
    drop(w);
    c.report_sealed(pb::ReportSealedRequest { ns: "pay".into(), shard: "default".into(), epoch: 1, highest_token: 0, held_locks: vec![] }).await.unwrap();
    c.place_shard(pb::PlaceShardRequest { ns: "pay".into(), shard: "s2".into(), cell: "east-1".into() }).await.unwrap();

    info!("--- resumed from the last revision it saw, it gets the rest, then live events");
    let last = seen.last().unwrap().revision;
    let mut w = c.watch_ownership(pb::WatchOwnershipRequest { from_revision: last, ns: String::new() }).await.unwrap().into_inner();
    for _ in 0..3 {
        seen.push(tokio::time::timeout(WAIT, w.next()).await.unwrap().unwrap().unwrap());
    }
    c.move_shard(pb::MoveShardRequest { ns: "pay".into(), shard: "s2".into(), to_cell: "west-1".into(), planned: false, ..Default::default() }).await.unwrap();
    seen.push(tokio::time::timeout(WAIT, w.next()).await.unwrap().unwrap().unwrap());

    let revs: Vec<u64> = seen.iter().map(|e| e.revision).collect();
    assert_eq!(revs, (1..=6).collect::<Vec<_>>(), "every change, in order, none twice");
    let moves: Vec<(&str, &str, u32, i32)> = seen.iter().map(|e| (e.shard.as_str(), e.cell.as_str(), e.epoch, e.state)).collect();
    let (active, moving) = (pb::ShardState::Active as i32, pb::ShardState::Moving as i32);
    assert_eq!(
        moves,
        vec![
            ("default", "east-1", 1, active),
            ("default", "east-1", 1, moving),
            ("default", "east-1", 1, moving), // sealed
            ("default", "west-1", 2, active),
            ("s2", "east-1", 1, active),
            ("s2", "east-1", 1, moving),
        ]
    );
    assert!(seen[2].sealed);

    info!("--- a watch of one namespace gets its events only, from the same revisions");
    let mut pay = c.watch_ownership(pb::WatchOwnershipRequest { from_revision: 4, ns: "pay".into() }).await.unwrap().into_inner();
    let mut other = c.watch_ownership(pb::WatchOwnershipRequest { from_revision: 0, ns: "other".into() }).await.unwrap().into_inner();
    let got: Vec<u64> = vec![
        tokio::time::timeout(WAIT, pay.next()).await.unwrap().unwrap().unwrap().revision,
        tokio::time::timeout(WAIT, pay.next()).await.unwrap().unwrap().unwrap().revision,
    ];
    assert_eq!(got, vec![5, 6]);
    assert!(tokio::time::timeout(Duration::from_millis(300), other.next()).await.is_err(), "another namespace's watch saw pay's events");

    info!("--- a revision ahead of the registry is refused");
    let e = c.watch_ownership(pb::WatchOwnershipRequest { from_revision: 1_000, ns: String::new() }).await.map(drop).unwrap_err();
    assert_eq!(code(&e), "INVALID_ARGUMENT");
    reg.shutdown().await;
}

/// Issue #15, item 3: a deposed cell leader (a zombie whose storage failed, or one
/// paused and resumed) renews with a frozen list that lacks what the live leader now
/// serves. Were it believed, every such renewal would restart the shard at the next
/// epoch while the live leader adopts each one: an epoch-bump storm toward the 24-bit
/// limit. Renewals carry the cell leader's term, and a lower one than already seen
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_cell_leaders_renewals_are_refused_and_cause_no_epoch_bump_storm() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;
    let renew_as = |term: u64, serving: Vec<(u32,)>| pb::RenewOwnershipRequest {
        cell: "east-1".into(),
        serving: serving.into_iter().map(|(epoch,)| pb::ServedShard { ns: "pay".into(), shard: "default".into(), epoch }).collect(),
        leader_term: term,
    };

    info!("--- the live leader (term 3) adopts epoch 1, and the answer says it is recorded");
    let r = c.renew_ownership(renew_as(3, vec![])).await.unwrap().into_inner();
    assert_eq!((r.shards[0].epoch, r.shards[0].adopted), (1, false), "not adopted before the cell reports it");
    let r = c.renew_ownership(renew_as(3, vec![(1,)])).await.unwrap().into_inner();
    assert_eq!((r.shards[0].epoch, r.shards[0].adopted), (1, true));

    info!("--- the old leader (term 2) renews with a list that lacks the shard, again and again");
    for round in 0..5 {
        let e = c.renew_ownership(renew_as(2, vec![])).await.unwrap_err();
        assert_eq!(code(&e), "NOT_LEADER", "round {round}: {e:?}");
        // The live leader renews on with what it serves.
        let r = c.renew_ownership(renew_as(3, vec![(1,)])).await.unwrap().into_inner();
        assert_eq!(r.shards[0].epoch, 1, "round {round}: the shard was restarted on a deposed leader's word");
    }
    assert_eq!(owner(&mut c, "pay", "default").await.epoch, 1);

    info!("--- a real loss, reported by the live leader, still restarts the shard once (once the registry leader has led a lease)");
    let deadline = Instant::now() + WAIT;
    while owner(&mut c, "pay", "default").await.epoch == 1 {
        assert!(Instant::now() < deadline, "the live leader's report of a loss never restarted the shard");
        c.renew_ownership(renew_as(3, vec![])).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(owner(&mut c, "pay", "default").await.epoch, 2);

    info!("--- a cell formed again from empty disks starts at term 1: heard once term 3 went quiet for a lease");
    assert_eq!(code(&c.renew_ownership(renew_as(1, vec![])).await.unwrap_err()), "NOT_LEADER");
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let r = c.renew_ownership(renew_as(1, vec![])).await.unwrap().into_inner();
    assert_eq!(r.shards[0].epoch, 2);
    reg.shutdown().await;
}

/// Issue #42: right after a registry election, the new leader had no ownership leases
/// yet and had heard no cell leader's term. A deposed cell leader's renewal then met a
/// fence with a lease of zero, was believed, and its list (lacking the shard the live
/// leader had adopted) restarted the shard at the next epoch. Now the new leader
/// refuses renewals until its leases are built, and restarts no epoch until it has led
/// for a lease (it has heard the live cell leader by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_after_a_registry_election_a_deposed_cell_leaders_renewal_bumps_no_epoch() {
    let _g = serial().await;
    let mut reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;
    let renew_as = |term: u64, serving: Vec<u32>| pb::RenewOwnershipRequest {
        cell: "east-1".into(),
        serving: serving.into_iter().map(|epoch| pb::ServedShard { ns: "pay".into(), shard: "default".into(), epoch }).collect(),
        leader_term: term,
    };
    info!("--- the live cell leader (term 3) adopts epoch 1");
    c.renew_ownership(renew_as(3, vec![])).await.unwrap();
    let r = c.renew_ownership(renew_as(3, vec![1])).await.unwrap().into_inner();
    assert_eq!((r.shards[0].epoch, r.shards[0].adopted), (1, true));

    info!("--- the registry leader is stopped; a new one is elected");
    let old = reg.leader().await;
    reg.stop_node(old).await;
    let new = reg.leader().await;
    let mut c = reg.client(new).await;

    info!("--- the deposed cell leader (term 2) is first to renew with the new registry leader");
    for _ in 0..10 {
        match c.renew_ownership(renew_as(2, vec![])).await {
            Ok(_) => {}
            Err(e) => assert!(["UNAVAILABLE", "NOT_LEADER"].contains(&code(&e).as_str()), "{e:?}"),
        }
        assert_eq!(owner(&mut c, "pay", "default").await.epoch, 1, "a deposed cell leader's renewal restarted the shard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    info!("--- the live leader renews on, at epoch 1");
    let r = c.renew_ownership(renew_as(3, vec![1])).await.unwrap().into_inner();
    assert_eq!((r.shards[0].epoch, r.shards[0].adopted), (1, true));
    reg.shutdown().await;
}

/// Issue #43: an unplanned move waits out the source's ownership lease (35 minutes by
/// default) — unless an operator confirms the source is fenced off. Then it completes
/// at once, and the confirmation and its reason are in the audit log first. It needs a
/// reason and an unplanned move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplanned_move_with_its_fencing_confirmed_completes_at_once_and_is_audited() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;
    let mv = |planned: bool, fence_confirmed: bool, reason: &str| pb::MoveShardRequest {
        ns: "pay".into(),
        shard: "default".into(),
        to_cell: "west-1".into(),
        planned,
        fence_confirmed,
        reason: reason.into(),
    };
    info!("--- refused: no reason; a planned move");
    for bad in [mv(false, true, ""), mv(false, true, "  "), mv(true, true, "east is down")] {
        assert_eq!(code(&c.move_shard(bad).await.unwrap_err()), "INVALID_ARGUMENT");
    }
    assert_eq!(owner(&mut c, "pay", "default").await.epoch, 1, "a refused move changed the owner");

    info!("--- confirmed: the move completes in the call, with no lease waited out");
    let started = Instant::now();
    let o = c.move_shard(mv(false, true, "east-1 powered off (ticket 4711)")).await.unwrap().into_inner().owner.unwrap();
    assert!(started.elapsed() < LEASE, "took {:?}", started.elapsed());
    assert_eq!((o.cell.as_str(), o.epoch, o.state), ("west-1", 2, pb::ShardState::Active as i32), "{o:?}");
    let audit = c.list_audit(pb::ListAuditRequest { after_seq: 0, limit: 0 }).await.unwrap().into_inner().records;
    let confirmed = audit.iter().find(|r| r.action == "fence_confirmed").expect("the confirmation is audited");
    assert!(confirmed.detail.contains("from east-1 to west-1") && confirmed.detail.contains("ticket 4711"), "{confirmed:?}");

    info!("--- an unplanned move already waiting out the lease is completed by a later confirmation");
    let back = |fence_confirmed: bool, reason: &str| pb::MoveShardRequest { to_cell: "east-1".into(), ..mv(false, fence_confirmed, reason) };
    let waiting = c.move_shard(back(false, "")).await.unwrap().into_inner().owner.unwrap();
    assert_eq!((waiting.cell.as_str(), waiting.state), ("west-1", pb::ShardState::Moving as i32), "{waiting:?}");
    let o = c.move_shard(back(true, "west-1 cut off, confirmed")).await.unwrap().into_inner().owner.unwrap();
    assert_eq!((o.cell.as_str(), o.epoch, o.state), ("east-1", 3, pb::ShardState::Active as i32), "{o:?}");
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_failover_moves_an_opted_in_namespace_off_a_silent_cell_once_its_lease_ran_out() {
    let _g = serial().await;
    let reg = TestRegistry::start().await;
    let mut c = reg.leader_client().await;
    topology(&mut c).await;
    // A second namespace on the same cell, not opted in.
    c.create_namespace(pb::CreateNamespaceRequest { config: Some(ns_config("ads")) }).await.unwrap();
    c.place_shard(pb::PlaceShardRequest { ns: "ads".into(), shard: "default".into(), cell: "east-1".into() }).await.unwrap();
    let set = |ns: &str, enabled: bool, fallback: &str| pb::SetAutoFailoverRequest {
        ns: ns.into(),
        auto_failover: Some(pb::AutoFailover { enabled, fallback_region: fallback.into() }),
    };

    info!("--- bad input: an unknown namespace or region, a fallback without enabling, no policy");
    assert_eq!(code(&c.set_auto_failover(set("nope", true, "")).await.unwrap_err()), "UNKNOWN_NAMESPACE");
    assert_eq!(code(&c.set_auto_failover(set("pay", true, "mars")).await.unwrap_err()), "INVALID_ARGUMENT");
    assert_eq!(code(&c.set_auto_failover(set("pay", false, "west")).await.unwrap_err()), "INVALID_ARGUMENT");
    assert_eq!(code(&c.set_auto_failover(pb::SetAutoFailoverRequest { ns: "pay".into(), auto_failover: None }).await.unwrap_err()), "INVALID_ARGUMENT");
    let got = c.get_namespace(pb::GetNamespaceRequest { name: "pay".into() }).await.unwrap().into_inner().auto_failover.unwrap();
    assert!(!got.enabled, "off by default");

    let on = c.set_auto_failover(set("pay", true, "west")).await.unwrap().into_inner().auto_failover.unwrap();
    assert_eq!((on.enabled, on.fallback_region.as_str()), (true, "west"));

    // A new leader treats every shard as covered for one lease after its election.
    tokio::time::sleep(LEASE).await;
    info!("--- both cells renew; then east-1 goes silent while west-1 renews on");
    renew(&mut c, "west-1").await;
    renew(&mut c, "east-1").await;
    let silent_from = Instant::now();
    let deadline = Instant::now() + WAIT;
    let moved = loop {
        let o = owner(&mut c, "pay", "default").await;
        if o.cell == "west-1" && o.state == pb::ShardState::Active as i32 {
            assert_eq!(o.epoch, 2);
            break Instant::now();
        }
        assert_eq!(o.cell, "east-1", "{o:?}");
        assert!(Instant::now() < deadline, "automatic failover never moved pay/default");
        renew(&mut c, "west-1").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = moved - silent_from;
    assert!(waited >= LEASE + Duration::from_millis(GRACE_MS), "moved after {waited:?}, before east-1's lease (+ grace) ran out");
    assert!(waited <= LEASE + Duration::from_millis(GRACE_MS + 3_000), "moved only after {waited:?}");
    info!(?waited, "automatic failover moved the shard");

    info!("--- the namespace that did not opt in stays on the silent cell; the move is audited");
    let ads = owner(&mut c, "ads", "default").await;
    assert_eq!((ads.cell.as_str(), ads.epoch, ads.state), ("east-1", 1, pb::ShardState::Active as i32), "{ads:?}");
    let audit = c.list_audit(pb::ListAuditRequest { after_seq: 0, limit: 0 }).await.unwrap().into_inner().records;
    assert!(audit.iter().any(|r| r.by == "registry:auto-failover" && r.action == "begin_move" && r.detail.contains("pay")), "{audit:?}");
    assert!(audit.iter().any(|r| r.action == "set_auto_failover"), "{audit:?}");
    reg.shutdown().await;
}
