//! An in-process cluster of real nodes: RocksDB in temp dirs, gRPC on loopback, the
//! test fault router in front of every node's network. Every wait is on a condition
//! with a deadline, never a bare sleep.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use holdfast_raft::testing::{AppendLog, Faults, FaultyNetworkFactory};
use holdfast_raft::types::ServerState;
use holdfast_raft::{Applied, GrpcNetworkFactory, Node, NodeConfig, NodeId, Raft, RaftNode, RaftTimings, WriteError};
use tempfile::TempDir;
use tokio::net::TcpListener;

pub const WAIT: Duration = Duration::from_secs(20);

/// Cluster tests run one at a time: parallel clusters on 2 cores starve each other's
/// heartbeats and turn timing into flakiness.
pub use holdfast_testkit::serial;

/// Test timings: heartbeat 150 ms, elections 1–2 s (the 2-core guidance; the RPC timeout
/// openraft derives from the heartbeat is then ~110 ms, enough for a busy machine).
pub fn timings() -> RaftTimings {
    RaftTimings { heartbeat_ms: 150, election_min_ms: 1000, election_max_ms: 2000, ..RaftTimings::default() }
}

pub struct TestCluster {
    pub faults: Arc<Faults>,
    pub nodes: BTreeMap<NodeId, RaftNode<AppendLog>>,
    addrs: BTreeMap<NodeId, SocketAddr>,
    timings: RaftTimings,
    root: TempDir,
}

impl TestCluster {
    /// Starts nodes `1..=n`, initializes the group on node 1 and waits for a leader.
    pub async fn start(n: u64, timings: RaftTimings) -> TestCluster {
        let mut c =
            TestCluster { faults: Faults::new(), nodes: BTreeMap::new(), addrs: BTreeMap::new(), timings, root: tempfile::tempdir().expect("temp dir") };
        for id in 1..=n {
            c.start_node(id).await;
        }
        let members: BTreeMap<NodeId, Node> = c.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        c.nodes[&1].initialize(members).await.expect("initialize");
        c.leader(WAIT).await;
        // The group is ready once every node applied the initial membership (index 0) and
        // the first leader's blank entry (index 1): membership changes are accepted then.
        c.wait_applied(&(1..=n).collect::<Vec<_>>(), 1, "group formed").await;
        c
    }

    /// The address node `id` listens on (kept across its restarts).
    pub fn addr(&self, id: NodeId) -> SocketAddr {
        self.addrs[&id]
    }

    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    /// Starts (or restarts, on its old address and directory) node `id`.
    pub async fn start_node(&mut self, id: NodeId) {
        assert!(!self.nodes.contains_key(&id), "node {id} already running");
        let listener = match self.addrs.get(&id) {
            Some(addr) => bind_again(*addr).await,
            None => TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        };
        self.addrs.insert(id, listener.local_addr().expect("addr"));
        let mut cfg = NodeConfig::new(id, "test", self.dir(id));
        cfg.timings = self.timings.clone();
        let network = FaultyNetworkFactory::new(GrpcNetworkFactory::new(id, cfg.network.clone(), cfg.transport.clone()), self.faults.clone());
        let node = RaftNode::start_with_network(cfg, listener, AppendLog::default(), network).await.expect("start node");
        self.nodes.insert(id, node);
    }

    /// Shuts node `id` down (its directory stays).
    pub async fn stop_node(&mut self, id: NodeId) {
        let node = self.nodes.remove(&id).expect("node running");
        node.shutdown().await;
    }

    pub fn raft(&self, id: NodeId) -> &Raft<AppendLog> {
        self.nodes[&id].raft()
    }

    pub fn values(&self, id: NodeId) -> Vec<u64> {
        self.nodes[&id].state().read(|s| s.values.clone())
    }

    /// Waits until a running node is leader and every other running node follows it.
    pub async fn leader(&self, timeout: Duration) -> NodeId {
        self.leader_among(&self.nodes.keys().copied().collect::<Vec<_>>(), timeout).await
    }

    /// Waits until one of `ids` is leader and the others of `ids` know it.
    pub async fn leader_among(&self, ids: &[NodeId], timeout: Duration) -> NodeId {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // A leader counts once a quorum acknowledged it: before that it refuses writes.
            let mut leaders = ids.iter().filter_map(|id| {
                let m = self.nodes[id].metrics();
                (m.state == ServerState::Leader && m.last_quorum_acked.is_some()).then_some(*id)
            });
            if let Some(l) = leaders.next() {
                let agreed = ids.iter().all(|id| self.nodes[id].metrics().current_leader == Some(l));
                if agreed && leaders.next().is_none() {
                    return l;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no agreed leader among {ids:?} within {timeout:?}");
            // Wake on any metrics change of the first node, or re-check periodically.
            let mut rx = self.nodes[&ids[0]].raft().metrics();
            let _ = tokio::time::timeout(Duration::from_millis(100), async {
                use openraft::async_runtime::WatchReceiver;
                rx.changed().await
            })
            .await;
        }
    }

    /// Writes `value` through the current leader, following NOT_LEADER once per try.
    pub async fn write(&self, value: u64) -> Result<Applied, WriteError> {
        let mut target = self.leader(WAIT).await;
        for _ in 0..5 {
            match self.nodes[&target].write(AppendLog::command(value)).await {
                Err(WriteError::NotLeader { leader_id: Some(l), .. }) if self.nodes.contains_key(&l) => target = l,
                // Nothing was appended in either case: safe to send again.
                Err(WriteError::NotLeader { .. } | WriteError::NoQuorum) => target = self.leader(WAIT).await,
                other => return other,
            }
        }
        Err(WriteError::Unknown("leader kept changing".into()))
    }

    /// Waits until every node in `ids` has applied `index`.
    pub async fn wait_applied(&self, ids: &[NodeId], index: u64, why: &str) {
        for id in ids {
            self.raft(*id)
                .wait(Some(WAIT))
                .applied_index_at_least(Some(index), format!("node {id}: {why}"))
                .await
                .unwrap_or_else(|e| panic!("node {id} did not apply {index} ({why}): {e}"));
        }
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop_node(id).await;
        }
    }
}

/// Binds `addr` again after its previous owner closed it (the port may need a moment).
async fn bind_again(addr: SocketAddr) -> TcpListener {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(%addr, error = %e, "rebinding, retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot rebind {addr}: {e}"),
        }
    }
}
