//! `holdfast dev` end to end, as a user meets it: start the playground as a process,
//! take a lock through a gateway's HTTP API, stop it with SIGTERM (clean exit, no
//! process left), start it again on the same data directory, and find the namespace,
//! the shard's owner and the token floor where they were. In between, a node killed
//! with SIGKILL comes back on SIGHUP to the supervisor. At the end the supervisor
//! itself is SIGKILLed, and every node ends with it (none keeps its ports).

mod common;

use common::{acquire, alive, all_pids, call, holdfast_at, http, https_client, kill, ready, session, wait_for, Dev, WAIT};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Short enough to lapse soon after the restart.
const FIRST_TTL_MS: u64 = 4_000;

/// Runs `holdfast ARGS -o json --endpoint GRPC` against the playground in `data` and
/// parses its answer.
fn cli_json(data: &Path, grpc: &str, args: &[&str]) -> Value {
    let out = holdfast_at(data).args(args).args(["-o", "json", "--endpoint", grpc]).output().expect("run holdfast");
    assert!(out.status.success(), "holdfast {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("holdfast {args:?} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_playground_survives_a_restart_with_its_locks_and_ownership() {
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("dev");
    std::fs::create_dir(&data).unwrap();
    // 60 ports, reserved machine-wide: other test binaries run beside this one.
    let ports = holdfast_testkit::port_block(64);
    let base = ports.base;

    eprintln!("--- first start on {} (ports from {base})", data.display());
    let mut dev = Dev::start(&data, &["--base-port", &base.to_string()]);
    let v = dev.endpoints(&data);
    // Every port speaks mutual TLS: the playground made a CA and root's certificate.
    let c = https_client(&data, Duration::from_secs(30));
    assert_eq!(v["regions"].as_object().unwrap().len(), 3, "{v}");
    assert_eq!(dev.pids.len(), 15, "one process per node: {v}");
    ready(&c, &v).await;
    let east = http(&v, "east");
    let west = http(&v, "west");

    eprintln!("--- a lock through the east gateway; the owner through the west one");
    let s1 = session(&c, &east, FIRST_TTL_MS).await;
    let t1 = acquire(&c, &east, "job-1", &s1, 0).await;
    let owner = call(&c, reqwest::Method::GET, &format!("{west}/v1/shards/demo/default/owner"), None).await;
    assert_eq!((owner["cell"].as_str(), owner["region"].as_str()), (Some("east-1"), Some("east")), "{owner}");
    let epoch = owner["epoch"].as_u64().unwrap();

    eprintln!("--- the CLI against a gateway, JSON parsed");
    let grpc = v["regions"]["west"]["gateway"]["grpc"].as_str().expect("gateway grpc address").to_owned();
    let namespaces = cli_json(&data, &grpc, &["ns", "list"]);
    assert!(namespaces.as_array().unwrap().iter().any(|n| n["name"] == "demo"), "{namespaces}");
    let o = cli_json(&data, &grpc, &["shard", "owner", "demo", "default"]);
    assert_eq!((o["cell"].as_str(), o["epoch"].as_u64()), (Some("east-1"), Some(epoch)), "{o}");
    let d = cli_json(&data, &grpc, &["lock", "describe", "--ns", "demo", "job-1"]);
    assert_eq!(d["holders"][0]["token"].as_str(), Some(t1.to_string().as_str()), "{d}");
    let nodes = cli_json(&data, &grpc, &["cluster", "status"]);
    assert_eq!(nodes.as_array().unwrap().len(), 9, "three cells of three nodes: {nodes}");
    assert!(nodes.as_array().unwrap().iter().all(|n| n["health"] == "ok" && n["group"] == "cell"), "{nodes}");
    let voter = v["regions"]["west"]["registry"]["raft"].as_str().unwrap();
    let all = cli_json(&data, &grpc, &["cluster", "status", "--registry-raft", voter]);
    let voters: Vec<&Value> = all.as_array().unwrap().iter().filter(|n| n["group"] == "registry").collect();
    assert_eq!((voters.len(), all.as_array().unwrap().len()), (3, 12), "three registry voters found from one: {all}");
    assert!(voters.iter().all(|n| n["health"] == "ok" && n["term"].as_u64().is_some()), "{all}");
    assert_eq!(voters.iter().filter(|n| n["state"] == "leader").count(), 1, "one registry leader: {all}");
    assert!(voters.iter().all(|n| n["leader"] == voters[0]["leader"]), "the voters agree on the leader: {all}");
    let regions = cli_json(&data, &grpc, &["region", "list"]);
    assert_eq!(regions.as_array().unwrap().len(), 3, "{regions}");
    eprintln!("--- wrong arguments: a one-line error and a non-zero exit");
    let bad = holdfast_at(&data).args(["lock", "acquire", "--ns", "nope", "x", "--endpoint", &grpc]).output().unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.trim().lines().count() == 1 && err.contains("UNKNOWN_NAMESPACE"), "{err}");

    eprintln!("--- kill -9 a cell node, SIGHUP the supervisor: it comes back, nothing else restarts");
    let node = |v: &Value| v["regions"]["west"]["cells"][0]["nodes"][1].clone();
    let old = node(&v)["pid"].as_u64().unwrap() as u32;
    kill("KILL", old);
    wait_for(WAIT, "the killed node to die", || !alive(old));
    kill("HUP", dev.pid());
    let mut v3 = Value::Null;
    wait_for(WAIT, "endpoints.json to name a new, live pid for west-1-n2", || {
        v3 = dev.reload(&data);
        node(&v3)["pid"].as_u64().is_some_and(|p| p as u32 != old && alive(p as u32))
    });
    let others = |v: &Value| all_pids(v).into_iter().filter(|p| *p != node(v)["pid"].as_u64().unwrap() as u32).collect::<Vec<_>>();
    assert_eq!(others(&v3), others(&v), "only the killed node restarted");
    let end = Instant::now() + WAIT;
    loop {
        // The supervisor waits for its RaftAdmin before rewriting endpoints.json; here
        // it also rejoins its cell.
        let nodes = cli_json(&data, &grpc, &["cluster", "status"]);
        let n2 = nodes.as_array().unwrap().iter().find(|n| n["cell"] == "west-1" && n["node"] == 2).cloned().unwrap();
        if n2["health"] == "ok" && n2["leader"].as_u64().is_some() {
            break;
        }
        assert!(Instant::now() < end, "west-1 node 2 did not rejoin its cell: {n2}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s3 = session(&c, &west, 30_000).await;
    acquire(&c, &west, "job-after-hup", &s3, 0).await;

    eprintln!("--- SIGTERM: a clean exit, and no process left");
    let first_pids = dev.pids.clone();
    let status = dev.stop();
    assert!(status.success(), "holdfast dev exited with {status}");
    let left: Vec<u32> = first_pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still running after holdfast dev exited: {left:?}");
    assert!(!data.join("endpoints.json").exists(), "endpoints.json must not outlive the processes it names");

    eprintln!("--- second start on the same data directory (its ports come from dev.json)");
    let mut dev = Dev::start(&data, &[]);
    let v2 = dev.endpoints(&data);
    assert_eq!(v2["regions"]["east"]["gateway"]["http"], v["regions"]["east"]["gateway"]["http"]);
    ready(&c, &v2).await;

    eprintln!("--- the namespace, the owner and the token floor are where they were");
    let ns = call(&c, reqwest::Method::GET, &format!("{east}/v1/namespaces/demo"), None).await;
    assert_eq!(ns["name"], "demo", "{ns}");
    let owner2 = call(&c, reqwest::Method::GET, &format!("{west}/v1/shards/demo/default/owner"), None).await;
    assert_eq!(owner2["cell"], "east-1", "{owner2}");
    assert!(owner2["epoch"].as_u64().unwrap() >= epoch, "epoch went back: {owner} then {owner2}");
    let d = call(&c, reqwest::Method::GET, &format!("{east}/v1/locks/demo/default/job-1"), None).await;
    let floor: u64 = d["token_floor"].as_str().expect("token_floor string").parse().unwrap();
    assert!(floor >= t1, "token floor {floor} below the token {t1} granted before the restart: {d}");

    eprintln!("--- new grants after the restart carry larger tokens");
    let s2 = session(&c, &west, 30_000).await;
    let t2 = acquire(&c, &west, "job-2", &s2, 0).await;
    assert!(t2 > t1, "token {t2} after the restart not above {t1}");
    // job-1's first holder lapses FIRST_TTL_MS after the restart at the latest.
    let t3 = acquire(&c, &west, "job-1", &s2, 5_000).await;
    assert!(t3 > t2 && t3 > floor, "job-1 again: {t3} (floor {floor}, job-2 {t2})");

    eprintln!("--- SIGKILL to the supervisor: every node it started ends with it");
    let pids = dev.pids.clone();
    kill("KILL", dev.pid());
    wait_for(WAIT, "every node to end with the killed supervisor", || pids.iter().all(|p| !alive(*p)));
}
