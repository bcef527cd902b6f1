//! A deployment made the way docs/deploy.md makes one, on one host, with no playground
//! anywhere: Terraform renders every process's configuration from the three-region
//! example's inputs (`terraform/modules/topology`, single-host ports), `holdfast cert`
//! makes the certificates those configurations name, each process runs
//! `holdfast <role> run --config <its file>`, and the rendered bootstrap script forms
//! the registry and the cells. Then an operator works with `--endpoints` only: a
//! namespace with a shard placed on every cell, a lock taken, region east evacuated
//! (verified, checker clean), and the lock's next token above the last.
//!
//! Needs Terraform (`TERRAFORM_BIN`, which scripts/env.sh sets, or `terraform` on the
//! PATH). Without it the test is skipped with a reason — unless
//! `CI_REQUIRE_TERRAFORM=1` (CI sets it), where it fails.

mod common;

use common::{wait_for, BIN};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const EXAMPLE: &str = "terraform/examples/three-regions/topology.tfvars.json";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root").to_owned()
}

/// The Terraform binary, or `None` (skip) when there is none and CI does not require it.
fn terraform() -> Option<PathBuf> {
    let candidates = std::env::var_os("TERRAFORM_BIN").map(PathBuf::from).into_iter().chain(std::iter::once(PathBuf::from("terraform")));
    for c in candidates {
        if Command::new(&c).arg("version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
            return Some(c);
        }
    }
    assert!(std::env::var("CI_REQUIRE_TERRAFORM").as_deref() != Ok("1"), "no terraform (TERRAFORM_BIN) and CI_REQUIRE_TERRAFORM=1: run scripts/setup.sh");
    eprintln!("SKIPPED: no terraform (scripts/setup.sh installs it; scripts/env.sh sets TERRAFORM_BIN)");
    None
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `holdfast` as an operator runs it: a clean `HOLDFAST_*` environment but the
/// deployment's endpoints and the operator's certificate.
struct Operator {
    endpoints: String,
    certs: PathBuf,
}

impl Operator {
    fn cmd(&self) -> Command {
        self.program(BIN)
    }

    /// `program` (holdfast, or a shell running a script of holdfast commands) in the
    /// operator's environment.
    fn program(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HOLDFAST_")) {
            c.env_remove(k);
        }
        c.env("HOLDFAST_ENDPOINTS", &self.endpoints).env("HOLDFAST_CERTS_DIR", &self.certs).env("RUST_LOG", "error").stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run holdfast")
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = ok(self.run(args), &format!("holdfast {}", args.join(" ")));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("holdfast {}: not JSON ({e}): {out}", args.join(" ")))
    }
}

/// Every process of the deployment; killed when dropped.
struct Processes(Vec<(String, Child)>);

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Processes {
    fn assert_running(&mut self, logs: &Path) {
        for (name, c) in &mut self.0 {
            if let Ok(Some(status)) = c.try_wait() {
                let log = std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap_or_default();
                panic!("{name} exited ({status}); its log:\n{log}");
            }
        }
    }
}

#[test]
fn a_deployment_rendered_by_terraform_runs_and_evacuates_a_region_through_endpoints_alone() {
    let Some(tf) = terraform() else { return };
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    // 300 ports, reserved machine-wide: other test binaries run beside this one.
    let ports = holdfast_testkit::port_block(300);
    let base = ports.base;

    // --- Terraform renders the deployment: the example's regions and cells, on one host.
    let root = dir.join("tf");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("main.tf"),
        format!(
            r#"
locals {{
  example = jsondecode(file("{example}"))
}}
module "t" {{
  source            = "{module}"
  deployment        = local.example.deployment
  regions           = local.example.regions
  nodes_per_cell    = local.example.nodes_per_cell
  single_host       = true
  listen_host       = "127.0.0.1"
  base_port         = {base}
  data_root         = "{data}"
  certs_root        = "{certs}"
  per_process_certs = true
  # 18 processes on 2 cores: the test timings of docs/development.md.
  raft = {{
    cell_heartbeat_ms        = 100
    cell_election_min_ms     = 1000
    cell_election_max_ms     = 2000
    registry_heartbeat_ms    = 100
    registry_election_min_ms = 1000
    registry_election_max_ms = 2000
    ownership_lease_ms       = 6000
  }}
}}
output "processes" {{ value = module.t.processes }}
output "bootstrap" {{ value = module.t.bootstrap }}
output "endpoints" {{ value = module.t.endpoints }}
output "cells" {{ value = module.t.cells }}
"#,
            example = repo().join(EXAMPLE).display(),
            module = repo().join("terraform/modules/topology").display(),
            data = dir.join("data").display(),
            certs = dir.join("certs").display(),
        ),
    )
    .unwrap();
    let tf_cmd = |args: &[&str]| {
        let mut c = Command::new(&tf);
        c.arg(format!("-chdir={}", root.display()))
            .args(args)
            .env("TF_DATA_DIR", dir.join("tf-data"))
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1");
        ok(c.output().expect("run terraform"), &format!("terraform {}", args.join(" ")))
    };
    tf_cmd(&["init", "-backend=false", "-no-color"]);
    tf_cmd(&["apply", "-auto-approve", "-no-color", "-input=false"]);
    let output = |name: &str| -> Value { serde_json::from_str(&tf_cmd(&["output", "-no-color", "-json", name])).expect("terraform output") };
    let processes: BTreeMap<String, Value> = serde_json::from_value(output("processes")).unwrap();
    let endpoints = output("endpoints").as_str().unwrap().to_owned();
    let bootstrap = output("bootstrap").as_str().unwrap().to_owned();
    let cells: BTreeMap<String, Value> = serde_json::from_value(output("cells")).unwrap();
    assert_eq!(processes.len(), 4 * 3 + 3 + 3, "4 cells of 3 nodes, 3 registry voters, 3 gateways");
    assert_eq!(cells.keys().map(String::as_str).collect::<Vec<_>>(), ["east-1", "east-2", "south-1", "west-1"]);

    // --- Certificates: one CA, a node certificate per process naming the hosts the
    // topology says it is reached at, and the operator's.
    let ca = dir.join("ca");
    let ca_key = ca.join("ca.key");
    let cert = |args: &[&str]| ok(Command::new(BIN).arg("cert").args(args).output().unwrap(), &format!("cert {args:?}"));
    cert(&["create-ca", "--certs-dir", ca.to_str().unwrap(), "--ca-key", ca_key.to_str().unwrap()]);
    for (name, p) in &processes {
        let mut args = vec!["create-node", "--certs-dir", p["certs_dir"].as_str().unwrap(), "--ca-key", ca_key.to_str().unwrap(), "--name", name];
        for h in p["cert_hosts"].as_array().unwrap() {
            args.extend(["--host", h.as_str().unwrap()]);
        }
        cert(&args);
    }
    let operator_certs = dir.join("operator");
    cert(&["create-client", "--certs-dir", operator_certs.to_str().unwrap(), "--ca-key", ca_key.to_str().unwrap(), "--user", "root"]);

    // --- Every process from its rendered config, nothing else on its command line.
    let conf = dir.join("conf");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    let mut procs = Processes(Vec::new());
    for (name, p) in &processes {
        let file = conf.join(format!("{name}.toml"));
        std::fs::write(&file, p["config"].as_str().unwrap()).unwrap();
        let mut c = Command::new(BIN);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HOLDFAST_")) {
            c.env_remove(k);
        }
        let log = std::fs::File::create(logs.join(format!("{name}.log"))).unwrap();
        c.args([p["role"].as_str().unwrap(), "run", "--config", file.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        procs.0.push((name.clone(), c.spawn().expect("start a process")));
    }
    // Raft nodes answer on their Raft port once they run (the bootstrap talks to them).
    for p in processes.values().filter(|p| p["role"] != "gateway") {
        let addr = p["raft_addr"].as_str().unwrap().to_owned();
        wait_for(Duration::from_secs(60), &format!("{addr} to listen"), || {
            procs.assert_running(&logs);
            std::net::TcpStream::connect(&addr).is_ok()
        });
    }

    // --- The rendered bootstrap forms it, and may be run again.
    let script = dir.join("bootstrap.sh");
    std::fs::write(&script, &bootstrap).unwrap();
    let op = Operator { endpoints: endpoints.clone(), certs: operator_certs.clone() };
    for round in ["first", "again"] {
        let out = op.program("sh").arg(&script).args(["--user", "root"]).env("HOLDFAST", BIN).output().unwrap();
        let text = ok(out, &format!("bootstrap ({round} run)"));
        if round == "again" {
            assert!(text.contains("already formed"), "a second bootstrap run re-formed a group:\n{text}");
        }
    }

    // --- Gateways serve once they have the registry's placement.
    wait_for(Duration::from_secs(60), "every gateway to list three regions", || {
        procs.assert_running(&logs);
        endpoints.split(',').all(|gw| {
            let out = op.cmd().args(["region", "list", "-o", "json", "--endpoints", gw]).output().unwrap();
            out.status.success() && serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|v| v.as_array().is_some_and(|a| a.len() == 3))
        })
    });

    // --- A namespace, a shard on every cell, a lock.
    op.json(&["ns", "create", "orders", "--owner", "team-orders", "--lock-delay-ms", "0", "-o", "json"]);
    for (i, cell) in cells.keys().enumerate() {
        let shard = if i == 0 { "default".to_owned() } else { format!("s{i}") };
        let owner = op.json(&["shard", "place", "orders", &shard, "--cell", cell, "-o", "json"]);
        assert_eq!(owner["cell"], cell.as_str(), "{owner}");
    }
    // Placing again where it lives is accepted; elsewhere is refused with the way out.
    op.json(&["shard", "place", "orders", "default", "--cell", "east-1", "-o", "json"]);
    let elsewhere = op.run(&["shard", "place", "orders", "default", "--cell", "west-1"]);
    assert!(!elsewhere.status.success() && String::from_utf8_lossy(&elsewhere.stderr).contains("shard move"), "{elsewhere:?}");

    let acquire = |ttl: &str| {
        let mut v = Value::Null;
        // A shard's first grants wait for its adoption to be recorded: retried.
        wait_for(Duration::from_secs(30), "a lock on orders/default", || {
            let out = op.run(&["lock", "acquire", "--ns", "orders", "job", "--ttl-ms", ttl, "-o", "json"]);
            out.status.success() && {
                v = serde_json::from_slice(&out.stdout).unwrap();
                true
            }
        });
        v
    };
    let first = acquire("3000");
    let first_token: u64 = first["token"].as_str().unwrap().parse().unwrap();
    assert_eq!(first["epoch"], 1, "{first}");

    // --- Evacuate east through the gateways alone, then check where everything is.
    let state = dir.join("evacuate-east");
    // orders names west as its fallback region: east's shards go there (south would
    // tie on load, and comes first by name).
    let out = op.run(&[
        "drill",
        "evacuate",
        "--region",
        "east",
        "--max-wave",
        "1",
        "--fallback",
        "orders=west",
        "--state-dir",
        state.to_str().unwrap(),
        "--timeout-s",
        "180",
    ]);
    let text = ok(out, "drill evacuate --region east");
    assert!(text.contains("phase"), "{text}");
    let shards = op.json(&["shard", "list", "--ns", "orders", "-o", "json"]);
    let shards = shards.as_array().unwrap();
    assert_eq!(shards.len(), 4, "{shards:?}");
    for s in shards {
        assert_ne!(s["region"], "east", "a shard still lives in east after its evacuation: {s}");
    }
    let moved: Vec<&Value> = shards.iter().filter(|s| s["shard"] == "default" || s["shard"] == "s1").collect();
    assert!(moved.iter().all(|s| s["epoch"] == 2), "east's shards moved once, each to epoch 2: {moved:?}");
    assert!(moved.iter().all(|s| s["region"] == "west"), "orders' fallback region is west: {moved:?}");
    let regions = op.json(&["region", "list", "-o", "json"]);
    assert!(regions.as_array().unwrap().iter().any(|r| r["region"] == "east" && r["state"] == "evacuated"), "{regions}");

    // --- An emptied cell can be retired; one that owns shards cannot.
    let retired = op.json(&["cell", "retire", "--cell", "east-2", "-o", "json"]);
    assert_eq!(retired["retired"], true, "{retired}");
    let busy = op.run(&["cell", "retire", "--cell", "west-1"]);
    assert!(!busy.status.success() && String::from_utf8_lossy(&busy.stderr).contains("still owns"), "{busy:?}");

    // --- ns update changes what it is told and nothing else; nothing to change is an error.
    let before = op.json(&["ns", "get", "orders", "-o", "json"]);
    let after = op.json(&["ns", "update", "orders", "--max-sessions", "123", "-o", "json"]);
    assert_eq!(after["quotas"]["max_sessions"], 123, "{after}");
    assert_eq!(after["version"], before["version"].as_u64().unwrap() + 1, "{after}");
    assert_eq!((&after["lock_delay_ms"], &after["ttl_max_ms"]), (&before["lock_delay_ms"], &before["ttl_max_ms"]), "{before} -> {after}");
    assert!(!op.run(&["ns", "update", "orders"]).status.success(), "an update of nothing succeeded");

    // --- Automatic failover: off by default, turned on with a fallback, shown, off again.
    let shown = op.json(&["ns", "auto-failover", "orders", "-o", "json"]);
    assert_eq!((&shown["enabled"], &shown["fallback_region"]), (&Value::Bool(false), &Value::Null), "{shown}");
    let on = op.json(&["ns", "auto-failover", "orders", "--on", "--fallback", "west", "-o", "json"]);
    assert_eq!((&on["enabled"], on["fallback_region"].as_str()), (&Value::Bool(true), Some("west")), "{on}");
    assert_eq!(op.json(&["ns", "auto-failover", "orders", "-o", "json"]), on);
    let bad = op.run(&["ns", "auto-failover", "orders", "--on", "--fallback", "mars"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("mars"), "{bad:?}");
    let off = op.json(&["ns", "auto-failover", "orders", "--off", "-o", "json"]);
    assert_eq!(off["enabled"], false, "{off}");

    // --- The lock's next holder, in its new home, gets a larger token.
    let second = acquire("3000");
    let second_token: u64 = second["token"].as_str().unwrap().parse().unwrap();
    assert!(second_token > first_token, "token went from {first_token} to {second_token} across the evacuation");
    assert_eq!(second["epoch"], 2, "{second}");
    procs.assert_running(&logs);
}
