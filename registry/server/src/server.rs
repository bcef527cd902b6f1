//! `RegistryServer`: one running node of the registry — its Raft node (peer port), its
//! client port (RegistryService), and its leader duties — with a shutdown that has a
//! hard deadline.

use crate::config::RegistryConfig;
use crate::leader::{self, LeaseTimings};
use crate::machine::{Hooks, RegistryMachine};
use crate::registry::Registry;
use crate::service::RegistryApi;
use holdfast_proto::registry::v1::registry_service_server::RegistryServiceServer;
use holdfast_raft::{Group, MemoryDisk, NodeConfig, RaftNode, Serving, StartError};
use holdfast_rpc::net::Listener;
use holdfast_rpc::Transport;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tracing::info;

/// A running registry node. Its node accessors (`node_id`, `client_addr`,
/// `raft_addr`, `metrics`, `initialize`, ...) are [`Serving`]'s.
#[derive(Debug)]
pub struct RegistryServer {
    serving: Serving<RegistryMachine>,
    reg: Arc<Registry>,
}

impl std::ops::Deref for RegistryServer {
    type Target = Serving<RegistryMachine>;
    fn deref(&self) -> &Serving<RegistryMachine> {
        &self.serving
    }
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
        let metrics = holdfast_raft::bind_optional(cfg.metrics_addr.as_deref()).await?;
        let node = RaftNode::start(Self::node_config(cfg, client.local_addr()?)?, raft, RegistryMachine::new(hooks.clone())).await?;
        Ok(Self::serve(cfg, node, hooks, client.into(), metrics))
    }

    /// Starts a node of the deterministic simulation (docs/simulation.md): its
    /// listeners and `transport` are of the simulated network, its RocksDB runs in
    /// `disk`, and it serves no metrics port. Everything else is what
    /// [`RegistryServer::start`] starts.
    pub async fn start_simulated(
        cfg: &RegistryConfig,
        raft: Listener,
        client: Listener,
        transport: Transport,
        disk: MemoryDisk,
    ) -> Result<RegistryServer, StartError> {
        let hooks = Hooks::new();
        let mut node_cfg = Self::node_config(cfg, client.local_addr()?)?;
        node_cfg.transport = transport;
        node_cfg.memory = Some(disk);
        let node = RaftNode::start(node_cfg, raft, RegistryMachine::new(hooks.clone())).await?;
        Ok(Self::serve(cfg, node, hooks, client, None))
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
        let metrics = holdfast_raft::bind_optional(cfg.metrics_addr.as_deref()).await?;
        let node_cfg = Self::node_config(cfg, client.local_addr()?)?;
        let node = RaftNode::start_with_faults(node_cfg, raft, RegistryMachine::new(hooks.clone()), faults).await?;
        Ok(Self::serve(cfg, node, hooks, client.into(), metrics))
    }

    fn node_config(cfg: &RegistryConfig, client_addr: std::net::SocketAddr) -> Result<NodeConfig, StartError> {
        let mut node_cfg = NodeConfig::new(cfg.node_id, "registry", &cfg.data_dir);
        node_cfg.client_addr = cfg.advertise_client_addr.clone().unwrap_or_else(|| client_addr.to_string());
        node_cfg.timings = cfg.timings();
        node_cfg.transport = Transport::new(cfg.transport.clone(), cfg.tls.security().map_err(std::io::Error::other)?);
        Ok(node_cfg)
    }

    fn serve(cfg: &RegistryConfig, node: RaftNode<RegistryMachine>, hooks: Arc<Hooks>, client: Listener, metrics: Option<TcpListener>) -> RegistryServer {
        holdfast_telemetry::install();
        let group = Group::new(node.raft().clone(), node.state().clone(), cfg.node_id, "the registry");
        let tasks = holdfast_rpc::Tasks::new();
        let reg = Arc::new(Registry { group, hooks, tasks: tasks.clone() });
        let transport = node.transport().clone();
        let api = holdfast_rpc::bounded!(RegistryServiceServer::new(RegistryApi::new(reg.clone())), transport);
        // Gateways, cells and root call the registry; people go through a gateway.
        let router = transport.grpc_server().add_service(InterceptedService::new(api, holdfast_rpc::auth::nodes_and_root));
        let serving = Serving::new(node, client, router, tasks, Duration::from_millis(cfg.shutdown_deadline_ms), "registry API");
        let timings = LeaseTimings::new(
            Duration::from_millis(cfg.ownership_lease_ms),
            Duration::from_millis(cfg.ownership_renew_ms),
            Duration::from_millis(cfg.ownership_grace_ms),
        );
        serving.spawn("leader duties", leader::run(reg.clone(), timings, serving.stop_signal()));
        serving.spawn("metrics refresh", crate::metrics::refresh(reg.clone(), serving.stop_signal()));
        if let Some(listener) = metrics {
            serving.serve_metrics(listener);
        }
        info!(node_id = cfg.node_id, region = %cfg.region, raft = %serving.raft_addr(), client = %serving.client_addr(), "registry node started");
        RegistryServer { serving, reg }
    }

    /// Is this node leading with its ownership leases started (ready for renewals)?
    pub fn leads(&self) -> bool {
        self.reg.assume_leader().is_ok() && self.reg.hooks.leases.lock().expect("leases lock").is_some()
    }

    /// Stops accepting calls, stops leader duties, stops Raft and closes RocksDB,
    /// within the configured deadline.
    pub async fn shutdown(self) {
        self.serving.shutdown().await;
    }
}
