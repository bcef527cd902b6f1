//! A gateway's configuration: loaded with the `config` crate from a file, then
//! `HOLDFAST_*` environment variables, then flags, and validated.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// One gateway. Stateless: run as many per region as you like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// The region this gateway fronts (shown on /readyz and in logs). Default `local`.
    pub region: String,
    /// Registry client addresses, comma-separated. Required.
    pub registry_endpoints: String,
    /// gRPC listen address (LockService, RegistryService, health, reflection). Default `127.0.0.1:7400`.
    pub grpc_addr: String,
    /// HTTP listen address (the JSON API, /metrics, /healthz, /readyz). Default `127.0.0.1:7480`.
    pub http_addr: String,
    /// Longest a graceful shutdown may take, ms. Default 5000.
    pub shutdown_deadline_ms: u64,
    /// Transport settings (`[transport]`: timeouts, keepalive, message and concurrency
    /// limits) of both ports and of every call to cells and the registry.
    #[serde(default)]
    pub transport: holdfast_rpc::TransportOptions,
    /// Mutual TLS (`[tls]`: `certs_dir` with ca.crt, node.crt, node.key) on both ports
    /// and to cells and the registry; plaintext only with `insecure = true`
    /// (`--insecure`).
    #[serde(default)]
    pub tls: holdfast_rpc::TlsOptions,
}

pub use holdfast_settings::ConfigError;

impl GatewayConfig {
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<GatewayConfig, ConfigError> {
        let defaults: [(&str, config::Value); 5] = [
            ("region", "local".into()),
            ("registry_endpoints", "".into()),
            ("grpc_addr", "127.0.0.1:7400".into()),
            ("http_addr", "127.0.0.1:7480".into()),
            ("shutdown_deadline_ms", 5000.into()),
        ];
        let c: GatewayConfig = holdfast_settings::layered(&defaults, file, overrides)?;
        c.validate()?;
        Ok(c)
    }

    pub fn registry(&self) -> Vec<String> {
        self.registry_endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.registry().is_empty() {
            return bad("registry_endpoints is required: the gateway learns placement from the registry".into());
        }
        for (name, addr) in [("grpc_addr", &self.grpc_addr), ("http_addr", &self.http_addr)] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return bad(format!("{name} {addr:?} is not host:port with a numeric IP"));
            }
        }
        for e in self.registry() {
            holdfast_rpc::host_port(&e).map_err(|e| ConfigError::Invalid(format!("registry_endpoints: {e}")))?;
        }
        self.transport.validate().map_err(ConfigError::Invalid)?;
        self.tls.validate().map_err(ConfigError::Invalid)?;
        Ok(())
    }
}
