//! `CellServer`: one running node of a cell — its Raft node (peer port), its client
//! port (LockService, CellAdmin, health), and its leader duties — with a shutdown that
//! has a hard deadline.

use crate::admin::CellAdminApi;
use crate::cell::Cell;
use crate::config::CellConfig;
use crate::leader;
use crate::machine::{CellMachine, Hooks};
use crate::service::LockApi;
use holdfast_proto::admin::v1::cell_admin_server::CellAdminServer;
use holdfast_proto::lock::v1::lock_service_server::LockServiceServer;
use holdfast_raft::{Group, MemoryDisk, NodeConfig, RaftNode, Serving, StartError};
use holdfast_rpc::net::Listener;
use holdfast_rpc::{auth, bounded, Hints, Tasks, Transport, Upstream};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tracing::info;

/// A running cell node. Its node accessors (`node_id`, `client_addr`, `raft_addr`,
/// `metrics`, `initialize`, ...) are [`Serving`]'s.
#[derive(Debug)]
pub struct CellServer {
    serving: Serving<CellMachine>,
    cell: Arc<Cell>,
}

impl std::ops::Deref for CellServer {
    type Target = Serving<CellMachine>;
    fn deref(&self) -> &Serving<CellMachine> {
        &self.serving
    }
}

impl CellServer {
    /// Binds the configured addresses and starts.
    pub async fn start(cfg: &CellConfig) -> Result<CellServer, StartError> {
        let raft = TcpListener::bind(&cfg.raft_addr).await?;
        let client = TcpListener::bind(&cfg.client_addr).await?;
        Self::start_on(cfg, raft, client).await
    }

    /// Starts on listeners the caller bound (tests bind port 0).
    pub async fn start_on(cfg: &CellConfig, raft: TcpListener, client: TcpListener) -> Result<CellServer, StartError> {
        let hooks = Hooks::new();
        let metrics = holdfast_raft::bind_optional(cfg.metrics_addr.as_deref()).await?;
        let node_cfg = Self::node_config(cfg, client.local_addr()?)?;
        let node = RaftNode::start(node_cfg, raft, Self::machine(cfg, &hooks)).await?;
        Ok(Self::serve(cfg, node, hooks, client.into(), metrics))
    }

    /// Starts a node of the deterministic simulation (docs/simulation.md): its
    /// listeners and `transport` are of the simulated network, its RocksDB runs in
    /// `disk`, and it serves no metrics port. Everything else is what
    /// [`CellServer::start_on`] starts.
    pub async fn start_simulated(cfg: &CellConfig, raft: Listener, client: Listener, transport: Transport, disk: MemoryDisk) -> Result<CellServer, StartError> {
        let hooks = Hooks::new();
        let mut node_cfg = Self::node_config(cfg, client.local_addr()?)?;
        node_cfg.transport = transport;
        node_cfg.memory = Some(disk);
        let node = RaftNode::start(node_cfg, raft, Self::machine(cfg, &hooks)).await?;
        Ok(Self::serve(cfg, node, hooks, client, None))
    }

    /// Like [`CellServer::start_on`], with the fault router between this node and its
    /// peers (tests only).
    #[cfg(feature = "test-support")]
    pub async fn start_with_faults(
        cfg: &CellConfig,
        raft: TcpListener,
        client: TcpListener,
        faults: Arc<holdfast_raft::testing::Faults>,
    ) -> Result<CellServer, StartError> {
        let hooks = Hooks::new();
        let metrics = holdfast_raft::bind_optional(cfg.metrics_addr.as_deref()).await?;
        let node_cfg = Self::node_config(cfg, client.local_addr()?)?;
        let node = RaftNode::start_with_faults(node_cfg, raft, Self::machine(cfg, &hooks), faults).await?;
        Ok(Self::serve(cfg, node, hooks, client.into(), metrics))
    }

    fn machine(cfg: &CellConfig, hooks: &Arc<Hooks>) -> CellMachine {
        #[cfg(debug_assertions)]
        if cfg.unsafe_plant.is_some() {
            tracing::warn!(plant = ?cfg.unsafe_plant, "this node runs a PLANTED BUG (a drill's checker must catch it)");
            return CellMachine::planted(hooks.clone());
        }
        let _ = cfg;
        CellMachine::new(hooks.clone())
    }

    fn node_config(cfg: &CellConfig, client_addr: std::net::SocketAddr) -> Result<NodeConfig, StartError> {
        let mut node_cfg = NodeConfig::new(cfg.node_id, format!("cell-{}", cfg.cell), &cfg.data_dir);
        node_cfg.client_addr = cfg.advertise_client_addr.clone().unwrap_or_else(|| client_addr.to_string());
        node_cfg.timings = cfg.timings();
        node_cfg.transport = Transport::new(cfg.transport.clone(), cfg.tls.security().map_err(std::io::Error::other)?);
        Ok(node_cfg)
    }

    fn serve(cfg: &CellConfig, node: RaftNode<CellMachine>, hooks: Arc<Hooks>, client: Listener, metrics: Option<TcpListener>) -> CellServer {
        holdfast_telemetry::install();
        let group = Group::new(node.raft().clone(), node.state().clone(), cfg.node_id, "this cell");
        let registry = cfg.registry();
        let margin = Duration::from_millis(cfg.ownership_margin_ms);
        let ownership_margin = (!registry.is_empty()).then_some(margin);
        let tasks = Tasks::new();
        let transport = node.transport().clone();
        let audit = (!registry.is_empty()).then(|| Upstream::new(&transport, registry.clone(), Hints::Members));
        let cell = Arc::new(Cell { group, hooks, ownership_margin, tasks: tasks.clone(), audit, reserving: tokio::sync::Mutex::new(()) });
        let router = transport
            .grpc_server()
            // A cell's own port serves the cluster (gateways, operators as root): callers
            // with a role in a namespace go through a gateway.
            .add_service(InterceptedService::new(bounded!(LockServiceServer::new(LockApi::new(cell.clone())), transport), auth::nodes_and_root))
            .add_service(InterceptedService::new(
                bounded!(CellAdminServer::new(CellAdminApi::new(cell.clone(), cfg.cell.clone())), transport),
                auth::nodes_and_root,
            ));
        let serving = Serving::new(node, client, router, tasks, Duration::from_millis(cfg.shutdown_deadline_ms), "client API");
        let stop = serving.stop_signal();
        serving.spawn("leader duties", leader::run(cell.clone(), Duration::from_millis(cfg.checkpoint_interval_ms), stop.clone()));
        serving.spawn("metrics refresh", crate::metrics::refresh(cell.clone(), cfg.cell.clone(), stop.clone()));
        if !registry.is_empty() {
            let link = crate::follow::RegistryLink::new(cfg.cell.clone(), registry, &transport);
            serving.spawn("registry follower", crate::follow::run(cell.clone(), link, stop.clone()));
        }
        if let Some(listener) = metrics {
            serving.serve_metrics(listener);
        }
        info!(node_id = cfg.node_id, cell = %cfg.cell, region = %cfg.region, raft = %serving.raft_addr(), client = %serving.client_addr(), "cell node started");
        CellServer { serving, cell }
    }

    /// Is this node leading and running its term (clock, timers, wake-ups)?
    pub fn leads(&self) -> bool {
        self.cell.assume_leader().is_ok() && self.cell.hooks.term_number().is_some()
    }

    /// Wake-ups armed for waiting acquires on this node (each is dropped when its call
    /// ends, however it ends): for tests and diagnostics.
    pub fn armed_wakeups(&self) -> usize {
        self.cell.hooks.armed()
    }

    /// The per-namespace stats behind this node's lock gauges (both lock tables on the
    /// leader): for tests and diagnostics.
    pub fn lock_stats(&self) -> std::collections::BTreeMap<holdfast_core::NamespaceName, holdfast_cell_state::NamespaceStats> {
        self.cell.lock_stats()
    }

    /// Stops accepting calls, stops leader duties, stops Raft and closes RocksDB,
    /// within the configured deadline.
    pub async fn shutdown(self) {
        self.serving.shutdown().await;
    }
}
