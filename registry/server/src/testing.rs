//! Test support (feature `test-support`): a 3-voter registry in this process (voters
//! in regions east, west, south), RocksDB in a directory the caller owns, gRPC on
//! loopback, with test timings (heartbeat 100 ms, elections 1–2 s) and a 3 s ownership
//! lease. Used by the registry's own tests and by the cell's and the gateway's.

use crate::{RegistryConfig, RegistryServer};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The ownership lease the test registry grants, ms.
pub const LEASE_MS: u64 = 3_000;

/// How often the test registry's cells renew, ms.
pub const RENEW_MS: u64 = 1_000;

/// The ownership grace the test registry waits past a lapsed lease, ms.
pub const GRACE_MS: u64 = 200;

/// The configuration of test voter `id` (1..=3) under `dir`, on port 0.
pub fn config(dir: &Path, id: u64) -> RegistryConfig {
    RegistryConfig {
        node_id: id,
        region: ["east", "west", "south"][(id as usize - 1) % 3].into(),
        data_dir: dir.join(format!("registry-{id}")),
        raft_addr: "127.0.0.1:0".into(),
        client_addr: "127.0.0.1:0".into(),
        advertise_client_addr: None,
        metrics_addr: None,
        heartbeat_ms: 100,
        election_min_ms: 1_000,
        election_max_ms: 2_000,
        ownership_lease_ms: LEASE_MS,
        ownership_renew_ms: RENEW_MS,
        ownership_grace_ms: GRACE_MS,
        snapshot_every_logs: 5_000,
        shutdown_deadline_ms: 5_000,
        transport: Default::default(),
        tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
    }
}

/// Starts and forms the registry under `dir`, with the test lease ([`LEASE_MS`]).
pub async fn start_registry(dir: &Path) -> Vec<RegistryServer> {
    start_registry_with_lease(dir, LEASE_MS).await
}

/// [`start_registry`] with an ownership lease of `lease_ms` (a world whose tests renew
/// sessions with TTLs longer than the short test lease allows in full).
pub async fn start_registry_with_lease(dir: &Path, lease_ms: u64) -> Vec<RegistryServer> {
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let raft = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let cfg = RegistryConfig { ownership_lease_ms: lease_ms, ..config(dir, id) };
        nodes.push(RegistryServer::start(&cfg, raft, client).await.expect("start a registry node"));
    }
    let members = nodes.iter().map(|n| (n.node_id(), n.node().clone())).collect();
    nodes[0].initialize(members).await.expect("form the registry");
    nodes
}

/// The client address of the node that leads (with its leases started).
pub async fn leader_addr(nodes: &[RegistryServer], wait: Duration) -> SocketAddr {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(n) = nodes.iter().find(|n| n.leads()) {
            return n.client_addr();
        }
        assert!(Instant::now() < deadline, "no registry leader within {wait:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
