//! A 3-node registry of real `RegistryServer`s: RocksDB in temp dirs, gRPC on loopback.
//! Waits are on conditions with deadlines.

#![allow(dead_code)]

use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as lpb;
use holdfast_proto::registry::v1 as pb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_registry::{RegistryConfig, RegistryServer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(20);
pub use holdfast_registry::testing::{GRACE_MS, LEASE_MS};

pub type Client = RegistryServiceClient<Channel>;

pub use holdfast_testkit::serial;

pub fn code(s: &tonic::Status) -> String {
    holdfast_rpc::status::code_of(s).map_or(String::new(), |c| c.as_str().to_owned())
}

pub struct TestRegistry {
    pub nodes: BTreeMap<u64, RegistryServer>,
    client_addrs: BTreeMap<u64, SocketAddr>,
    root: TempDir,
}

impl TestRegistry {
    /// Starts nodes 1..=3 ("voters in three regions") and forms the registry.
    pub async fn start() -> TestRegistry {
        let mut r = TestRegistry { nodes: BTreeMap::new(), client_addrs: BTreeMap::new(), root: tempfile::tempdir().unwrap() };
        for id in 1..=3 {
            let raft = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
            r.client_addrs.insert(id, client.local_addr().unwrap());
            let server = RegistryServer::start(&r.config(id), raft, client).await.unwrap();
            r.nodes.insert(id, server);
        }
        let members = r.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        r.nodes[&1].initialize(members).await.unwrap();
        r
    }

    fn config(&self, id: u64) -> RegistryConfig {
        holdfast_registry::testing::config(self.root.path(), id)
    }

    pub async fn stop_node(&mut self, id: u64) {
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown().await;
        }
    }

    /// The running node that leads with its ownership leases started.
    pub async fn leader(&self) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some((id, _)) = self.nodes.iter().find(|(_, n)| n.leads()) {
                return *id;
            }
            assert!(Instant::now() < deadline, "no registry leader within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn client_addr(&self, id: u64) -> SocketAddr {
        self.client_addrs[&id]
    }

    pub async fn client(&self, id: u64) -> Client {
        let ch = holdfast_rpc::Transport::insecure().connect(&self.client_addrs[&id].to_string()).await.unwrap();
        RegistryServiceClient::new(ch)
    }

    pub async fn leader_client(&self) -> Client {
        self.client(self.leader().await).await
    }

    pub async fn shutdown(mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.stop_node(id).await;
        }
    }
}

pub fn members(base: u64) -> Vec<pb::CellMember> {
    (1..=3).map(|i| pb::CellMember { node_id: i, client_addr: format!("127.0.0.1:{}", base + i), raft_addr: format!("127.0.0.1:{}", base + 100 + i) }).collect()
}

pub fn ns_config(name: &str) -> apb::NamespaceConfig {
    apb::NamespaceConfig { name: name.into(), owner: "team".into(), intent: lpb::Intent::Correctness as i32, lock_delay_ms: Some(1_000), ..Default::default() }
}

/// Regions east and west, cells east-1 (east) and west-1 (west), namespace `pay`, shard
/// `pay/default` on east-1.
pub async fn topology(c: &mut Client) {
    for region in ["east", "west"] {
        c.create_region(pb::CreateRegionRequest { region: region.into() }).await.unwrap();
    }
    c.register_cell(pb::RegisterCellRequest { cell: "east-1".into(), region: "east".into(), members: members(7000) }).await.unwrap();
    c.register_cell(pb::RegisterCellRequest { cell: "west-1".into(), region: "west".into(), members: members(8000) }).await.unwrap();
    c.create_namespace(pb::CreateNamespaceRequest { config: Some(ns_config("pay")) }).await.unwrap();
    c.place_shard(pb::PlaceShardRequest { ns: "pay".into(), shard: "default".into(), cell: "east-1".into() }).await.unwrap();
}

pub async fn owner(c: &mut Client, ns: &str, shard: &str) -> pb::ShardOwner {
    c.get_owner(pb::GetOwnerRequest { ns: ns.into(), shard: shard.into(), fresh: false }).await.unwrap().into_inner().owner.unwrap()
}

pub async fn renew(c: &mut Client, cell: &str) -> pb::RenewOwnershipResponse {
    c.renew_ownership(pb::RenewOwnershipRequest { cell: cell.into(), ..Default::default() }).await.unwrap().into_inner()
}

/// Everything a client can list, to check that a refused call changed nothing.
#[derive(Debug, PartialEq)]
pub struct Listing {
    regions: Vec<pb::Region>,
    cells: Vec<pb::Cell>,
    namespaces: Vec<apb::NamespaceConfig>,
    shards: pb::ListShardsResponse,
}

pub async fn listing(c: &mut Client) -> Listing {
    Listing {
        regions: c.list_regions(pb::ListRegionsRequest {}).await.unwrap().into_inner().regions,
        cells: c.list_cells(pb::ListCellsRequest { region: String::new() }).await.unwrap().into_inner().cells,
        namespaces: c.list_namespaces(pb::ListNamespacesRequest {}).await.unwrap().into_inner().configs,
        shards: c.list_shards(pb::ListShardsRequest::default()).await.unwrap().into_inner(),
    }
}
