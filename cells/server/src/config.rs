//! A cell node's configuration: a typed struct with every field documented (unit,
//! default), loaded with the `config` crate from a file, then `HOLDFAST_*` environment
//! variables, then command-line overrides, and validated as a whole. The loading and
//! the checks every Raft node needs are `holdfast_raft::settings`'s; the cell's own
//! rules (the checkpoint interval) are here.

use holdfast_raft::settings::{load_layered, validate_node};
use holdfast_raft::RaftTimings;
use holdfast_rpc::{TlsOptions, TransportOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One node of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellConfig {
    /// This node's Raft id in its cell; never reuse one. Required.
    pub node_id: u64,
    /// The cell's name, used in logs and metrics. Default `cell-1`.
    pub cell: String,
    /// The region the cell runs in. Default `local`.
    pub region: String,
    /// RocksDB directory of this node; one node per directory. Required.
    pub data_dir: PathBuf,
    /// Where peers reach this node's Raft service (listen address). Default `127.0.0.1:7101`.
    pub raft_addr: String,
    /// Where clients reach this node's LockService and CellAdmin. Default `127.0.0.1:7001`.
    pub client_addr: String,
    /// Client address given in `NOT_LEADER` hints, if it differs from `client_addr`.
    pub advertise_client_addr: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served over HTTP; unset = not
    /// served. Default unset.
    pub metrics_addr: Option<String>,
    /// Client addresses of registry nodes, comma-separated (`HOLDFAST_REGISTRY_ENDPOINTS`,
    /// `--registry`). Set: the cell follows the registry (ownership lease, adoption,
    /// seals). Empty: admin mode, namespaces and shards come from `CellAdmin` calls.
    /// Default empty.
    pub registry_endpoints: String,
    /// How long before its ownership lease ends the cell stops granting, ms: covers
    /// clock-rate differences and a proposal in flight. Default 500.
    pub ownership_margin_ms: u64,
    /// Leader heartbeat, ms. Default 100.
    pub heartbeat_ms: u64,
    /// Election timeout range, ms. Defaults 300 and 500 (the leader lease is the max).
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// How often the leader commits a checkpoint of sessions that did not renew, ms.
    /// Default 250. Part of the bound on a dead session's life (docs/sessions.md).
    pub checkpoint_interval_ms: u64,
    /// Entries between snapshots. Default 5000.
    pub snapshot_every_logs: u64,
    /// Longest a graceful shutdown may take before the process exits anyway, ms. Default 5000.
    pub shutdown_deadline_ms: u64,
    /// Transport settings (`[transport]`: timeouts, keepalive, message and concurrency
    /// limits); every field has a default.
    #[serde(default)]
    pub transport: TransportOptions,
    /// Mutual TLS (`[tls]`: `certs_dir` with ca.crt, node.crt, node.key), on every port
    /// of the node; plaintext only with `insecure = true` (`--insecure`).
    #[serde(default)]
    pub tls: TlsOptions,
    /// A planted bug, to prove a drill's checker catches it — never in production, and
    /// refused by release builds. `token-reuse`: grants stop advancing the token
    /// sequence, so a lock's next holder gets the last holder's token. Default unset.
    pub unsafe_plant: Option<String>,
}

pub use holdfast_raft::settings::ConfigError;

impl CellConfig {
    /// Loads from the defaults (the node defaults are `holdfast_raft::settings`'s), then
    /// `file` (if any), then `HOLDFAST_*` env (`HOLDFAST_NODE_ID=2`), then
    /// `overrides` (from flags), and validates.
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<CellConfig, ConfigError> {
        let defaults: [(&str, config::Value); 7] = [
            ("cell", "cell-1".into()),
            ("region", "local".into()),
            ("raft_addr", "127.0.0.1:7101".into()),
            ("client_addr", "127.0.0.1:7001".into()),
            ("checkpoint_interval_ms", 250.into()),
            ("registry_endpoints", "".into()),
            ("ownership_margin_ms", 500.into()),
        ];
        let c: CellConfig = load_layered(&defaults, file, overrides)?;
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

    /// The registry's client addresses; empty in admin mode.
    pub fn registry(&self) -> Vec<String> {
        self.registry_endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect()
    }

    /// Catches mistakes between fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let metrics: Vec<(&str, &str)> = self.metrics_addr.iter().map(|a| ("metrics_addr", a.as_str())).collect();
        validate_node(self.node_id, &self.timings(), &self.raft_addr, &self.client_addr, &metrics)?;
        if let Some(a) = &self.advertise_client_addr {
            holdfast_rpc::host_port(a).map_err(|e| ConfigError::Invalid(format!("advertise_client_addr: {e}")))?;
        }
        if self.checkpoint_interval_ms == 0 || self.checkpoint_interval_ms > self.election_min_ms {
            return Err(ConfigError::Invalid(format!(
                "checkpoint_interval_ms ({}) must be between 1 and election_min_ms ({}): a leader should checkpoint before it can be deposed",
                self.checkpoint_interval_ms, self.election_min_ms
            )));
        }
        match self.unsafe_plant.as_deref() {
            None => {}
            Some("token-reuse") if cfg!(debug_assertions) => {}
            Some("token-reuse") => return Err(ConfigError::Invalid("unsafe_plant needs a debug build: release builds cannot plant bugs".into())),
            Some(other) => return Err(ConfigError::Invalid(format!("unsafe_plant {other:?}: the only planted bug is \"token-reuse\""))),
        }
        for e in self.registry() {
            holdfast_rpc::host_port(&e).map_err(|e| ConfigError::Invalid(format!("registry_endpoints: {e}")))?;
        }
        self.transport.validate().map_err(ConfigError::Invalid)?;
        self.tls.validate().map_err(ConfigError::Invalid)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("cell.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn file_then_env_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "node_id = 1\ndata_dir = \"/tmp/x\"\ncheckpoint_interval_ms = 200\nheartbeat_ms = 90\n");
        // The env override must take effect (the config crate's prefix trap).
        // (A variable no other test reads: tests run in parallel in one process.)
        std::env::set_var("HOLDFAST_SNAPSHOT_EVERY_LOGS", "777");
        // The CLI's own variable is not a node setting: it must not break the load.
        std::env::set_var("HOLDFAST_RAFT_ENDPOINT", "127.0.0.1:9");
        let c = CellConfig::load(Some(&f), &[("node_id", "3".into()), ("tls.insecure", "true".into())]).unwrap();
        std::env::remove_var("HOLDFAST_SNAPSHOT_EVERY_LOGS");
        std::env::remove_var("HOLDFAST_RAFT_ENDPOINT");
        assert_eq!(c.node_id, 3, "flag beats file");
        assert_eq!(c.snapshot_every_logs, 777, "env beats default");
        assert_eq!(c.heartbeat_ms, 90, "file beats default");
        assert_eq!(c.checkpoint_interval_ms, 200, "file beats default");
        assert_eq!(c.election_max_ms, 500, "default");
    }

    #[test]
    fn mistakes_are_caught_with_clear_messages() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "node_id = 1\ndata_dir = \"/tmp/x\"\nelection_min_ms = 200\n");
        let e = CellConfig::load(Some(&f), &[]).unwrap_err().to_string();
        assert!(e.contains("election_min_ms (200) must be at least 3 × heartbeat_ms (100)"), "{e}");
        let f = write(dir.path(), "node_id = 1\ndata_dir = \"/tmp/x\"\nbogus = 1\n");
        assert!(CellConfig::load(Some(&f), &[]).unwrap_err().to_string().contains("bogus"));
        let f = write(dir.path(), "data_dir = \"/tmp/x\"\n");
        assert!(CellConfig::load(Some(&f), &[]).unwrap_err().to_string().contains("node_id"));
        let f = write(dir.path(), "node_id = 1\ndata_dir = \"/tmp/x\"\nclient_addr = \"nowhere\"\n");
        assert!(CellConfig::load(Some(&f), &[]).unwrap_err().to_string().contains("client_addr"));
        // TLS is on unless plaintext is asked for: no certificates, no start.
        let f = write(dir.path(), "node_id = 1\ndata_dir = \"/tmp/x\"\n");
        let e = CellConfig::load(Some(&f), &[]).unwrap_err().to_string();
        assert!(e.contains("TLS is on by default") && e.contains("--insecure"), "{e}");
        let e = CellConfig::load(Some(&f), &[("tls.certs_dir", "/nonexistent".into())]).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.crt"), "{e}");
    }
}
