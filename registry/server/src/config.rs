//! A registry node's configuration: a typed struct with every field documented (unit,
//! default), loaded with the `config` crate from a file, then `HOLDFAST_*` environment
//! variables, then command-line overrides, and validated as a whole.

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
    /// Leader heartbeat, ms. Default 150. Registry voters are far apart: raise it with
    /// the WAN round trip.
    pub heartbeat_ms: u64,
    /// Election timeout range, ms. Defaults 1000 and 2000.
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// How long one ownership renewal lets a cell serve its shards, ms. Default 3000.
    /// Losing registry quorum stops grants everywhere after about this long.
    pub ownership_lease_ms: u64,
    /// Extra wait after a source's lease ends before its shard moves, covering
    /// clock-rate differences between registry and cell, ms. Default 200.
    pub ownership_grace_ms: u64,
    /// Entries between snapshots. Default 5000.
    pub snapshot_every_logs: u64,
    /// Longest a graceful shutdown may take before the process exits anyway, ms. Default 5000.
    pub shutdown_deadline_ms: u64,
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot load the configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl RegistryConfig {
    /// Loads from `file` (if any), then `HOLDFAST_*` env (`HOLDFAST_NODE_ID=2`), then
    /// `overrides` (from flags), and validates.
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<RegistryConfig, ConfigError> {
        let mut b = config::Config::builder()
            .set_default("region", "local")?
            .set_default("raft_addr", "127.0.0.1:7201")?
            .set_default("client_addr", "127.0.0.1:7200")?
            .set_default("heartbeat_ms", 150)?
            .set_default("election_min_ms", 1000)?
            .set_default("election_max_ms", 2000)?
            .set_default("ownership_lease_ms", 3000)?
            .set_default("ownership_grace_ms", 200)?
            .set_default("snapshot_every_logs", 5000)?
            .set_default("shutdown_deadline_ms", 5000)?;
        if let Some(f) = file {
            b = b.add_source(config::File::from(f));
        }
        // The prefix separator must be set too or `HOLDFAST_X` is silently ignored.
        b = b.add_source(config::Environment::with_prefix("HOLDFAST").prefix_separator("_").separator("__").try_parsing(true));
        for (k, v) in overrides {
            b = b.set_override(*k, v.clone())?;
        }
        let c: RegistryConfig = b.build()?.try_deserialize()?;
        c.validate()?;
        Ok(c)
    }

    /// Catches mistakes between fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.node_id == 0 {
            return bad("node_id must be at least 1".into());
        }
        if self.heartbeat_ms == 0 || self.election_min_ms < 3 * self.heartbeat_ms {
            return bad(format!(
                "election_min_ms ({}) must be at least 3 × heartbeat_ms ({})",
                self.election_min_ms, self.heartbeat_ms
            ));
        }
        if self.election_max_ms <= self.election_min_ms {
            return bad(format!("election_max_ms ({}) must exceed election_min_ms ({})", self.election_max_ms, self.election_min_ms));
        }
        if self.ownership_lease_ms < 3 * self.heartbeat_ms {
            return bad(format!(
                "ownership_lease_ms ({}) must be at least 3 × heartbeat_ms ({}): cells renew at a third of it",
                self.ownership_lease_ms, self.heartbeat_ms
            ));
        }
        if self.ownership_grace_ms >= self.ownership_lease_ms {
            return bad(format!("ownership_grace_ms ({}) must be below ownership_lease_ms ({})", self.ownership_grace_ms, self.ownership_lease_ms));
        }
        for (name, addr) in [("raft_addr", &self.raft_addr), ("client_addr", &self.client_addr)] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return bad(format!("{name} {addr:?} is not host:port with a numeric IP"));
            }
        }
        if self.raft_addr == self.client_addr && !self.raft_addr.ends_with(":0") {
            return bad("raft_addr and client_addr must differ".into());
        }
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
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_lease_ms = 2000\n").unwrap();
        let c = RegistryConfig::load(Some(&f), &[("node_id", "2".into())]).unwrap();
        assert_eq!((c.node_id, c.ownership_lease_ms, c.ownership_grace_ms), (2, 2000, 200));
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_lease_ms = 100\n").unwrap();
        let e = RegistryConfig::load(Some(&f), &[]).unwrap_err().to_string();
        assert!(e.contains("ownership_lease_ms (100)"), "{e}");
        std::fs::write(&f, "node_id = 1\ndata_dir = \"/tmp/r\"\nownership_grace_ms = 5000\n").unwrap();
        assert!(RegistryConfig::load(Some(&f), &[]).unwrap_err().to_string().contains("ownership_grace_ms"));
    }
}
