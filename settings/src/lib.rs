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
    b = b.add_source(environment(field_names::<T>()));
    for (k, v) in overrides {
        b = b.set_override(*k, v.clone())?;
    }
    Ok(b.build()?.try_deserialize()?)
}

/// The `HOLDFAST_*` environment as a config source: the variables that name one of the
/// config's top-level keys (`known`; `HOLDFAST_RAFT__X` names `raft`). Any other
/// `HOLDFAST_*` variable is reported in a warning and left out, never a reason to stop:
/// a shell that exported one for the command line, or Kubernetes, which gives every pod
/// `<SERVICE>_PORT`, `<SERVICE>_SERVICE_HOST`, ... for each Service of its namespace (a
/// Service named `holdfast` makes `HOLDFAST_PORT`), must not keep a server from
/// starting. A key in a config file the server does not know still does. The command
/// line's own variables (`holdfast_core::CLI_ONLY_ENV`) are left out without a word.
/// With `known` = `None` (a config shape that does not list its keys) every variable is
/// passed on. The prefix separator must be set, or `HOLDFAST_X` is silently ignored
/// (docs/development.md, "Traps already hit").
fn environment(known: Option<&[&str]>) -> config::Environment {
    let (vars, unknown) = split_environment(std::env::vars(), known);
    if !unknown.is_empty() {
        tracing::warn!(variables = %unknown.join(" "), "ignoring HOLDFAST_* environment variables that name no setting of this server");
    }
    config::Environment::with_prefix("HOLDFAST").prefix_separator("_").separator("__").try_parsing(true).source(Some(vars))
}

/// `vars` split into what the config source gets and the `HOLDFAST_*` names it does
/// not know (sorted).
fn split_environment(vars: impl Iterator<Item = (String, String)>, known: Option<&[&str]>) -> (config::Map<String, String>, Vec<String>) {
    let mut kept = config::Map::new();
    let mut unknown = Vec::new();
    for (k, v) in vars {
        let Some(rest) = k.strip_prefix("HOLDFAST_") else { continue };
        if holdfast_core::CLI_ONLY_ENV.contains(&k.as_str()) {
            continue;
        }
        let key = rest.split("__").next().unwrap_or_default().to_ascii_lowercase();
        if known.is_none_or(|known| known.contains(&key.as_str())) {
            kept.insert(k, v);
        } else {
            unknown.push(k);
        }
    }
    unknown.sort();
    (kept, unknown)
}

/// The top-level field names of a config struct, as its `Deserialize` implementation
/// declares them (aliases included), or `None` if `T` does not deserialize as a struct.
fn field_names<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    use serde::de::{Error, Visitor};
    struct Probe<'a>(&'a mut Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(self, _: &'static str, fields: &'static [&'static str], _: V) -> Result<V::Value, Self::Error> {
            *self.0 = Some(fields);
            Err(Self::Error::custom("only its field names were asked"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields = None;
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        node_id: u64,
        raft: Option<std::collections::HashMap<String, u64>>,
    }

    #[test]
    fn a_config_structs_field_names_are_read_from_its_deserialize() {
        assert_eq!(field_names::<Shape>(), Some(&["node_id", "raft"][..]));
        assert_eq!(field_names::<std::collections::HashMap<String, String>>(), None);
    }

    #[test]
    fn unknown_holdfast_variables_are_reported_and_left_out_the_rest_passed_on() {
        let vars = [
            ("HOLDFAST_NODE_ID", "2"),
            ("HOLDFAST_RAFT__HEARTBEAT", "100"),
            ("HOLDFAST_PORT", "tcp://10.0.0.1:7000"),
            ("HOLDFAST_SERVICE_HOST", "10.0.0.1"),
            ("HOLDFAST_BIN", "/x"),
            ("HOLDFAST_ENDPOINTS", "127.0.0.1:7000"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let (kept, unknown) = split_environment(vars.clone().into_iter(), Some(&["node_id", "raft"]));
        let mut names: Vec<&str> = kept.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, ["HOLDFAST_NODE_ID", "HOLDFAST_RAFT__HEARTBEAT"]);
        assert_eq!(unknown, ["HOLDFAST_BIN", "HOLDFAST_PORT", "HOLDFAST_SERVICE_HOST"]);
        let (kept, unknown) = split_environment(vars.into_iter(), None);
        assert_eq!(kept.len(), 5, "without a list of keys every HOLDFAST_* variable but the command line's is passed on");
        assert!(unknown.is_empty());
    }

    #[test]
    fn a_stray_holdfast_variable_does_not_stop_a_load_but_an_unknown_key_in_a_file_does() {
        let (vars, _) = split_environment([("HOLDFAST_PORT".to_string(), "tcp://10.0.0.1:7000".to_string())].into_iter(), field_names::<Shape>());
        let env = config::Environment::with_prefix("HOLDFAST").prefix_separator("_").separator("__").try_parsing(true).source(Some(vars));
        let shape: Shape = config::Config::builder().set_default("node_id", 1).unwrap().add_source(env).build().unwrap().try_deserialize().unwrap();
        assert_eq!(shape.node_id, 1);
        let dir = std::env::temp_dir().join(format!("holdfast-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "node_id = 3\nport = 7000\n").unwrap();
        let e = layered::<Shape>(&[], Some(&file), &[]).unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
