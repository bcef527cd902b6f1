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
use holdfast_raft::types::RaftMetrics;
use holdfast_raft::{Group, InitError, Node, NodeConfig, RaftNode, StartError};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::{info, warn};

/// A running cell node.
#[derive(Debug)]
pub struct CellServer {
    node: RaftNode<CellMachine>,
    cell: Arc<Cell>,
    client_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    client_server: JoinHandle<()>,
    duties: JoinHandle<()>,
    shutdown_deadline: Duration,
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
        let (node_cfg, client_listener) = Self::node_config(cfg, client)?;
        let node = RaftNode::start(node_cfg, raft, Self::machine(cfg, &hooks)).await?;
        Ok(Self::serve(cfg, node, hooks, client_listener))
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
        let (node_cfg, client_listener) = Self::node_config(cfg, client)?;
        let node = RaftNode::start_with_faults(node_cfg, raft, Self::machine(cfg, &hooks), faults).await?;
        Ok(Self::serve(cfg, node, hooks, client_listener))
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

    fn node_config(cfg: &CellConfig, client: TcpListener) -> Result<(NodeConfig, TcpListener), StartError> {
        let client_addr = client.local_addr()?;
        let mut node_cfg = NodeConfig::new(cfg.node_id, format!("cell-{}", cfg.cell), &cfg.data_dir);
        node_cfg.client_addr = cfg.advertise_client_addr.clone().unwrap_or_else(|| client_addr.to_string());
        node_cfg.timings = cfg.timings();
        Ok((node_cfg, client))
    }

    fn serve(cfg: &CellConfig, node: RaftNode<CellMachine>, hooks: Arc<Hooks>, client: TcpListener) -> CellServer {
        let client_addr = client.local_addr().expect("bound listener has an address");
        holdfast_telemetry::install();
        let group = Group::new(node.raft().clone(), node.state().clone(), cfg.node_id, "this cell");
        let registry = cfg.registry();
        let margin = Duration::from_millis(cfg.ownership_margin_ms);
        let ownership = (!registry.is_empty()).then(|| std::sync::Mutex::new(crate::ownership::OwnershipLease::new(margin)));
        let cell = Arc::new(Cell { group, hooks, ownership });
        let (shutdown, rx) = watch::channel(false);
        let mut stop = rx.clone();
        let svc = tonic::transport::Server::builder()
            .add_service(LockServiceServer::new(LockApi::new(cell.clone())))
            .add_service(CellAdminServer::new(CellAdminApi::new(cell.clone())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(client), async move {
                let _ = stop.wait_for(|s| *s).await;
            });
        let client_server = tokio::spawn(async move {
            if let Err(e) = svc.await {
                warn!(error = %e, "client API server ended with an error");
            }
        });
        let duties = tokio::spawn(leader::run(cell.clone(), Duration::from_millis(cfg.checkpoint_interval_ms), rx.clone()));
        tokio::spawn(crate::metrics::refresh(cell.clone(), cfg.cell.clone(), rx.clone()));
        if !registry.is_empty() {
            let link = crate::follow::RegistryLink::new(cfg.cell.clone(), registry);
            tokio::spawn(crate::follow::run(cell.clone(), link, margin, rx.clone()));
        }
        if let Some(addr) = cfg.metrics_addr.clone() {
            let ready_cell = cell.clone();
            // Ready: this node knows a leader of its cell, so calls to it get an answer.
            let ready: holdfast_telemetry::Readiness = Arc::new(move || holdfast_raft::current_metrics(ready_cell.group.raft()).current_leader.is_some());
            let stop = rx.clone();
            tokio::spawn(async move {
                let served = match TcpListener::bind(&addr).await {
                    Ok(l) => holdfast_telemetry::serve(l, ready, stop).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = served {
                    warn!(addr = %addr, error = %e, "the metrics endpoint stopped");
                }
            });
        }
        info!(node_id = cfg.node_id, cell = %cfg.cell, region = %cfg.region, raft = %node.raft_addr(), client = %client_addr, "cell node started");
        CellServer { node, cell, client_addr, shutdown, client_server, duties, shutdown_deadline: Duration::from_millis(cfg.shutdown_deadline_ms) }
    }

    pub fn node_id(&self) -> u64 {
        self.node.id()
    }

    /// Addresses as peers and clients see them.
    pub fn node(&self) -> &Node {
        self.node.node()
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    pub fn raft_addr(&self) -> SocketAddr {
        self.node.raft_addr()
    }

    pub fn metrics(&self) -> RaftMetrics {
        self.node.metrics()
    }

    /// Is this node leading and running its lease clock?
    pub fn leads(&self) -> bool {
        self.cell.assume_leader().is_ok() && self.cell.hooks.clock.lock().expect("clock lock").is_some()
    }

    /// Forms the cell from `members` (call on one node, once).
    pub async fn initialize(&self, members: BTreeMap<u64, Node>) -> Result<(), InitError> {
        self.node.initialize(members).await
    }

    /// Stops accepting calls, stops leader duties, stops Raft and closes RocksDB,
    /// within the configured deadline.
    pub async fn shutdown(self) {
        let id = self.node.id();
        let _ = self.shutdown.send(true);
        let deadline = self.shutdown_deadline;
        let work = async move {
            let _ = self.duties.await;
            let _ = self.client_server.await;
            self.node.shutdown().await;
        };
        if tokio::time::timeout(deadline, work).await.is_err() {
            warn!(node_id = id, ?deadline, "shutdown passed its deadline; giving up on a clean stop");
        }
    }
}
