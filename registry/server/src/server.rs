//! `RegistryServer`: one running node of the registry — its Raft node (peer port), its
//! client port (RegistryService), and its leader duties — with a shutdown that has a
//! hard deadline.

use crate::config::RegistryConfig;
use crate::leader::{self, LeaseTimings};
use crate::machine::{Hooks, RegistryMachine};
use crate::registry::Registry;
use crate::service::RegistryApi;
use holdfast_proto::registry::v1::registry_service_server::RegistryServiceServer;
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

/// A running registry node.
#[derive(Debug)]
pub struct RegistryServer {
    node: RaftNode<RegistryMachine>,
    reg: Arc<Registry>,
    client_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    client_server: JoinHandle<()>,
    duties: JoinHandle<()>,
    shutdown_deadline: Duration,
}

impl RegistryServer {
    /// Binds the configured addresses and starts.
    pub async fn bind(cfg: &RegistryConfig) -> Result<RegistryServer, StartError> {
        let raft = TcpListener::bind(&cfg.raft_addr).await?;
        let client = TcpListener::bind(&cfg.client_addr).await?;
        Self::start(cfg, raft, client).await
    }

    /// Starts on listeners the caller bound (tests bind port 0).
    pub async fn start(cfg: &RegistryConfig, raft: TcpListener, client: TcpListener) -> Result<RegistryServer, StartError> {
        let hooks = Hooks::new();
        let node = RaftNode::start(Self::node_config(cfg, &client)?, raft, RegistryMachine::new(hooks.clone())).await?;
        Ok(Self::serve(cfg, node, hooks, client))
    }

    /// Like [`RegistryServer::start`], with the fault router between this node and its
    /// peers (tests only).
    #[cfg(feature = "test-support")]
    pub async fn start_with_faults(
        cfg: &RegistryConfig,
        raft: TcpListener,
        client: TcpListener,
        faults: Arc<holdfast_raft::testing::Faults>,
    ) -> Result<RegistryServer, StartError> {
        let hooks = Hooks::new();
        let node_cfg = Self::node_config(cfg, &client)?;
        let node = RaftNode::start_with_faults(node_cfg, raft, RegistryMachine::new(hooks.clone()), faults).await?;
        Ok(Self::serve(cfg, node, hooks, client))
    }

    fn node_config(cfg: &RegistryConfig, client: &TcpListener) -> Result<NodeConfig, StartError> {
        let client_addr = client.local_addr()?;
        let mut node_cfg = NodeConfig::new(cfg.node_id, "registry", &cfg.data_dir);
        node_cfg.client_addr = cfg.advertise_client_addr.clone().unwrap_or_else(|| client_addr.to_string());
        node_cfg.timings = cfg.timings();
        Ok(node_cfg)
    }

    fn serve(cfg: &RegistryConfig, node: RaftNode<RegistryMachine>, hooks: Arc<Hooks>, client: TcpListener) -> RegistryServer {
        let client_addr = client.local_addr().expect("bound listener has an address");
        let group = Group::new(node.raft().clone(), node.state().clone(), cfg.node_id, "the registry");
        let reg = Arc::new(Registry { group, hooks });
        let (shutdown, rx) = watch::channel(false);
        let mut stop = rx.clone();
        let svc = tonic::transport::Server::builder()
            .add_service(RegistryServiceServer::new(RegistryApi::new(reg.clone())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(client), async move {
                let _ = stop.wait_for(|s| *s).await;
            });
        let client_server = tokio::spawn(async move {
            if let Err(e) = svc.await {
                warn!(error = %e, "registry API server ended with an error");
            }
        });
        let timings = LeaseTimings {
            lease: Duration::from_millis(cfg.ownership_lease_ms),
            grace: Duration::from_millis(cfg.ownership_grace_ms),
        };
        let duties = tokio::spawn(leader::run(reg.clone(), timings, rx));
        info!(node_id = cfg.node_id, region = %cfg.region, raft = %node.raft_addr(), client = %client_addr, "registry node started");
        RegistryServer {
            node,
            reg,
            client_addr,
            shutdown,
            client_server,
            duties,
            shutdown_deadline: Duration::from_millis(cfg.shutdown_deadline_ms),
        }
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

    /// Is this node leading with its ownership leases started (ready for renewals)?
    pub fn leads(&self) -> bool {
        self.reg.assume_leader().is_ok() && self.reg.hooks.leases.lock().expect("leases lock").is_some()
    }

    /// Forms the registry from `members` (call on one node, once).
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
