//! A shell that exported the command line's variables (`HOLDFAST_ENDPOINTS`,
//! `HOLDFAST_PLAYGROUND`, ...) — as the runbooks tell an operator to — must start every
//! server exactly as a clean shell does: `--print-config` shows the configuration each
//! role would run with, and it must not change. So must any other `HOLDFAST_*`
//! variable a server does not know: a neighbour's (`HOLDFAST_BIN`), or the ones
//! Kubernetes gives every pod for a Service named `holdfast` in its namespace.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_holdfast");

/// `holdfast ARGS` with a clean environment plus `vars`; its stdout (or the failure).
fn run(args: &[&str], vars: &[(&str, &str)]) -> Result<String, String> {
    let mut c = Command::new(BIN);
    c.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().expect("run holdfast");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// What Kubernetes puts in every pod's environment for a Service named `holdfast` in its
/// namespace (service links, on by default).
const SERVICE_LINKS: &[(&str, &str)] = &[
    ("HOLDFAST_SERVICE_HOST", "10.96.0.12"),
    ("HOLDFAST_SERVICE_PORT", "7000"),
    ("HOLDFAST_PORT", "tcp://10.96.0.12:7000"),
    ("HOLDFAST_PORT_7000_TCP", "tcp://10.96.0.12:7000"),
    ("HOLDFAST_PORT_7000_TCP_PROTO", "tcp"),
    ("HOLDFAST_PORT_7000_TCP_PORT", "7000"),
    ("HOLDFAST_PORT_7000_TCP_ADDR", "10.96.0.12"),
];

/// A value of the right shape for each command-line variable, pointing nowhere useful;
/// the service links; a stray variable of the same prefix.
fn cli_vars(elsewhere: &Path) -> Vec<(&'static str, String)> {
    let mut vars: Vec<(&'static str, String)> = holdfast_core::CLI_ONLY_ENV
        .iter()
        .map(|k| {
            let v = match *k {
                "HOLDFAST_PLAYGROUND" => elsewhere.display().to_string(),
                _ => "127.0.0.1:9".to_owned(),
            };
            (*k, v)
        })
        .collect();
    vars.extend(SERVICE_LINKS.iter().map(|(k, v)| (*k, v.to_string())));
    vars.push(("HOLDFAST_BIN", "/x".to_owned()));
    vars
}

fn same_with_and_without(args: &[&str], elsewhere: &Path) -> String {
    let clean = run(args, &[]).unwrap_or_else(|e| panic!("holdfast {args:?} in a clean environment: {e}"));
    let vars = cli_vars(elsewhere);
    let exported: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let with = run(args, &exported).unwrap_or_else(|e| panic!("holdfast {args:?} with {exported:?}: {e}"));
    assert_eq!(clean, with, "holdfast {args:?} changes with the command line's variables exported");
    clean
}

#[test]
fn servers_ignore_the_command_lines_variables() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("not-the-data-dir");

    let cell = dir.path().join("cell.toml");
    std::fs::write(
        &cell,
        format!("node_id = 1\ndata_dir = \"{}\"\nregistry_endpoints = \"127.0.0.1:7200\"\n[tls]\ninsecure = true\n", dir.path().join("cell-1").display()),
    )
    .unwrap();
    let printed = same_with_and_without(&["cell", "run", "--config", cell.to_str().unwrap(), "--print-config"], &elsewhere);
    let v: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(v["data_dir"], dir.path().join("cell-1").display().to_string(), "the file's data_dir stands");

    let gateway = dir.path().join("gateway.toml");
    std::fs::write(&gateway, "region = \"east\"\nregistry_endpoints = \"registry-1.east.example:7200,127.0.0.1:7210\"\n[tls]\ninsecure = true\n").unwrap();
    let printed = same_with_and_without(&["gateway", "run", "--config", gateway.to_str().unwrap(), "--print-config"], &elsewhere);
    let v: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(v["region"], "east");

    let registry = dir.path().join("registry.toml");
    std::fs::write(&registry, format!("node_id = 2\ndata_dir = \"{}\"\n[tls]\ninsecure = true\n", dir.path().join("registry-2").display())).unwrap();
    same_with_and_without(&["registry", "run", "--config", registry.to_str().unwrap(), "--print-config"], &elsewhere);

    // A server setting in the environment still counts: only the CLI's own are skipped.
    let tuned = run(&["gateway", "run", "--config", gateway.to_str().unwrap(), "--print-config"], &[("HOLDFAST_SHUTDOWN_DEADLINE_MS", "1234")]).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&tuned).unwrap()["shutdown_deadline_ms"], 1234);
    assert!(!elsewhere.exists(), "nothing was created where the CLI's variable pointed");

    // The stray ones are named in a warning (the command line's own are not).
    let out = Command::new(BIN)
        .args(["registry", "run", "--config", registry.to_str().unwrap(), "--print-config"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(SERVICE_LINKS.iter().copied())
        .env("HOLDFAST_ENDPOINTS", "127.0.0.1:9")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HOLDFAST_PORT_7000_TCP_ADDR") && stderr.contains("HOLDFAST_SERVICE_HOST"), "{stderr}");
    assert!(!stderr.contains("HOLDFAST_ENDPOINTS"), "{stderr}");
}
