//! A registry node's configuration: a typed struct with every field documented (unit,
//! default), loaded with the `config` crate from a file, then `HOLDFAST_*` environment
//! variables, then command-line overrides, and validated as a whole. The loading and
//! the checks every Raft node needs are `holdfast_raft::settings`'s; the registry's own
//! rules (the ownership lease) are here.

use holdfast_raft::settings::{load_layered, validate_node};
use holdfast_raft::RaftTimings;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One node of the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// This node's Raft id in the registry; never reuse one. Required.
    pub node_id: u64,
    /// The region this voter runs in, for logs (spread voters over regions). Default `local`.
    pub region: String,
    /// RocksDB directory of this node; one node per directory. Required.
    pub data_dir: PathBuf,
    /// Where peers reach this node's Raft service (listen address). Default `127.0.0.1:7201`.
    pub raft_addr: String,
    /// Where clients and cells reach RegistryService. Default `127.0.0.1:7200`.
    pub client_addr: String,
    /// Client address given in `NOT_LEADER` hints, if it differs from `client_addr`.
    pub advertise_client_addr: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served over HTTP; unset = not
    /// served. Default unset.
    pub metrics_addr: Option<String>,
    /// Leader heartbeat, ms. Default 100. Registry voters are far apart: raise it with
    /// the WAN round trip.
    pub heartbeat_ms: u64,
    /// Election timeout range, ms. Defaults 300 and 500 (the leader lease is the max).
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// How long one ownership renewal lets a cell serve its shards, ms. Default
    /// 2,100,000 (35 minutes): a cell serves what it owns through a registry outage (or
    /// its region's cut from the others) this long, less its margin (2.6 s), so an
    /// outage of 30 minutes is ridden out with minutes to spare; an unplanned move away from a cell
    /// that cannot be reached waits this long unless an operator confirms the cell is
    /// fenced off (docs/registry.md, "Static stability").
    pub ownership_lease_ms: u64,
    /// How often cells renew, ms. Default 1000: moves and namespace changes reach a cell
    /// within about this long, and a new registry leader hears every live cell leader
    /// within a few of these.
    pub ownership_renew_ms: u64,
    /// Extra wait after a source's lease ends before its shard moves, covering
    /// clock-rate differences between registry and cell, ms. Default 200; the registry
    /// adds 0.1 % of the lease to it (`holdfast_core::clock_rate_allowance`).
    pub ownership_grace_ms: u64,
    /// Entries between snapshots. Default 5000.
    pub snapshot_every_logs: u64,
    /// Longest a graceful shutdown may take before the process exits anyway, ms. Default 5000.
    pub shutdown_deadline_ms: u64,
    /// Transport settings (`[transport]`: timeouts, keepalive, message and concurrency
    /// limits); every field has a default.
    #[serde(default)]
    pub transport: holdfast_rpc::TransportOptions,
    /// Mutual TLS (`[tls]`: `certs_dir` with ca.crt, node.crt, node.key), on both ports;
    /// plaintext only with `insecure = true` (`--insecure`).
    #[serde(default)]
    pub tls: holdfast_rpc::TlsOptions,
}

pub use holdfast_raft::settings::ConfigError;

impl RegistryConfig {
    /// Loads from the defaults (the node defaults are `holdfast_raft::settings`'s), then
    /// `file` (if any), then `HOLDFAST_*` env (`HOLDFAST_NODE_ID=2`), then
    /// `overrides` (from flags), and validates.
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<RegistryConfig, ConfigError> {
        let defaults: [(&str, config::Value); 6] = [
            ("region", "local".into()),
            ("raft_addr", "127.0.0.1:7201".into()),
            ("client_addr", "127.0.0.1:7200".into()),
            ("ownership_lease_ms", (holdfast_core::DEFAULT_OWNERSHIP_LEASE.as_millis() as u64).into()),
            ("ownership_renew_ms", 1000.into()),
            ("ownership_grace_ms", 200.into()),
        ];
        let c: RegistryConfig = load_layered(&defaults, file, overrides)?;
        c.validate()?;
        Ok(c)
    }

    /// The Raft timings this configuration asks for.
    pub fn timings(&self) -> RaftTimings {
        RaftTimings {
            heartbeat_ms: self.heartbeat_ms,
            election_min_ms: self.election_min_ms,
            election_max_ms: self.election_max_ms,
            snapshot_every_logs: self.snapshot_every_logs,
            ..RaftTimings::default()
        }
    }

    /// Catches mistakes between fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let metrics: Vec<(&str, &str)> = self.metrics_addr.iter().map(|a| ("metrics_addr", a.as_str())).collect();
        validate_node(self.node_id, &self.timings(), &self.raft_addr, &self.client_addr, &metrics)?;
        if let Some(a) = &self.advertise_client_addr {
            holdfast_rpc::host_port(a).map_err(|e| ConfigError::Invalid(format!("advertise_client_addr: {e}")))?;
        }
        if self.ownership_renew_ms < self.heartbeat_ms {
            return bad(format!("ownership_renew_ms ({}) must be at least heartbeat_ms ({})", self.ownership_renew_ms, self.heartbeat_ms));
        }
        if self.ownership_lease_ms < 3 * self.ownership_renew_ms {
            return bad(format!(
                "ownership_lease_ms ({}) must be at least 3 × ownership_renew_ms ({}): a cell must get several renewals in before its lease ends",
                self.ownership_lease_ms, self.ownership_renew_ms
            ));
        }
        if self.ownership_grace_ms >= self.ownership_lease_ms {
            return bad(format!("ownership_grace_ms ({}) must be below ownership_lease_ms ({})", self.ownership_grace_ms, self.ownership_lease_ms));
        }
        self.transport.validate().map_err(ConfigError::Invalid)?;
        self.tls.validate().map_err(ConfigError::Invalid)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_then_file_then_flags_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("registry.toml");
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\n").unwrap();
        let c = RegistryConfig::load(Some(&f), &[("tls.insecure", "true".into())]).unwrap();
        // Static stability: a long lease, renewed every second.
        assert_eq!((c.ownership_lease_ms, c.ownership_renew_ms, c.ownership_grace_ms), (2_100_000, 1_000, 200));
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_lease_ms = 3000\n").unwrap();
        let c = RegistryConfig::load(Some(&f), &[("node_id", "2".into()), ("tls.insecure", "true".into())]).unwrap();
        assert_eq!((c.node_id, c.ownership_lease_ms, c.ownership_grace_ms), (2, 3000, 200));
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_lease_ms = 2000\n").unwrap();
        let e = RegistryConfig::load(Some(&f), &[]).unwrap_err().to_string();
        assert!(e.contains("ownership_lease_ms (2000) must be at least 3 × ownership_renew_ms (1000)"), "{e}");
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_lease_ms = 3000\nownership_grace_ms = 5000\n").unwrap();
        assert!(RegistryConfig::load(Some(&f), &[]).unwrap_err().to_string().contains("ownership_grace_ms"));
    }
}
