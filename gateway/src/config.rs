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
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot load the configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl GatewayConfig {
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<GatewayConfig, ConfigError> {
        let mut b = config::Config::builder()
            .set_default("region", "local")?
            .set_default("registry_endpoints", "")?
            .set_default("grpc_addr", "127.0.0.1:7400")?
            .set_default("http_addr", "127.0.0.1:7480")?
            .set_default("shutdown_deadline_ms", 5000)?;
        if let Some(f) = file {
            b = b.add_source(config::File::from(f));
        }
        // The prefix separator must be set or `HOLDFAST_X` is silently ignored. The
        // command line's own variables are not gateway settings.
        let vars: config::Map<String, String> =
            std::env::vars().filter(|(k, _)| !holdfast_core::CLI_ONLY_ENV.contains(&k.as_str())).collect();
        b = b.add_source(config::Environment::with_prefix("HOLDFAST").prefix_separator("_").separator("__").try_parsing(true).source(Some(vars)));
        for (k, v) in overrides {
            b = b.set_override(*k, v.clone())?;
        }
        let c: GatewayConfig = b.build()?.try_deserialize()?;
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
            if e.parse::<std::net::SocketAddr>().is_err() {
                return bad(format!("registry endpoint {e:?} is not host:port with a numeric IP"));
            }
        }
        Ok(())
    }
}
