//! Cells following the registry: a 3-node registry and two 3-node cells in two regions,
//! all over real gRPC on loopback with RocksDB in temp dirs. Cell A reaches the
//! registry through proxies the test can cut (a partition between A and the registry).

mod common;

use common::*;
use holdfast_core::{FencingToken, LockName, NamespaceName, ShardKey, ShardName};
use holdfast_fence::{FencedStore, LockId, MemoryFence};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_registry::RegistryServer;
use holdfast_testkit::proxy::Proxy;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tracing::info;

use holdfast_registry::testing::LEASE_MS;
const LOCK_DELAY_MS: u64 = 500;

struct World {
    registry: Vec<RegistryServer>,
    a: TestCell,
    b: TestCell,
    a_link: Vec<Proxy>,
    _root: tempfile::TempDir,
}

impl World {
    /// Registry (3 voters), cell `a` in region east (behind proxies), cell `b` in west;
    /// namespace `pay`, shard `pay/default` placed on `a`.
    async fn start() -> World {
        let root = tempfile::tempdir().unwrap();
        let registry = holdfast_registry::testing::start_registry(root.path()).await;
        let direct: Vec<SocketAddr> = registry.iter().map(|n| n.client_addr()).collect();
        let mut a_link = Vec::new();
        for addr in &direct {
            a_link.push(Proxy::start(*addr).await);
        }
        let a = TestCell::following("a", &a_link.iter().map(|p| p.addr).collect::<Vec<_>>()).await;
        let b = TestCell::following("b", &direct).await;
        let w = World { registry, a, b, a_link, _root: root };

        let mut r = w.registry_client().await;
        for region in ["east", "west"] {
            r.create_region(rpb::CreateRegionRequest { region: region.into() }).await.unwrap();
        }
        for (cell, region) in [(&w.a, "east"), (&w.b, "west")] {
            let members = cell
                .client_addrs()
                .into_iter()
                .map(|(id, client, raft)| rpb::CellMember { node_id: id, client_addr: client.to_string(), raft_addr: raft.to_string() })
                .collect();
            let name = if region == "east" { "a" } else { "b" };
            r.register_cell(rpb::RegisterCellRequest { cell: name.into(), region: region.into(), members }).await.unwrap();
        }
        let config = apb::NamespaceConfig {
            name: "pay".into(),
            owner: "team-pay".into(),
            intent: pb::Intent::Correctness as i32,
            lock_delay_ms: Some(LOCK_DELAY_MS),
            ..Default::default()
        };
        r.create_namespace(rpb::CreateNamespaceRequest { config: Some(config) }).await.unwrap();
        r.place_shard(rpb::PlaceShardRequest { ns: "pay".into(), shard: "default".into(), cell: "a".into() }).await.unwrap();
        w
    }

    /// A client of the registry's current leader.
    async fn registry_client(&self) -> RegistryServiceClient<Channel> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(n) = self.registry.iter().find(|n| n.leads()) {
                let ch = holdfast_rpc::Transport::insecure().connect(&n.client_addr().to_string()).await.unwrap();
                return RegistryServiceClient::new(ch);
            }
            assert!(Instant::now() < deadline, "no registry leader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn owner(&self) -> rpb::ShardOwner {
        let req = rpb::GetOwnerRequest { ns: "pay".into(), shard: "default".into(), fresh: false };
        self.registry_client().await.get_owner(req).await.unwrap().into_inner().owner.unwrap()
    }

    /// Every ownership event so far.
    async fn history(&self) -> Vec<rpb::OwnershipEvent> {
        let mut r = self.registry_client().await;
        let mut s = r.watch_ownership(rpb::WatchOwnershipRequest { from_revision: 0, ns: String::new() }).await.unwrap().into_inner();
        let mut out = Vec::new();
        while let Ok(Ok(Some(e))) = tokio::time::timeout(Duration::from_millis(300), s.message()).await {
            out.push(e);
        }
        out
    }

    fn cut_a(&self, on: bool) {
        for p in &self.a_link {
            p.cut(on);
        }
    }

    async fn shutdown(self) {
        self.a.shutdown().await;
        self.b.shutdown().await;
        for n in self.registry {
            n.shutdown().await;
        }
    }
}

/// Codes a caller retries while a shard is being adopted or a leader starts.
const TRANSIENT: &[&str] = &["UNAVAILABLE", "MOVING", "NOT_OWNER", "NOT_LEADER", "UNKNOWN_NAMESPACE", "UNKNOWN_SHARD"];

async fn retry<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if TRANSIENT.contains(&code(&e).as_str()) && Instant::now() < deadline => {}
            Err(e) => panic!("{what}: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn leader_client(cell: &TestCell) -> LockServiceClient<Channel> {
    cell.client(cell.leader().await).await
}

async fn session_at(c: &LockServiceClient<Channel>, ttl_ms: u64) -> u64 {
    retry("create session", || {
        let mut c = c.clone();
        async move { c.create_session(pb::CreateSessionRequest { shard: shard(), ttl_ms, client_label: "t".into() }).await }
    })
    .await
    .into_inner()
    .session_id
}

/// Acquires, waiting in the server's queue up to 5 s (through a lock-delay).
async fn acquire_at(c: &LockServiceClient<Channel>, session: u64, name: &str, rid: &str) -> u64 {
    retry("acquire", || {
        let mut c = c.clone();
        let req = acquire_req(session, name, rid, 5_000);
        async move { c.acquire(req).await }
    })
    .await
    .into_inner()
    .token
}

fn lock_id(name: &str) -> LockId {
    LockId::new(ShardKey::new(NamespaceName::new("pay").unwrap(), ShardName::default_shard()), LockName::new(name).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_move_tells_the_holder_moved_and_the_target_issues_larger_tokens() {
    let _g = serial().await;
    let w = World::start().await;
    let ledger = MemoryFence::new("ledger");

    info!("--- cell A serves pay/default: H takes settle and writes to the fenced ledger");
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 10_000).await;
    // Watching from revision 0 starts at the present: open it before acquiring.
    let mut watch = ca.clone().watch(pb::WatchRequest { shard: shard(), name: "settle".into(), from_revision: 0 }).await.unwrap().into_inner();
    let ta = acquire_at(&ca, h, "settle", "h-1").await;
    ledger.write(&lock_id("settle"), FencingToken(ta), b"balance", b"100").unwrap();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.events[0].kind, pb::EventKind::Acquired as i32, "{first:?}");

    info!("--- the registry moves the shard to B, planned");
    let mut r = w.registry_client().await;
    r.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: true, ..Default::default() }).await.unwrap();

    info!("--- A seals: H is told MOVED");
    let ended = tokio::time::timeout(WAIT, watch.message()).await.expect("no event after the move").unwrap().unwrap();
    assert_eq!((ended.events[0].kind, ended.events[0].reason), (pb::EventKind::Ended as i32, pb::EndReason::Moved as i32));
    assert_eq!(ended.events[0].token, ta);

    info!("--- B adopts at epoch 2; after the lock-delay, W's token is larger than H's");
    let deadline = Instant::now() + WAIT;
    while w.owner().await.cell != "b" {
        assert!(Instant::now() < deadline, "the move did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let owner = w.owner().await;
    assert_eq!(owner.epoch, 2, "{owner:?}; history: {:?}", w.history().await);
    let cb = leader_client(&w.b).await;
    let ws = session_at(&cb, 10_000).await;
    let tw = acquire_at(&cb, ws, "settle", "w-1").await;
    assert!(tw > ta, "B's token {tw:#x} must exceed A's {ta:#x}");
    assert_eq!(FencingToken(tw).epoch().0, 2);

    info!("--- the ledger takes W's write and then refuses H's old token");
    ledger.write(&lock_id("settle"), FencingToken(tw), b"balance", b"90").unwrap();
    let stale = ledger.write(&lock_id("settle"), FencingToken(ta), b"balance", b"110").unwrap_err();
    assert!(stale.is_stale(), "{stale:?}");

    info!("--- A no longer serves the shard");
    let mut ca = leader_client(&w.a).await;
    let e = ca.acquire(acquire_req(h, "other", "h-2", 0)).await.unwrap_err();
    assert!(["NOT_OWNER", "SESSION_EXPIRED", "MOVING"].contains(&code(&e).as_str()), "{e:?}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unplanned_move_a_cut_off_cell_stops_granting_before_its_lease_ends_and_never_serves_again() {
    let _g = serial().await;
    let w = World::start().await;

    info!("--- A serves: H holds x");
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 30_000).await;
    let ta = acquire_at(&ca, h, "x", "h-1").await;

    info!("--- cut A off from the registry");
    w.cut_a(true);
    let cut_at = Instant::now();

    info!("--- A stops granting before its lease (sent before the cut) can have ended");
    let mut n = 0;
    let refused_at = loop {
        n += 1;
        let mut c = leader_client(&w.a).await;
        match c.acquire(acquire_req(h, &format!("probe-{n}"), &format!("p-{n}"), 0)).await {
            Ok(_) => assert!(cut_at.elapsed() < Duration::from_millis(LEASE_MS), "A granted {:?} after the cut", cut_at.elapsed()),
            Err(e) => {
                assert_eq!(code(&e), "UNAVAILABLE", "{e:?}");
                break Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(refused_at - cut_at < Duration::from_millis(LEASE_MS), "A kept granting for {:?}", refused_at - cut_at);

    info!("--- the registry moves the shard to B, unplanned: only after A's lease");
    let mut r = w.registry_client().await;
    let moved_at = Instant::now();
    r.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: false, ..Default::default() }).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while w.owner().await.cell != "b" {
        assert!(Instant::now() < deadline, "the unplanned move did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    info!(after = ?moved_at.elapsed(), "owner is B");

    info!("--- B grants x after the lock-delay, with a larger token");
    let cb = leader_client(&w.b).await;
    let ws = session_at(&cb, 10_000).await;
    let tw = acquire_at(&cb, ws, "x", "w-1").await;
    assert!(tw > ta);

    info!("--- A reconnects: it learns the shard left, seals it, and never serves it again");
    w.cut_a(false);
    let deadline = Instant::now() + WAIT;
    loop {
        let mut c = leader_client(&w.a).await;
        match c.acquire(acquire_req(h, "after", "h-after", 0)).await {
            Err(e) if ["NOT_OWNER", "SESSION_EXPIRED"].contains(&code(&e).as_str()) => break,
            Err(e) => assert!(code(&e) == "UNAVAILABLE" && Instant::now() < deadline, "{e:?}"),
            Ok(r) => panic!("A granted token {:#x} for a shard it no longer owns", r.into_inner().token),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = leader_client(&w.a).await.describe(pb::DescribeRequest { shard: shard(), name: "x".into() }).await;
    assert!(d.is_err() || d.unwrap().into_inner().holders.is_empty(), "A still shows a holder of x");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_lost_its_data_gets_its_shard_back_only_at_the_next_epoch() {
    let _g = serial().await;
    let mut w = World::start().await;

    info!("--- A serves: H holds x at epoch 1");
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 30_000).await;
    let ta = acquire_at(&ca, h, "x", "h-1").await;
    // Issue #15, item 5: at once after its first grant, A is cut off from the registry.
    // A cell that granted before the registry recorded its adoption would now come
    // back empty, adopt epoch 1 again and issue the same token a second time.
    w.cut_a(true);

    info!("--- every node of A loses its disk; A is formed again, empty, and reconnected");
    w.a.wipe_and_reform().await;
    w.cut_a(false);

    info!("--- A gets the shard back at epoch 2 only: its first token beats every old one");
    let ca = leader_client(&w.a).await;
    let s = session_at(&ca, 10_000).await;
    let t = acquire_at(&ca, s, "x", "s-1").await;
    assert!(t > ta, "a token {t:#x} after the data loss does not beat {ta:#x} from before");
    assert_eq!(FencingToken(t).epoch().0, 2);
    let owner = w.owner().await;
    assert_eq!((owner.cell.as_str(), owner.epoch), ("a", 2), "{owner:?}");
    w.shutdown().await;
}

/// Issue #44: a registry that lost its majority for good is formed again from one
/// stopped survivor's data directory (`holdfast registry recover`). Every shard comes
/// back at an epoch above any the lost registry can have served, so the cell that
/// served it adopts the new epoch and its first token beats every token before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_recovered_from_one_survivor_serves_only_larger_tokens() {
    let _g = serial().await;
    let mut w = World::start().await;
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 30_000).await;
    let before = acquire_at(&ca, h, "x", "h-1").await;
    assert_eq!(FencingToken(before).epoch().0, 1);

    info!("--- the registry's three voters stop; voters 2 and 3 are lost for good");
    let survivor = &w.registry[0];
    let (raft_addr, client_addr) = (survivor.raft_addr(), survivor.client_addr());
    let survivor_dir = holdfast_registry::testing::config(w._root.path(), 1).data_dir;
    for n in std::mem::take(&mut w.registry) {
        n.shutdown().await;
    }

    info!("--- recovered from voter 1's directory into a new one, on voter 1's addresses");
    let cfg = holdfast_registry::RegistryConfig {
        data_dir: w._root.path().join("registry-1-recovered"),
        raft_addr: raft_addr.to_string(),
        client_addr: client_addr.to_string(),
        ..holdfast_registry::testing::config(w._root.path(), 1)
    };
    let r = holdfast_registry::recover::recover_from_survivor(&survivor_dir, &cfg, 1_000, "test").expect("recover");
    assert_eq!((r.survivor, r.recovery.shards, r.recovery.highest_epoch), (1, 1, 1_001));
    let raft = rebind(raft_addr).await;
    let client = rebind(client_addr).await;
    w.registry = vec![RegistryServer::start(&cfg, raft, client).await.expect("start the recovered voter")];

    info!("--- A adopts the raised epoch: its first token beats every token before");
    let ca = leader_client(&w.a).await;
    let s = session_at(&ca, 10_000).await;
    let after = acquire_at(&ca, s, "y", "s-1").await;
    assert!(after > before, "a token {after:#x} after the recovery does not beat {before:#x} from before");
    assert_eq!(FencingToken(after).epoch().0, 1_001);
    let owner = w.owner().await;
    assert_eq!((owner.cell.as_str(), owner.epoch), ("a", 1_001), "{owner:?}");
    w.shutdown().await;
}

/// Issue #44: a restore from a snapshot of the current epoch, taken while tokens are
/// still being issued after it, serves only tokens larger than every one of them —
/// the restored registry raises every epoch — and a damaged file is refused before
/// anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_restored_from_a_snapshot_of_the_current_epoch_serves_only_larger_tokens() {
    let _g = serial().await;
    let mut w = World::start().await;
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 30_000).await;
    acquire_at(&ca, h, "x", "h-1").await;

    info!("--- a snapshot of the registry at epoch 1, over its RPC, into a file");
    let file = w._root.path().join("registry.snap");
    let mut chunks =
        w.registry_client().await.save_snapshot(holdfast_proto::raft::v1::SaveSnapshotRequest { group: "registry".into() }).await.unwrap().into_inner();
    let mut bytes = Vec::new();
    while let Some(c) = chunks.message().await.unwrap() {
        bytes.extend_from_slice(&c.data);
    }
    std::fs::write(&file, &bytes).unwrap();
    let header = holdfast_raft::snapshot_file::verify(&file).expect("the file checks");
    assert_eq!((header.group.as_str(), header.members.len()), ("registry", 3), "{header:?}");
    let e = w.registry_client().await.save_snapshot(holdfast_proto::raft::v1::SaveSnapshotRequest { group: "a".into() }).await.unwrap_err();
    assert_eq!(code(&e), "INVALID_ARGUMENT", "a snapshot asked of the wrong group: {e:?}");

    info!("--- tokens go on at epoch 1 after the snapshot was taken");
    let s = session_at(&ca, 30_000).await;
    let later = acquire_at(&ca, s, "z", "s-1").await;
    assert_eq!(FencingToken(later).epoch().0, 1);

    info!("--- every voter is lost; a truncated copy of the file is refused and writes nothing");
    let (raft_addr, client_addr) = (w.registry[0].raft_addr(), w.registry[0].client_addr());
    for n in std::mem::take(&mut w.registry) {
        n.shutdown().await;
    }
    let cfg = holdfast_registry::RegistryConfig {
        data_dir: w._root.path().join("registry-1-restored"),
        raft_addr: raft_addr.to_string(),
        client_addr: client_addr.to_string(),
        ..holdfast_registry::testing::config(w._root.path(), 1)
    };
    let cut = w._root.path().join("cut.snap");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let e = holdfast_registry::recover::restore_from_snapshot(&cut, &cfg, 1_000, "test").expect_err("a truncated snapshot restored");
    assert!(e.contains("truncated"), "{e}");
    assert!(!cfg.data_dir.exists(), "a refused restore wrote its target");

    info!("--- restored from the file: one voter, every epoch raised by 1,000");
    let r = holdfast_registry::recover::restore_from_snapshot(&file, &cfg, 1_000, "test").expect("restore");
    assert_eq!((r.recovery.shards, r.recovery.highest_epoch), (1, 1_001));
    let raft = rebind(raft_addr).await;
    let client = rebind(client_addr).await;
    w.registry = vec![RegistryServer::start(&cfg, raft, client).await.expect("start the restored voter")];

    info!("--- A adopts the raised epoch: its first token beats the ones issued after the snapshot");
    let ca = leader_client(&w.a).await;
    let s = session_at(&ca, 10_000).await;
    let after = acquire_at(&ca, s, "y", "s-2").await;
    assert!(after > later, "a token {after:#x} after the restore does not beat {later:#x}, issued after the snapshot");
    assert_eq!(FencingToken(after).epoch().0, 1_001);
    w.shutdown().await;
}

/// Issue #44: a cell restored from a snapshot of its current epoch — tokens went on
/// being issued at that epoch after the snapshot — grants nothing at the epoch it had:
/// every shard is sealed in the copy, the registry restarts it at the next epoch, and
/// the first token after is larger than every token before. The same from a stopped
/// survivor's directory (`cell recover`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_restored_from_a_snapshot_or_a_survivor_serves_only_larger_tokens() {
    let _g = serial().await;
    let mut w = World::start().await;
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 30_000).await;
    acquire_at(&ca, h, "x", "h-1").await;

    info!("--- a snapshot of cell a at epoch 1, then more tokens at epoch 1");
    let leader = w.a.leader().await;
    let mut admin = holdfast_proto::admin::v1::cell_admin_client::CellAdminClient::new(w.a.channel(leader).await);
    let mut chunks = admin.save_snapshot(holdfast_proto::raft::v1::SaveSnapshotRequest { group: "a".into() }).await.unwrap().into_inner();
    let mut bytes = Vec::new();
    while let Some(c) = chunks.message().await.unwrap() {
        bytes.extend_from_slice(&c.data);
    }
    let file = w._root.path().join("a.snap");
    std::fs::write(&file, &bytes).unwrap();
    let s = session_at(&ca, 30_000).await;
    let later = acquire_at(&ca, s, "z", "s-1").await;
    assert_eq!(FencingToken(later).epoch().0, 1);

    info!("--- every node of a lost; node 1 formed again alone from the snapshot");
    w.a.reform_from(1, |cfg, _| {
        let r = holdfast_cell::recover::restore_from_snapshot(&file, cfg).expect("restore");
        assert_eq!(r.sealed.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![1], "{:?}", r.sealed);
    })
    .await;

    info!("--- the registry restarts the shard at epoch 2: the first token beats every one before");
    let ca = leader_client(&w.a).await;
    let s = session_at(&ca, 30_000).await;
    let after = acquire_at(&ca, s, "y", "s-2").await;
    assert!(after > later, "a token {after:#x} after the restore does not beat {later:#x}, issued after the snapshot");
    assert_eq!(FencingToken(after).epoch().0, 2);
    assert_eq!(w.owner().await.epoch, 2);

    info!("--- lost again; formed from the survivor's directory: epoch 3");
    w.a.reform_from(1, |cfg, survivor| {
        let r = holdfast_cell::recover::recover_from_survivor(survivor, cfg).expect("recover");
        assert_eq!(r.sealed.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![2], "{:?}", r.sealed);
    })
    .await;
    let ca = leader_client(&w.a).await;
    let s = session_at(&ca, 30_000).await;
    let last = acquire_at(&ca, s, "y", "s-3").await;
    assert!(last > after && FencingToken(last).epoch().0 == 3, "{last:#x} after {after:#x}");
    w.shutdown().await;
}

/// Binds `addr` again once its previous owner let it go.
async fn rebind(addr: SocketAddr) -> tokio::net::TcpListener {
    retry("rebind", || async move { tokio::net::TcpListener::bind(addr).await.map_err(|e| tonic::Status::unavailable(e.to_string())) }).await
}

/// Issue #15, item 2: every path that can hand a lock to a waiter is gated by the
/// ownership lease, not only acquires. Once a cut-off cell has stopped granting, its
/// holder's session closing or expiring must not grant the lock to the session queued
/// behind it (that would be an old-epoch token while the registry may already let
/// another cell grant at the next epoch). Before, both did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_cell_hands_no_lock_to_a_waiter_by_close_or_expiry() {
    let _g = serial().await;
    let w = World::start().await;
    let ca = leader_client(&w.a).await;
    // H1 and H2 hold x and y and stop renewing (their TTLs outlast the cut's effect);
    // W1 and W2 queue behind them.
    let ttl = LEASE_MS + 4_000;
    let (h1, h2) = (session_at(&ca, ttl).await, session_at(&ca, ttl).await);
    acquire_at(&ca, h1, "x", "h1-1").await;
    acquire_at(&ca, h2, "y", "h2-1").await;
    let (w1, w2) = (session_at(&ca, 60_000).await, session_at(&ca, 60_000).await);
    let waiting: Vec<_> = [(w1, "x"), (w2, "y")]
        .into_iter()
        .map(|(s, name)| {
            let mut c = ca.clone();
            tokio::spawn(async move { c.acquire(acquire_req(s, name, &format!("w-{name}"), 30_000)).await })
        })
        .collect();

    info!("--- cut A off from the registry; wait until it refuses acquires");
    w.cut_a(true);
    let deadline = Instant::now() + WAIT;
    let mut n = 0;
    loop {
        n += 1;
        let mut c = leader_client(&w.a).await;
        if c.acquire(acquire_req(w1, &format!("probe-{n}"), &format!("p-{n}"), 0)).await.is_err() {
            break;
        }
        assert!(Instant::now() < deadline, "A never stopped granting");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    info!("--- H1 closes its session: refused, x is not handed to W1");
    let mut c = leader_client(&w.a).await;
    let e = c.close_session(pb::CloseSessionRequest { session_id: h1, shard: shard() }).await.expect_err("a close that would grant while cut off");
    assert_eq!(code(&e), "UNAVAILABLE", "{e:?}");

    info!("--- H2's TTL runs out: its expiry waits for the lease, y is not handed to W2");
    tokio::time::sleep(Duration::from_millis(ttl + 2_000)).await;
    for ((s, name), t) in [(w1, "x"), (w2, "y")].into_iter().zip(waiting) {
        let d = leader_client(&w.a).await.describe(pb::DescribeRequest { shard: shard(), name: name.into() }).await.unwrap().into_inner();
        assert!(d.holders.iter().all(|h| h.session_id != s), "the waiter was granted {name} while A was cut off: {d:?}");
        if t.is_finished() {
            let r = t.await.unwrap();
            assert!(r.is_err(), "the waiter on {name} was granted while A was cut off: {r:?}");
        } else {
            t.abort();
        }
    }
    w.cut_a(false);
    w.shutdown().await;
}

/// Issue #42, hole 2: ownership was checked when a grant was proposed, and the grant
/// answered whenever its commit came back. A commit stalled past the ownership lease
/// (here: A's followers' disks slow down by 4 s while A is cut off from the registry)
/// answered an epoch-1 token after the registry had moved the shard on and B had
/// granted at epoch 2. Now a grant is answered only while the lease that covered it
/// lasts; past it, the call ends UNAVAILABLE and the retry finds the shard's new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_commit_stalls_past_the_ownership_lease_is_not_answered() {
    let _g = serial().await;
    let w = World::start().await;
    let ca = leader_client(&w.a).await;
    let h = session_at(&ca, 60_000).await;
    acquire_at(&ca, h, "warm", "h-0").await;
    let la = w.a.leader().await;

    info!("--- A's followers' disks slow down; an acquire is proposed; A is cut off from the registry");
    for f in (1..=3).filter(|id| *id != la) {
        w.a.faults.slow_disk(f, Duration::from_millis(4_000));
    }
    let mut c = ca.clone();
    let stalled = tokio::spawn(async move {
        let r = c.acquire(acquire_req(h, "x", "h-1", 0)).await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.cut_a(true);
    let cut_at = Instant::now();

    info!("--- the registry moves the shard to B, unplanned, once A's lease ran out; B grants");
    let mut r = w.registry_client().await;
    r.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: false, ..Default::default() }).await.unwrap();
    let cb = leader_client(&w.b).await;
    let ws = session_at(&cb, 10_000).await;
    let tb = acquire_at(&cb, ws, "x", "w-1").await;
    let b_granted_at = Instant::now();
    assert_eq!(FencingToken(tb).epoch().0, 2);

    info!("--- A's commit comes back: its grant must not be handed out");
    let (answer, answered_at) = stalled.await.unwrap();
    for f in 1..=3 {
        w.a.faults.slow_disk(f, Duration::ZERO);
    }
    info!(answered_after_cut = ?answered_at - cut_at, b_granted_after_cut = ?b_granted_at - cut_at, "A answered");
    // A's lease was renewed before the cut, so it ended by then plus a lease, less the margin.
    assert!(answered_at - cut_at > Duration::from_millis(LEASE_MS), "A answered within its lease: the test did not stall the commit long enough");
    match answer {
        Ok(g) => panic!(
            "A answered token {:#x} (epoch 1) {:?} after it was cut off, past its ownership lease; B granted {tb:#x} meanwhile",
            g.into_inner().token,
            answered_at - cut_at
        ),
        Err(e) => assert_eq!(code(&e), "UNAVAILABLE", "{e:?}"),
    }
    w.cut_a(false);
    w.shutdown().await;
}

/// Issue #43: session renewals ignored the ownership lease. With the cell cut off from
/// the registry, its renewals kept being confirmed with the full TTL for as long as
/// they were sent, while an unplanned move let the next owner grant: the old holder's
/// SDK never reported the loss. A renewal is now confirmed only while the lease covers
/// the session's shard, and never so long that the SDK's rule (lost at `sent +
/// ttl_remaining - TTL/3`) reaches past the lease; past it, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_confirmed_only_under_the_ownership_lease() {
    let _g = serial().await;
    let w = World::start().await;
    let ca = leader_client(&w.a).await;
    let ttl = 30_000;
    let h = session_at(&ca, ttl).await;
    acquire_at(&ca, h, "x", "h-1").await;
    let mut c = leader_client(&w.a).await;

    info!("--- under the lease: confirmed, and no further past the lease than TTL/3");
    let confirmed = renew(&mut c, h).await.unwrap();
    assert!(confirmed <= LEASE_MS + ttl / 3, "a renewal confirmed {confirmed} ms under a {LEASE_MS} ms lease");

    info!("--- A is cut off from the registry; its lease runs out");
    w.cut_a(true);
    let cut_at = Instant::now();
    let mut last_confirmed = None;
    let refused = loop {
        match renew(&mut c, h).await {
            Ok(left) => {
                // The SDK's loss deadline for this renewal, counted from the cut.
                let loss = cut_at.elapsed() + Duration::from_millis(left.saturating_sub(ttl / 3));
                assert!(loss <= Duration::from_millis(LEASE_MS), "confirmed {left} ms at {:?} after the cut: past the lease", cut_at.elapsed());
                last_confirmed = Some(cut_at.elapsed());
            }
            Err(e) => break e,
        }
        assert!(cut_at.elapsed() < Duration::from_millis(LEASE_MS) * 2, "renewals kept being confirmed {:?} after the cut", cut_at.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code(&refused), "UNAVAILABLE", "{refused:?}");
    assert!(refused.message().contains("ownership lease"), "{refused:?}");
    info!(?last_confirmed, refused_after = ?cut_at.elapsed(), "renewals refused once the lease ran out");
    w.cut_a(false);
    w.shutdown().await;
}
