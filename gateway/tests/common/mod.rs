//! A small world for gateway tests: a 3-node registry, cells of 3 nodes that follow it,
//! and a gateway, all in-process over loopback gRPC with RocksDB in temp dirs. The
//! gateway, and each cell, reach the registry through proxies the test can cut.

#![allow(dead_code)]

use holdfast_cell::{CellConfig, CellServer};
use holdfast_gateway::{GatewayConfig, GatewayServer};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_registry::RegistryServer;
use holdfast_testkit::proxy::Proxy;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(20);
pub use holdfast_testkit::serial;

pub fn code(s: &tonic::Status) -> String {
    holdfast_rpc::status::code_of(s).map_or(String::new(), |c| c.as_str().to_owned())
}

pub struct World {
    pub registry: Vec<RegistryServer>,
    pub cells: BTreeMap<String, Vec<CellServer>>,
    pub gateway: GatewayServer,
    pub gateway_link: Vec<Proxy>,
    /// By cell: its nodes' path to the registry voters (one proxy per voter).
    pub cell_links: BTreeMap<String, Vec<Proxy>>,
    root: tempfile::TempDir,
}

impl World {
    /// Registry; cells `a` (region east) and, if `two_cells`, `b` (west); a gateway;
    /// region and cell records in the registry. No namespaces yet.
    pub async fn start(two_cells: bool) -> World {
        // Sessions here renew with TTLs of 10 s: a renewal is never confirmed past the
        // ownership lease (docs/sessions.md), so the lease is a minute, not the 3 s the
        // cell's ownership tests use to watch it run out.
        World::start_with_lease(two_cells, 60_000).await
    }

    /// [`World::start`] with the registry granting ownership leases of `lease_ms`.
    pub async fn start_with_lease(two_cells: bool, lease_ms: u64) -> World {
        let root = tempfile::tempdir().unwrap();
        let registry = holdfast_registry::testing::start_registry_with_lease(root.path(), lease_ms).await;

        let mut cells = BTreeMap::new();
        let mut cell_links = BTreeMap::new();
        let names: &[(&str, &str)] = if two_cells { &[("a", "east"), ("b", "west")] } else { &[("a", "east")] };
        for (name, region) in names {
            let mut links = Vec::new();
            for n in &registry {
                links.push(Proxy::start(n.client_addr()).await);
            }
            let via: Vec<String> = links.iter().map(|p| p.addr.to_string()).collect();
            cell_links.insert((*name).to_owned(), links);
            let mut nodes = Vec::new();
            for id in 1..=3u64 {
                let cfg = CellConfig {
                    node_id: id,
                    cell: (*name).into(),
                    region: (*region).into(),
                    data_dir: root.path().join(format!("{name}-{id}")),
                    raft_addr: "127.0.0.1:0".into(),
                    client_addr: "127.0.0.1:0".into(),
                    advertise_client_addr: None,
                    metrics_addr: None,
                    registry_endpoints: via.join(","),
                    ownership_margin_ms: 500,
                    heartbeat_ms: 100,
                    election_min_ms: 1_000,
                    election_max_ms: 2_000,
                    checkpoint_interval_ms: 500,
                    snapshot_every_logs: 5_000,
                    shutdown_deadline_ms: 5_000,
                    transport: Default::default(),
                    tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
                    unsafe_plant: None,
                };
                let raft = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
                nodes.push(CellServer::start_on(&cfg, raft, client).await.unwrap());
            }
            let members = nodes.iter().map(|n| (n.node_id(), n.node().clone())).collect();
            nodes[0].initialize(members).await.unwrap();
            cells.insert((*name).to_owned(), nodes);
        }

        let mut gateway_link = Vec::new();
        for n in &registry {
            gateway_link.push(Proxy::start(n.client_addr()).await);
        }
        let gcfg = GatewayConfig {
            region: "east".into(),
            registry_endpoints: gateway_link.iter().map(|p| p.addr.to_string()).collect::<Vec<_>>().join(","),
            grpc_addr: "127.0.0.1:0".into(),
            http_addr: "127.0.0.1:0".into(),
            shutdown_deadline_ms: 5_000,
            transport: Default::default(),
            tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
        };
        let gateway =
            GatewayServer::start(&gcfg, TcpListener::bind("127.0.0.1:0").await.unwrap(), TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
        let w = World { registry, cells, gateway, gateway_link, cell_links, root };

        let mut r = w.registry_client().await;
        for (name, region) in names {
            let _ = r.create_region(rpb::CreateRegionRequest { region: (*region).into() }).await;
            let members = w.cells[*name]
                .iter()
                .map(|n| rpb::CellMember { node_id: n.node_id(), client_addr: n.client_addr().to_string(), raft_addr: n.raft_addr().to_string() })
                .collect();
            r.register_cell(rpb::RegisterCellRequest { cell: (*name).into(), region: (*region).into(), members }).await.unwrap();
        }
        w
    }

    /// A namespace with its one shard `default` placed on cell `a`.
    pub async fn namespace(&self, name: &str, posture: pb::Posture, acquires_per_second: u32) {
        let mut r = self.registry_client().await;
        let config = apb::NamespaceConfig {
            name: name.into(),
            owner: "team".into(),
            // Only an efficiency namespace may be fail-open.
            intent: if posture == pb::Posture::FailOpen { pb::Intent::Efficiency as i32 } else { pb::Intent::Correctness as i32 },
            posture: posture as i32,
            quotas: (acquires_per_second > 0).then(|| apb::Quotas { acquires_per_second, ..Default::default() }),
            // These tests move shards and end holds; no lock-delay keeps their waits short.
            lock_delay_ms: Some(0),
            ..Default::default()
        };
        r.create_namespace(rpb::CreateNamespaceRequest { config: Some(config) }).await.unwrap();
        r.place_shard(rpb::PlaceShardRequest { ns: name.into(), shard: "default".into(), cell: "a".into() }).await.unwrap();
    }

    pub async fn registry_client(&self) -> RegistryServiceClient<Channel> {
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

    pub async fn gateway_channel(&self) -> Channel {
        holdfast_rpc::Transport::insecure().connect(&self.gateway.grpc_addr().to_string()).await.unwrap()
    }

    pub fn http(&self, path: &str) -> String {
        format!("http://{}{path}", self.gateway.http_addr())
    }

    pub fn cut_gateway_from_registry(&self, on: bool) {
        for p in &self.gateway_link {
            p.cut(on);
        }
    }

    /// Cuts (or heals) every path from a cell's nodes to the registry: the cell goes on
    /// serving on its ownership lease, and cannot renew it.
    pub fn cut_cell_from_registry(&self, cell: &str, on: bool) {
        for p in &self.cell_links[cell] {
            p.cut(on);
        }
    }

    /// Stops every node of a cell (the cell is down).
    pub async fn stop_cell(&mut self, name: &str) {
        for n in self.cells.remove(name).unwrap_or_default() {
            n.shutdown().await;
        }
    }

    pub async fn shutdown(self) {
        self.gateway.shutdown().await;
        for (_, nodes) in self.cells {
            for n in nodes {
                n.shutdown().await;
            }
        }
        for n in self.registry {
            n.shutdown().await;
        }
        drop(self.root);
    }
}

/// Retries `f` while it fails with a transient code (a shard being adopted, a leader
/// starting), up to [`WAIT`].
pub async fn retry<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let transient = |e: &tonic::Status| ["UNAVAILABLE", "MOVING", "NOT_OWNER", "NOT_LEADER", "UNKNOWN_NAMESPACE", "UNKNOWN_SHARD"].contains(&code(e).as_str());
    retry_when(what, transient, f).await
}

/// [`retry`] for the SDK's calls: while its error says a retry may succeed.
pub async fn retry_sdk<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, holdfast_client::Error>>,
{
    retry_when(what, holdfast_client::Error::is_retryable, f).await
}

/// Calls `f` every 100 ms while it fails with an error `transient` accepts, up to
/// [`WAIT`]; any other error, or one past the deadline, fails the test.
pub async fn retry_when<T, E: std::fmt::Debug, F, Fut>(what: &str, transient: impl Fn(&E) -> bool, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if transient(&e) && Instant::now() < deadline => {}
            Err(e) => panic!("{what}: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
