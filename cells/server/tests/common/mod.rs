//! A 3-node cell of real `CellServer`s: RocksDB in temp dirs, gRPC on loopback, the
//! fault router between nodes. Waits are on conditions with deadlines.

#![allow(dead_code)]

use holdfast_cell::{CellConfig, CellServer};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_raft::testing::Faults;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(20);
pub const TTL_MS: u64 = 3_000;
pub const CHECKPOINT_MS: u64 = 500;

pub use holdfast_testkit::serial;

pub fn code(s: &tonic::Status) -> String {
    holdfast_rpc::status::code_of(s).map_or(String::new(), |c| c.as_str().to_owned())
}

pub struct TestCell {
    pub faults: Arc<Faults>,
    pub nodes: BTreeMap<u64, CellServer>,
    raft_addrs: BTreeMap<u64, SocketAddr>,
    client_addrs: BTreeMap<u64, SocketAddr>,
    root: TempDir,
    name: String,
    registry: String,
}

impl TestCell {
    /// Starts nodes 1..=3, forms the cell, serves namespace `pay` (lock-delay as
    /// given) with shard `default` at epoch 1.
    pub async fn start(lock_delay_ms: u64) -> TestCell {
        TestCell::start_with(lock_delay_ms, pb::Intent::Correctness).await
    }

    /// [`TestCell::start`], with namespace `pay` of the given intent.
    pub async fn start_with(lock_delay_ms: u64, intent: pb::Intent) -> TestCell {
        let mut c = TestCell {
            faults: Faults::new(),
            nodes: BTreeMap::new(),
            raft_addrs: BTreeMap::new(),
            client_addrs: BTreeMap::new(),
            root: tempfile::tempdir().unwrap(),
            name: "test".into(),
            registry: String::new(),
        };
        for id in 1..=3 {
            c.start_node(id).await;
        }
        let members = c.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        c.nodes[&1].initialize(members).await.unwrap();
        let leader = c.leader().await;
        let mut admin = CellAdminClient::new(c.channel(leader).await);
        admin
            .apply_namespace(apb::ApplyNamespaceRequest {
                config: Some(apb::NamespaceConfig {
                    name: "pay".into(),
                    owner: "team-pay".into(),
                    intent: intent as i32,
                    lock_delay_ms: Some(lock_delay_ms),
                    version: 1,
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        admin.adopt_shard(apb::AdoptShardRequest { ns: "pay".into(), shard: "default".into(), epoch: 1, delayed_locks: vec![] }).await.unwrap();
        c
    }

    /// Starts nodes 1..=3 of cell `name`, following the registry at `registry`
    /// (client addresses): namespaces and shards come from it, not from admin calls.
    pub async fn following(name: &str, registry: &[std::net::SocketAddr]) -> TestCell {
        let mut c = TestCell {
            faults: Faults::new(),
            nodes: BTreeMap::new(),
            raft_addrs: BTreeMap::new(),
            client_addrs: BTreeMap::new(),
            root: tempfile::tempdir().unwrap(),
            name: name.into(),
            registry: registry.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        };
        for id in 1..=3 {
            c.start_node(id).await;
        }
        let members = c.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        c.nodes[&1].initialize(members).await.unwrap();
        c
    }

    /// Client addresses of the nodes, for registering the cell.
    pub fn client_addrs(&self) -> Vec<(u64, SocketAddr, SocketAddr)> {
        self.client_addrs.iter().map(|(id, a)| (*id, *a, self.raft_addrs[id])).collect()
    }

    fn config(&self, id: u64) -> CellConfig {
        CellConfig {
            node_id: id,
            cell: self.name.clone(),
            region: "local".into(),
            data_dir: self.root.path().join(format!("node-{id}")),
            raft_addr: "127.0.0.1:0".into(),
            client_addr: "127.0.0.1:0".into(),
            advertise_client_addr: None,
            metrics_addr: None,
            registry_endpoints: self.registry.clone(),
            ownership_margin_ms: 500,
            heartbeat_ms: 100,
            election_min_ms: 1_000,
            election_max_ms: 2_000,
            checkpoint_interval_ms: CHECKPOINT_MS,
            snapshot_every_logs: 5_000,
            shutdown_deadline_ms: 5_000,
            transport: Default::default(),
            tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
            unsafe_plant: None,
        }
    }

    /// Starts (or restarts on its old addresses and data) node `id`.
    pub async fn start_node(&mut self, id: u64) {
        let raft = TcpListener::bind(self.raft_addrs.get(&id).copied().unwrap_or("127.0.0.1:0".parse().unwrap())).await.unwrap();
        let client = TcpListener::bind(self.client_addrs.get(&id).copied().unwrap_or("127.0.0.1:0".parse().unwrap())).await.unwrap();
        self.raft_addrs.insert(id, raft.local_addr().unwrap());
        self.client_addrs.insert(id, client.local_addr().unwrap());
        let server = CellServer::start_with_faults(&self.config(id), raft, client, self.faults.clone()).await.unwrap();
        self.nodes.insert(id, server);
    }

    /// Every node loses its disk: stopped, data removed, started empty on the same
    /// addresses, and the cell formed again.
    pub async fn wipe_and_reform(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in &ids {
            self.stop_node(*id).await;
            self.remove_data(*id).await;
        }
        for id in &ids {
            self.start_node(*id).await;
        }
        let members = self.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        self.nodes[&ids[0]].initialize(members).await.unwrap();
    }

    /// The cell loses its majority for good and is formed again from one member:
    /// every node stopped, node `id`'s directory moved aside (the survivor's copy) and
    /// the others removed, then `write` fills node `id`'s directory (given the node's
    /// configuration on its old addresses, and the survivor's directory) and node `id`
    /// alone starts on it.
    pub async fn reform_from(&mut self, id: u64, write: impl FnOnce(&CellConfig, &std::path::Path)) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for i in &ids {
            self.stop_node(*i).await;
        }
        let survivor = self.root.path().join(format!("node-{id}.survivor"));
        let _ = std::fs::remove_dir_all(&survivor);
        std::fs::rename(self.root.path().join(format!("node-{id}")), &survivor).unwrap();
        for i in ids.iter().filter(|i| **i != id) {
            self.remove_data(*i).await;
        }
        let cfg = CellConfig { raft_addr: self.raft_addrs[&id].to_string(), client_addr: self.client_addrs[&id].to_string(), ..self.config(id) };
        write(&cfg, &survivor);
        self.start_node(id).await;
    }

    /// Node `id` loses its disk: stopped, its data directory removed, started again
    /// empty under the same id on the same addresses (a recreated volume).
    pub async fn wipe_node(&mut self, id: u64) {
        self.stop_node(id).await;
        self.remove_data(id).await;
        self.start_node(id).await;
    }

    async fn remove_data(&self, id: u64) {
        // A node past its shutdown deadline may still be closing RocksDB: retry.
        let dir = self.root.path().join(format!("node-{id}"));
        let deadline = Instant::now() + WAIT;
        while let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() == std::io::ErrorKind::NotFound {
                break;
            }
            assert!(Instant::now() < deadline, "cannot remove {}: {e}", dir.display());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Raft admin service of node `id` (membership changes go to the leader's).
    pub async fn raft_admin(&self, id: u64) -> holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient<Channel> {
        let ch = holdfast_rpc::Transport::insecure().connect(&self.raft_addrs[&id].to_string()).await.unwrap();
        holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient::new(ch)
    }

    /// Node `id` as `RaftAdmin` names a member.
    pub fn member(&self, id: u64) -> holdfast_proto::raft::v1::Member {
        holdfast_proto::raft::v1::Member { node_id: id, raft_addr: self.raft_addrs[&id].to_string(), client_addr: self.client_addrs[&id].to_string() }
    }

    pub async fn stop_node(&mut self, id: u64) {
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown().await;
        }
    }

    /// Waits until a call parked in `node`'s lock queue has armed its wake-up, within
    /// [`WAIT`].
    pub async fn wait_armed(&self, node: u64) {
        let deadline = Instant::now() + WAIT;
        while self.nodes[&node].armed_wakeups() == 0 {
            assert!(Instant::now() < deadline, "the waiting acquire never armed its wake-up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The node that leads and runs its lease clock, among the running ones.
    pub async fn leader(&self) -> u64 {
        self.leader_among(&self.nodes.keys().copied().collect::<Vec<_>>()).await
    }

    pub async fn leader_among(&self, ids: &[u64]) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            // A deposed leader may still think it leads until it hears the new term:
            // the one with the highest term is the real one.
            let leading = ids.iter().filter_map(|id| self.nodes.get(id).filter(|n| n.leads()).map(|n| (n.metrics().current_term, *id)));
            if let Some((_, id)) = leading.max() {
                return id;
            }
            assert!(Instant::now() < deadline, "no leader among {ids:?} within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Deposes the current leader: cuts it off until another node leads, then heals.
    /// Returns the new leader.
    pub async fn force_leader_change(&self) -> u64 {
        let old = self.leader().await;
        let others: Vec<u64> = self.nodes.keys().copied().filter(|id| *id != old).collect();
        self.faults.isolate(old, others.clone());
        let new = self.leader_among(&others).await;
        self.faults.heal_all();
        new
    }

    pub async fn channel(&self, id: u64) -> Channel {
        holdfast_rpc::Transport::insecure().connect(&self.client_addrs[&id].to_string()).await.unwrap()
    }

    /// Clients of every running node, for tasks that must follow leader changes.
    pub async fn clients(&self) -> AnyNode {
        let mut all = Vec::new();
        for id in self.nodes.keys() {
            all.push(self.client(*id).await);
        }
        AnyNode(all)
    }

    pub async fn client(&self, id: u64) -> LockServiceClient<Channel> {
        LockServiceClient::new(self.channel(id).await)
    }

    pub async fn shutdown(mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.stop_node(id).await;
        }
    }
}

pub fn shard() -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: "pay".into(), shard: "default".into(), epoch: 0 })
}

pub async fn create_session(c: &mut LockServiceClient<Channel>, ttl_ms: u64) -> u64 {
    c.create_session(pb::CreateSessionRequest { shard: shard(), ttl_ms, client_label: "test".into() }).await.unwrap().into_inner().session_id
}

pub fn acquire_req(session: u64, name: &str, rid: &str, wait_ms: u64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        shard: shard(),
        name: name.into(),
        session_id: session,
        mode: pb::Mode::Exclusive as i32,
        wait_timeout_ms: wait_ms,
        request_id: rid.into(),
        value: b"worker".to_vec(),
    }
}

/// Waits until Describe shows a waiter on `name` (a queued acquire), within [`WAIT`].
pub async fn wait_queued(c: &mut LockServiceClient<Channel>, name: &str) {
    let deadline = Instant::now() + WAIT;
    while c.describe(pb::DescribeRequest { shard: shard(), name: name.into() }).await.unwrap().into_inner().waiters.is_empty() {
        assert!(Instant::now() < deadline, "nobody queued for {name} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One KeepAlive round trip on a fresh stream.
pub async fn renew(c: &mut LockServiceClient<Channel>, session: u64) -> Result<u64, tonic::Status> {
    let req = tokio_stream::iter(vec![pb::KeepAliveRequest { session_id: session, shard: None, more: vec![] }]);
    let mut stream = c.keep_alive(req).await?.into_inner();
    match stream.message().await? {
        Some(r) => Ok(r.ttl_remaining_ms),
        None => Err(tonic::Status::unavailable("keepalive stream ended")),
    }
}

/// Clients of all nodes: a call goes to whichever node answers it (the leader).
#[derive(Clone)]
pub struct AnyNode(pub Vec<LockServiceClient<Channel>>);

impl AnyNode {
    /// One renewal at the node that confirms it; the last error if none does.
    pub async fn renew(&mut self, session: u64) -> Result<u64, tonic::Status> {
        let mut last = tonic::Status::unavailable("no node");
        for c in &mut self.0 {
            // A node that cannot answer promptly is as good as down for a client.
            let r = tokio::time::timeout(Duration::from_secs(1), renew(c, session)).await;
            match r.unwrap_or_else(|_| Err(tonic::Status::unavailable("renewal timed out"))) {
                Ok(t) => return Ok(t),
                Err(e) if code(&e) == "NOT_LEADER" || e.code() == tonic::Code::Unavailable => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// The lock's holders, from the node that answers a linearizable Describe.
    pub async fn holders(&mut self, name: &str) -> Option<Vec<(u64, u64)>> {
        for c in &mut self.0 {
            let req = pb::DescribeRequest { shard: shard(), name: name.into() };
            if let Ok(Ok(d)) = tokio::time::timeout(Duration::from_secs(1), c.describe(req)).await {
                return Some(d.into_inner().holders.iter().map(|h| (h.session_id, h.token)).collect());
            }
        }
        None
    }
}
