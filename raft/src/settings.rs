//! What every node configuration on this substrate shares: loading it in layers with
//! the `config` crate (defaults, file, `HOLDFAST_*` environment, flags) and validating
//! the Raft timings and the addresses. Each server keeps its own typed struct, with
//! `#[serde(deny_unknown_fields)]`, and its own cross-field rules on top of these.

use std::net::SocketAddr;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::node::RaftTimings;
use crate::types::NodeId;

pub use holdfast_settings::ConfigError;

/// Default of `shutdown_deadline_ms`, the longest a graceful shutdown may take.
pub const DEFAULT_SHUTDOWN_DEADLINE_MS: u64 = 5000;

/// Loads `T` from the node defaults (`heartbeat_ms`, `election_min_ms`,
/// `election_max_ms`, `snapshot_every_logs` from [`RaftTimings::default`], and
/// `shutdown_deadline_ms`), then the caller's `defaults` (which may replace them), then
/// `file` (if any), then `HOLDFAST_*` environment variables (`HOLDFAST_NODE_ID=2`; `__`
/// nests keys), then `overrides` (from flags). `T` must have those five fields (a
/// default it lacks is an unknown field). Not validated: that is the caller's
/// `validate()`.
pub fn load_layered<T: DeserializeOwned>(defaults: &[(&str, config::Value)], file: Option<&Path>, overrides: &[(&str, String)]) -> Result<T, ConfigError> {
    let t = RaftTimings::default();
    let node_defaults: [(&str, config::Value); 5] = [
        ("heartbeat_ms", t.heartbeat_ms.into()),
        ("election_min_ms", t.election_min_ms.into()),
        ("election_max_ms", t.election_max_ms.into()),
        ("snapshot_every_logs", t.snapshot_every_logs.into()),
        ("shutdown_deadline_ms", DEFAULT_SHUTDOWN_DEADLINE_MS.into()),
    ];
    holdfast_settings::layered(node_defaults.iter().chain(defaults), file, overrides)
}

/// The checks every Raft node's configuration needs: a node id, timings under which a
/// slow heartbeat does not start elections, and listen addresses that parse and differ.
/// `other_addrs` are further `(field, host:port)` pairs to check (a metrics endpoint).
pub fn validate_node(node_id: NodeId, timings: &RaftTimings, raft_addr: &str, client_addr: &str, other_addrs: &[(&str, &str)]) -> Result<(), ConfigError> {
    let bad = |m: String| Err(ConfigError::Invalid(m));
    if node_id == 0 {
        return bad("node_id must be at least 1".into());
    }
    let t = timings;
    if t.heartbeat_ms == 0 || t.election_min_ms < 3 * t.heartbeat_ms {
        return bad(format!(
            "election_min_ms ({}) must be at least 3 × heartbeat_ms ({}), or followers start elections on a slow heartbeat",
            t.election_min_ms, t.heartbeat_ms
        ));
    }
    if t.election_max_ms <= t.election_min_ms {
        return bad(format!("election_max_ms ({}) must exceed election_min_ms ({})", t.election_max_ms, t.election_min_ms));
    }
    for (name, addr) in [("raft_addr", raft_addr), ("client_addr", client_addr)].iter().chain(other_addrs) {
        if addr.parse::<SocketAddr>().is_err() {
            return bad(format!("{name} {addr:?} is not host:port with a numeric IP"));
        }
    }
    if raft_addr == client_addr && !raft_addr.ends_with(":0") {
        return bad("raft_addr and client_addr must differ".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timings(heartbeat_ms: u64, election_min_ms: u64, election_max_ms: u64) -> RaftTimings {
        RaftTimings { heartbeat_ms, election_min_ms, election_max_ms, ..RaftTimings::default() }
    }

    #[test]
    fn node_checks_name_the_field_at_fault() {
        let ok = timings(150, 1000, 2000);
        let err = |r: Result<(), ConfigError>| r.unwrap_err().to_string();
        assert!(validate_node(1, &ok, "127.0.0.1:1", "127.0.0.1:2", &[]).is_ok());
        assert!(err(validate_node(0, &ok, "127.0.0.1:1", "127.0.0.1:2", &[])).contains("node_id"));
        assert!(err(validate_node(1, &timings(150, 400, 2000), "127.0.0.1:1", "127.0.0.1:2", &[])).contains("election_min_ms (400)"));
        assert!(err(validate_node(1, &timings(150, 1000, 1000), "127.0.0.1:1", "127.0.0.1:2", &[])).contains("election_max_ms"));
        assert!(err(validate_node(1, &ok, "127.0.0.1:1", "127.0.0.1:1", &[])).contains("must differ"));
        assert!(validate_node(1, &ok, "127.0.0.1:0", "127.0.0.1:0", &[]).is_ok(), "port 0 twice is two ports");
        assert!(err(validate_node(1, &ok, "127.0.0.1:1", "127.0.0.1:2", &[("metrics_addr", "x")])).contains("metrics_addr"));
    }
}
