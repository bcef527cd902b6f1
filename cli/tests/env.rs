//! A shell that exported the command line's variables (`HOLDFAST_ENDPOINTS`,
//! `HOLDFAST_PLAYGROUND`, ...) — as the runbooks tell an operator to — must start every
//! server exactly as a clean shell does: `--print-config` shows the configuration each
//! role would run with, and it must not change.

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

/// A value of the right shape for each command-line variable, pointing nowhere useful.
fn cli_vars(elsewhere: &Path) -> Vec<(&'static str, String)> {
    holdfast_core::CLI_ONLY_ENV
        .iter()
        .map(|k| {
            let v = match *k {
                "HOLDFAST_PLAYGROUND" => elsewhere.display().to_string(),
                _ => "127.0.0.1:9".to_owned(),
            };
            (*k, v)
        })
        .collect()
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
}
