//! [`RaftNode`]: one Raft node with its RocksDB storage and its gRPC server (the Raft
//! RPCs and the admin service on one listener), ready for a cell or the registry to run
//! their state machine on.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use holdfast_rpc::net::Listener;
use holdfast_rpc::{auth, Transport};
use openraft::async_runtime::WatchReceiver;
use openraft::network::{NetSnapshot, RaftNetworkFactory};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;
use tracing::{info, warn};

use crate::admin::RaftAdminService;
use crate::error::{InitError, StartError, WriteError};
use crate::identity::{self, DiskCheck, DiskIdentity};
use crate::log_store::LogStore;
use crate::network::{GrpcNetworkFactory, NetworkOptions};
use crate::rocks::{open_db, MemoryDisk};
use crate::service::RaftGrpcService;
use crate::sm_store::{ReplicatedState, StateHandle, StateMachineStore};
use crate::types::{Config, Node, NodeId, Raft, RaftMetrics, Request, SnapshotData, SnapshotPolicy, TypeConfig, WaitError};

/// Raft timing and log retention.
#[derive(Debug, Clone)]
pub struct RaftTimings {
    /// Leader heartbeat interval, ms. Default 100.
    pub heartbeat_ms: u64,
    /// Election timeout is drawn from [min, max) ms. Default 300..500. openraft's leader
    /// lease is `max`, and a follower campaigns only once the lease and then its own
    /// timeout have passed since it last heard the leader: a leader's loss stops
    /// grants for `max + [min, max)` (0.8–1.0 s; measured by `scripts/failover.sh`,
    /// docs/guarantees.md). A starved follower does not depose a healthy leader however
    /// short this is: with pre-vote, the others refuse to vote while they hear from it.
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Build a snapshot after this many entries since the last one. Default 5000.
    pub snapshot_every_logs: u64,
    /// Entries kept in the log behind the latest snapshot, so a briefly lagging follower
    /// catches up from the log rather than a snapshot. Default 1000.
    pub logs_kept_after_snapshot: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        RaftTimings { heartbeat_ms: 100, election_min_ms: 300, election_max_ms: 500, snapshot_every_logs: 5000, logs_kept_after_snapshot: 1000 }
    }
}

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: NodeId,
    /// Names the group in logs ("cell-us-east-1", "registry").
    pub cluster_name: String,
    /// The node's RocksDB directory; created if missing. One node per directory.
    pub data_dir: PathBuf,
    /// The address clients are redirected to (host:port). Empty: the Raft address.
    pub client_addr: String,
    pub timings: RaftTimings,
    pub network: NetworkOptions,
    /// How this node dials its peers and serves its Raft port.
    pub transport: Transport,
    /// `Some`: RocksDB runs in this in-memory environment, under `data_dir` there (the
    /// simulation's nodes; docs/simulation.md). `None`: on disk.
    pub memory: Option<MemoryDisk>,
}

impl NodeConfig {
    pub fn new(node_id: NodeId, cluster_name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        NodeConfig {
            node_id,
            cluster_name: cluster_name.into(),
            data_dir: data_dir.into(),
            client_addr: String::new(),
            timings: RaftTimings::default(),
            network: NetworkOptions::default(),
            transport: Transport::insecure(),
            memory: None,
        }
    }

    /// The openraft config, validated (election timeout above heartbeat, etc.).
    pub fn raft_config(&self) -> Result<Arc<Config>, openraft::ConfigError> {
        let t = &self.timings;
        let c = Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_min_ms,
            election_timeout_max: t.election_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_every_logs),
            max_in_snapshot_log_to_keep: t.logs_kept_after_snapshot,
            // A node that was cut off or restarted must not bump its term and depose a
            // healthy leader when it comes back.
            enable_pre_vote: Some(true),
            // A leader that restarts must win an election (a new term) before it appends
            // again. openraft's default restores it as leader in its old term: after a
            // power cut that cost it log entries it had written but not synced, it then
            // proposes new entries at the same indexes under the same term, two entries
            // share one log id, and a follower that kept the old one diverges (the
            // simulation's power cuts found tokens issued twice, docs/simulation.md).
            enable_leader_restore: Some(false),
            ..Config::default()
        };
        Ok(Arc::new(c.validate()?))
    }
}

/// The quiet period of a node that restarts as a member of a group (it has a log, so
/// it may have acknowledged a leader just before it stopped).
///
/// The leader lease (openraft's, one longest election timeout) is safe only while
/// every follower that acknowledged the leader refuses to vote for anyone else until
/// the lease has passed. openraft keeps that memory in RAM, so a restarted follower
/// would vote at once, and a candidate could win while the old leader — cut off, but
/// alive — still confirms renewals under its lease. For one longest election timeout
/// after it starts, such a node therefore grants no vote or pre-vote (the Raft service
/// refuses them, see `service.rs`) and does not campaign itself. A handover the leader
/// asked for (`leadership_transfer`) is still granted. A node starting empty has acked
/// no one: no quiet period. Cost: a group whose every node restarts at once elects its
/// first leader one election timeout later.
async fn quiet_period_after_restart<S: ReplicatedState>(raft: &Raft<S>, election_max: Duration) -> Result<Option<tokio::time::Instant>, StartError> {
    if !raft.is_initialized().await? {
        return Ok(None);
    }
    raft.runtime_config().elect(false);
    let until = tokio::time::Instant::now() + election_max;
    let raft = raft.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(until).await;
        raft.runtime_config().elect(true);
    });
    info!(quiet_ms = election_max.as_millis() as u64, "restarted as a member: no votes and no campaign for one election timeout");
    Ok(Some(until))
}

/// Forms a new group of `members` from `raft`'s node (`own`). Every first member is
/// asked for its disk (recorded in the membership, `identity.rs`) and must be pristine:
/// a member that holds state — a group's survivor, or the peer of a node that came back
/// empty — is never folded into a new group.
pub(crate) async fn initialize<S: ReplicatedState>(
    raft: &Raft<S>,
    own: DiskIdentity,
    peers: &GrpcNetworkFactory,
    members: BTreeMap<NodeId, Node>,
) -> Result<(), InitError> {
    let mut known = BTreeMap::new();
    for (id, node) in members {
        known.insert(id, identity::joining(own, peers, id, node, true).await?);
    }
    Ok(raft.initialize(known).await?)
}

/// What a committed write returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The log index the command was committed and applied at.
    pub index: u64,
    /// The state machine's response.
    pub response: Vec<u8>,
}

/// The latest metrics of `raft`.
pub fn current_metrics<S: ReplicatedState>(raft: &Raft<S>) -> RaftMetrics {
    raft.metrics().borrow_watched().clone()
}

/// A running Raft node: openraft, RocksDB storage, and a tonic server that serves
/// `RaftService` and `RaftAdmin` on the listener it was started with.
pub struct RaftNode<S: ReplicatedState> {
    id: NodeId,
    node: Node,
    raft_addr: SocketAddr,
    raft: Raft<S>,
    state: StateHandle<S>,
    transport: Transport,
    disk_check: DiskCheck,
    identity: DiskIdentity,
    /// Dials the first members to learn their disks ([`initialize`]).
    peers: GrpcNetworkFactory,
    db_closed: Weak<()>,
    server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    stop_server: Option<oneshot::Sender<()>>,
}

impl<S: ReplicatedState> fmt::Debug for RaftNode<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftNode").field("id", &self.id).field("node", &self.node).finish_non_exhaustive()
    }
}

impl<S: ReplicatedState> RaftNode<S> {
    /// Starts a node on `listener` (bind it first; port 0 is fine) with the gRPC network.
    /// `initial` is the empty application state; a persisted snapshot replaces it.
    pub async fn start(config: NodeConfig, listener: impl Into<Listener>, initial: S) -> Result<Self, StartError> {
        let network = GrpcNetworkFactory::new(config.node_id, config.network.clone(), config.transport.clone());
        Self::start_with_network(config, listener, initial, network).await
    }

    /// Like [`RaftNode::start`] with another network factory (the test fault router wraps
    /// the gRPC network this way).
    pub async fn start_with_network<N>(config: NodeConfig, listener: impl Into<Listener>, initial: S, network: N) -> Result<Self, StartError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = SnapshotData>,
    {
        Self::start_syncing_by(config, listener, initial, network, None).await
    }

    /// Like [`RaftNode::start_with_network`]; on a real disk, `sync` (when given) does
    /// the log's WAL syncs: the test fault layer slows them (`testing.rs`).
    pub(crate) async fn start_syncing_by<N>(
        config: NodeConfig,
        listener: impl Into<Listener>,
        initial: S,
        network: N,
        sync: Option<crate::log_store::Sync>,
    ) -> Result<Self, StartError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = SnapshotData>,
    {
        let raft_config = config.raft_config()?;
        let listener = listener.into();
        let raft_addr = listener.local_addr()?;
        let client_addr = if config.client_addr.is_empty() { raft_addr.to_string() } else { config.client_addr.clone() };

        let db = open_db(&config.data_dir, config.memory.as_ref())?;
        let identity = identity::load_or_create(&db, config.node_id)?;
        let node = Node::new(raft_addr.to_string(), client_addr).on_disk(identity.disk);
        let disk_check = DiskCheck::new(identity);
        let db_closed = db.closed();
        let sm = StateMachineStore::open(db.clone(), initial)?;
        let log_store = match sync {
            Some(sync) if config.memory.is_none() => LogStore::syncing_by(db, sync),
            _ => LogStore::new(db),
        }
        .marking(sm.stages());
        let state = sm.handle();
        let election_max = Duration::from_millis(raft_config.election_timeout_max);
        let raft = Raft::new(config.node_id, raft_config, network, log_store, sm).await?;
        let quiet_until = quiet_period_after_restart(&raft, election_max).await?;

        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let transport = config.transport.clone();
        // Whom the admin service asks for their disks when a member joins.
        let peers = GrpcNetworkFactory::new(config.node_id, config.network.clone(), config.transport.clone());
        let router = transport
            .grpc_server()
            // Raft traffic is for the group's nodes alone; its admin for nodes and root.
            .add_service(InterceptedService::new(
                RaftGrpcService::new(raft.clone(), disk_check.clone(), quiet_until).into_server(config.network.max_message_bytes),
                auth::nodes_only,
            ))
            .add_service(InterceptedService::new(
                holdfast_rpc::bounded!(RaftAdminService::new(raft.clone(), identity, peers).into_server(), transport),
                auth::nodes_and_root,
            ));
        let server = tokio::spawn(async move {
            transport
                .serve_grpc(router, listener, async {
                    let _ = stop_rx.await;
                })
                .await
        });
        info!(node_id = config.node_id, %raft_addr, dir = %config.data_dir.display(), "raft node started");
        Ok(RaftNode {
            id: config.node_id,
            node,
            raft_addr,
            raft,
            state,
            transport: config.transport.clone(),
            disk_check,
            identity,
            peers: GrpcNetworkFactory::new(config.node_id, config.network.clone(), config.transport.clone()),
            db_closed,
            server: Some(server),
            stop_server: Some(stop_tx),
        })
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// This node's addresses and disk, as they go into the membership.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// How many Raft requests this node refused because they named another disk
    /// (`identity.rs`): non-zero means its group knows it by a disk it no longer has.
    pub fn disk_refusals(&self) -> u64 {
        self.disk_check.refused()
    }

    pub fn raft_addr(&self) -> SocketAddr {
        self.raft_addr
    }

    /// How this node dials and serves.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The openraft handle (metrics, `ensure_linearizable`, membership changes, ...).
    pub fn raft(&self) -> &Raft<S> {
        &self.raft
    }

    /// Read access to the applied application state.
    pub fn state(&self) -> &StateHandle<S> {
        &self.state
    }

    pub fn metrics(&self) -> RaftMetrics {
        current_metrics(&self.raft)
    }

    /// Forms a new group with `members` (this node among them). Call on one node only.
    /// Each member is asked for its disk, which the membership records, and must hold no
    /// Raft state yet ([`initialize`]).
    pub async fn initialize(&self, members: BTreeMap<NodeId, Node>) -> Result<(), InitError> {
        initialize(&self.raft, self.identity, &self.peers, members).await
    }

    /// Proposes `payload`; returns once it is committed and applied on this node (the
    /// leader). A `WriteError::Unknown` or a dropped future means the outcome is unknown.
    pub async fn write(&self, payload: Vec<u8>) -> Result<Applied, WriteError> {
        let r = self.raft.client_write(Request { payload }).await?;
        Ok(Applied { index: r.log_id.index, response: r.data.payload })
    }

    /// After a restart, waits until this node's state is at least what it was before
    /// (every entry it may have applied is re-applied). Needs a working quorum.
    ///
    /// openraft re-applies up to the persisted committed index by itself; this waits
    /// until the cluster has re-established a commit covering this node's durable log,
    /// which also covers entries applied after the last persisted committed index.
    pub async fn wait_for_recovery(&self, timeout: Duration) -> Result<(), WaitError> {
        self.raft.wait_for_recovery(Some(timeout)).await.map(|_| ())
    }

    /// If this node leads, asks the voter with the most of the log to take over (it
    /// campaigns at once, with no wait for a lease to run out) and waits up to `within`
    /// until another node leads. Returns whether one does. Leader-only; a no-op
    /// otherwise. A graceful stop calls it first, so a planned restart costs clients a
    /// round trip rather than an election timeout.
    pub async fn hand_over_leadership(&self, within: Duration) -> bool {
        let m = self.metrics();
        if m.current_leader != Some(self.id) {
            return false;
        }
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().filter(|id| *id != self.id).collect();
        let matched = |id: &NodeId| m.replication.as_ref().and_then(|r| r.get(id).cloned().flatten()).map(|l| l.index);
        let Some(to) = voters.iter().copied().max_by_key(|id| matched(id)) else { return false };
        info!(node_id = self.id, to, "handing leadership over before stopping");
        if self.raft.trigger().transfer_leader(to).await.is_err() {
            return false;
        }
        let id = self.id;
        let handed = self.raft.wait(Some(within)).metrics(|m| m.current_leader.is_some_and(|l| l != id), "another node leads").await.is_ok();
        if !handed {
            warn!(node_id = id, to, "leadership not handed over in {within:?}; stopping anyway (the others elect after the lease)");
        }
        handed
    }

    /// Stops serving, stops Raft, and waits until RocksDB is closed so that the same
    /// directory can be opened again (a restart in the same process).
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop_server.take() {
            let _ = tx.send(());
        }
        if let Some(mut server) = self.server.take() {
            // Graceful shutdown can hang on a stuck connection (hyper#4170): bounded.
            if tokio::time::timeout(Duration::from_secs(2), &mut server).await.is_err() {
                warn!(node_id = self.id, "gRPC server did not stop in 2s; aborting it");
                server.abort();
                let _ = server.await;
            }
        }
        if let Err(e) = self.raft.shutdown().await {
            warn!(node_id = self.id, error = %e, "raft shutdown reported an error");
        }
        let id = self.id;
        let db_closed = self.db_closed.clone();
        drop(self);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while db_closed.strong_count() > 0 {
            if tokio::time::Instant::now() > deadline {
                warn!(node_id = id, "RocksDB still open 10s after shutdown");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        info!(node_id = id, "raft node stopped");
    }
}
