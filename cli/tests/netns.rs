//! `holdfast dev --netns` end to end (root only; skipped with a printed reason
//! otherwise): every region in its own network namespace, a lock through a gateway at
//! its namespace's address, one region cut off at its bridge port (its gateway stops
//! answering from the root namespace, the others keep serving), healed, a killed node
//! brought back by SIGHUP inside its namespace, and a clean stop that leaves no
//! namespace, bridge or veth behind.

mod common;

use common::{alive, https_client, kill, needs_root, wait_for, Dev, BIN, WAIT};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// `<cmd> <args>`'s stdout; panics if it fails.
fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The network namespace `pid` runs in, by name.
fn netns_of(pid: u32) -> String {
    run("ip", &["netns", "identify", &pid.to_string()]).trim().to_owned()
}

/// Can a TCP connection to `addr` be opened from here (the root namespace) within 2 s?
async fn connects(addr: &str) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

/// A POST retried (a fresh connection each time) until it answers 2xx, up to [`WAIT`].
async fn post(c: &reqwest::Client, url: &str, body: Value) -> Value {
    let end = Instant::now() + WAIT;
    for attempt in 0.. {
        let mut body = body.clone();
        if body.get("request_id").is_some() {
            body["request_id"] = json!(format!("{}-{attempt}", body["request_id"].as_str().unwrap()));
        }
        let last = match c.post(url).json(&body).send().await {
            Ok(r) if r.status().is_success() => return r.json().await.expect("JSON answer"),
            Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        assert!(Instant::now() < end, "POST {url}: {last}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    unreachable!()
}

/// A session and `name` through the gateway at `http`; returns the token.
async fn lock(c: &reqwest::Client, http: &str, name: &str) -> u64 {
    let s = post(c, &format!("https://{http}/v1/sessions"), json!({ "ns": "demo", "ttl_ms": 30_000 })).await;
    let session = s["session"].as_str().expect("session handle");
    let r = post(c, &format!("https://{http}/v1/locks/demo/default/{name}/acquire"), json!({ "session": session, "request_id": name })).await;
    r["token"].as_str().expect("token string").parse().expect("decimal token")
}

fn bridge_port(port: &str, state: &str) {
    run("bridge", &["link", "set", "dev", port, "state", state]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netns_playground_cuts_a_region_off_heals_it_and_leaves_nothing_behind() {
    if !needs_root("netns_playground_cuts_a_region_off_heals_it_and_leaves_nothing_behind", "holdfast dev --netns") {
        return;
    }
    let root_dir = tempfile::tempdir().unwrap();
    let data = root_dir.path().join("dev");
    std::fs::create_dir(&data).unwrap();
    // Ports live inside the namespaces; the base port names the bridge, the namespaces
    // and the subnet, so it is reserved machine-wide like the other tests' ranges.
    let ports = holdfast_testkit::port_block(64);
    let base = ports.base;
    let prefix = format!("hf{base}");

    eprintln!("--- a directory made without --netns refuses it");
    let plain = root_dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("dev.json"), r#"{"version":1,"base_port":7000,"regions":3,"initialized":true}"#).unwrap();
    let out = Command::new(BIN).args(["dev", "--netns", "--data-dir"]).arg(&plain).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("without --netns"), "{err}");

    eprintln!("--- start with --netns (base port {base})");
    let mut dev = Dev::start(&data, &["--netns", "--base-port", &base.to_string()]);
    let v = dev.endpoints(&data);
    let c = https_client(&data, Duration::from_secs(10));
    let n = &v["netns"];
    assert_eq!(n["bridge"], format!("{prefix}br"), "{n}");
    let listed = run("ip", &["netns", "list"]);
    for (r, (name, region)) in v["regions"].as_object().unwrap().iter().enumerate() {
        let net = &n["regions"][name];
        assert_eq!(net["netns"], format!("{prefix}-{name}"), "{n}");
        assert_eq!(net["host_veth"], format!("{prefix}r{r}"), "{n}");
        let ip = net["ip"].as_str().unwrap();
        assert!(listed.contains(net["netns"].as_str().unwrap()), "{listed}");
        assert!(region["gateway"]["http"].as_str().unwrap().starts_with(&format!("{ip}:")), "{region}");
        assert!(region["cells"][0]["nodes"][0]["raft"].as_str().unwrap().starts_with(&format!("{ip}:")), "{region}");
        // `ip netns exec` execs: the pid in endpoints.json is the node itself, in its namespace.
        for pid in [&region["gateway"]["pid"], &region["registry"]["pid"], &region["cells"][0]["nodes"][2]["pid"]] {
            assert_eq!(netns_of(pid.as_u64().unwrap() as u32), net["netns"].as_str().unwrap(), "{region}");
        }
        assert!(v["registry_endpoints"].as_str().unwrap().contains(&format!("{ip}:")), "{v}");
    }
    let http = |region: &str| v["regions"][region]["gateway"]["http"].as_str().unwrap().to_owned();

    eprintln!("--- a lock through the east gateway at its namespace's address");
    let t1 = lock(&c, &http("east"), "job-1").await;

    eprintln!("--- cut south off: its gateway stops answering, east and west keep serving");
    let south_port = n["regions"]["south"]["host_veth"].as_str().unwrap().to_owned();
    bridge_port(&south_port, "0");
    let end = Instant::now() + WAIT;
    let last = loop {
        match connects(&http("south")).await {
            Ok(()) => assert!(Instant::now() < end, "the south gateway still answers {WAIT:?} after the cut"),
            Err(e) => break e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Dropped, not refused: nothing answers at all.
    assert_eq!(last, "timed out");
    let t2 = lock(&c, &http("west"), "job-2").await;
    assert!(t2 > t1, "{t2} after {t1}");
    let d = c.get(format!("https://{}/v1/locks/demo/default/job-1", http("east"))).send().await.unwrap();
    assert!(d.status().is_success(), "{}", d.status());

    eprintln!("--- heal: the south gateway answers again");
    bridge_port(&south_port, "3");
    let readyz = format!("https://{}/readyz", http("south"));
    let end = Instant::now() + WAIT;
    while !c.get(&readyz).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < end, "{readyz} not ready after the heal");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let t3 = lock(&c, &http("south"), "job-3").await;
    assert!(t3 > t2, "{t3} after {t2}");

    eprintln!("--- kill -9 a south cell node, SIGHUP: it comes back in south's namespace");
    let node = |v: &Value| v["regions"]["south"]["cells"][0]["nodes"][1]["pid"].as_u64().unwrap() as u32;
    let old = node(&v);
    kill("KILL", old);
    wait_for(WAIT, "the killed node to die", || !alive(old));
    kill("HUP", dev.pid());
    let mut now = Value::Null;
    wait_for(WAIT, "endpoints.json to name a new live pid for south-1-n2", || {
        now = serde_json::from_str(&std::fs::read_to_string(data.join("endpoints.json")).unwrap_or_default()).unwrap_or(Value::Null);
        now["regions"].is_object() && node(&now) != old && alive(node(&now))
    });
    dev.pids.push(node(&now));
    assert_eq!(netns_of(node(&now)), n["regions"]["south"]["netns"].as_str().unwrap());
    assert_eq!(now["netns"], v["netns"]);

    eprintln!("--- SIGTERM: a clean exit; no process, namespace, bridge or veth left");
    let pids = dev.pids.clone();
    let status = dev.stop();
    assert!(status.success(), "holdfast dev exited with {status}");
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still running: {left:?}");
    let namespaces = run("ip", &["netns", "list"]);
    assert!(!namespaces.contains(&prefix), "namespaces left behind: {namespaces}");
    let links = run("ip", &["-o", "link"]);
    assert!(!links.contains(&prefix), "links left behind: {links}");
    assert!(!data.join("endpoints.json").exists());

    eprintln!("--- a second start on the same directory: --netns comes from dev.json");
    let mut dev = Dev::start(&data, &[]);
    let v2 = dev.endpoints(&data);
    assert_eq!(v2["netns"], v["netns"]);
    let t4 = lock(&c, &http("west"), "job-4").await;
    assert!(t4 > t3, "{t4} after {t3}");
    assert!(dev.stop().success());
    assert!(!run("ip", &["-o", "link"]).contains(&prefix), "links left behind after the second stop");
}
