//! How every holdfast server loads its settings, in layers with the `config` crate:
//! the server's defaults, then a TOML file (if given), then `HOLDFAST_*` environment
//! variables (`HOLDFAST_NODE_ID=2`; `__` nests keys), then overrides from flags. Each
//! server keeps its own typed struct (with `#[serde(deny_unknown_fields)]`) and its own
//! validation; this crate is only the loading, shared by the Raft nodes
//! (`holdfast_raft::settings`, which adds the node defaults) and the gateway, which
//! must not depend on the Raft crate.

use serde::de::DeserializeOwned;
use std::path::Path;

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot load the configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Loads `T` from `defaults`, then `file`, then the environment, then `overrides`.
/// Not validated: that is the caller's.
pub fn layered<'a, T: DeserializeOwned>(
    defaults: impl IntoIterator<Item = &'a (&'a str, config::Value)>,
    file: Option<&Path>,
    overrides: &[(&str, String)],
) -> Result<T, ConfigError> {
    let mut b = config::Config::builder();
    for (k, v) in defaults {
        b = b.set_default(*k, v.clone())?;
    }
    if let Some(f) = file {
        b = b.add_source(config::File::from(f));
    }
    b = b.add_source(environment());
    for (k, v) in overrides {
        b = b.set_override(*k, v.clone())?;
    }
    Ok(b.build()?.try_deserialize()?)
}

/// The `HOLDFAST_*` environment as a config source, without the command line's own
/// variables (`holdfast_core::CLI_ONLY_ENV`): a shell that exported one for the CLI must
/// still be able to start a server, whose config refuses unknown keys. The prefix
/// separator must be set too, or `HOLDFAST_X` is silently ignored (docs/development.md, "Traps already hit").
pub fn environment() -> config::Environment {
    let vars: config::Map<String, String> = std::env::vars().filter(|(k, _)| !holdfast_core::CLI_ONLY_ENV.contains(&k.as_str())).collect();
    config::Environment::with_prefix("HOLDFAST").prefix_separator("_").separator("__").try_parsing(true).source(Some(vars))
}
