//! The machine's floor, measured in the same run as the workloads, so a ratio to etcd
//! can be read against what this machine allows at all (docs/benchmarks.md, "The
//! floor"). Each is a [`Locker`] whose `lock` and `unlock` are one unit of the floor,
//! so the run's machinery times them like a lock cycle of two calls:
//!
//! - `floor-rpc`: one gRPC round trip through holdfast's transport (mutual TLS unless
//!   `--certs-dir` is unset) to the gateway's `grpc.health.v1.Health/Check`, whose
//!   handler does nothing: what every client call, and every Raft message between two
//!   nodes, costs before any work;
//! - `floor-fsync`: one 128-byte append to a file, then `fdatasync`: what a log write
//!   costs before it counts as durable (RocksDB's WAL sync is an `fdatasync`).

use crate::Locker;
use holdfast_rpc::{Security, Transport, TransportOptions};
use std::io::Write;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// One client's gRPC round trips to a gateway's health service.
pub struct RpcPing {
    health: HealthClient<holdfast_rpc::Channel>,
}

impl RpcPing {
    pub async fn connect(security: &Security, endpoints: &[String]) -> Result<RpcPing, String> {
        let endpoint = endpoints.first().ok_or("no endpoint")?;
        let ch = Transport::new(TransportOptions::default(), security.clone()).connect(endpoint).await.map_err(|e| e.to_string())?;
        Ok(RpcPing { health: HealthClient::new(ch) })
    }

    async fn ping(&mut self) -> Result<(), String> {
        self.health.check(HealthCheckRequest { service: String::new() }).await.map(drop).map_err(|s| s.message().to_owned())
    }
}

impl Locker for RpcPing {
    async fn lock(&mut self, _key: &str) -> Result<(), String> {
        self.ping().await
    }

    async fn unlock(&mut self) -> Result<(), String> {
        self.ping().await
    }
}

/// Synced appends to a file of its own in `dir`, removed when dropped.
pub struct DiskSync {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl DiskSync {
    pub fn create(dir: &std::path::Path) -> Result<DiskSync, String> {
        let path = dir.join(format!("holdfast-bench-fsync-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(DiskSync { file, path })
    }

    /// The append and its sync, on this task's thread: the single client is the only
    /// work of the run, so blocking it is the measurement.
    fn append(&mut self) -> Result<(), String> {
        self.file.write_all(&[0x5a; 128]).and_then(|()| self.file.sync_data()).map_err(|e| e.to_string())
    }
}

impl Drop for DiskSync {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Locker for DiskSync {
    async fn lock(&mut self, _key: &str) -> Result<(), String> {
        self.append()
    }

    async fn unlock(&mut self) -> Result<(), String> {
        self.append()
    }
}
