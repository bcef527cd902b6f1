//! The harness the CLI's process tests share: a `holdfast dev` started as a process,
//! condition waits with deadlines, and the few OS calls the tests make.
#![allow(dead_code)] // each test binary uses part of it

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod proc_cell;

pub const BIN: &str = env!("CARGO_BIN_EXE_holdfast");
pub const START: Duration = Duration::from_secs(120);
pub const STOP: Duration = Duration::from_secs(40);
pub const WAIT: Duration = Duration::from_secs(60);

/// A running `holdfast dev`. Dropping it stops the supervisor and, should it have been
/// killed before stopping them, every child it reported.
pub struct Dev {
    child: Option<Child>,
    pub pids: Vec<u32>,
}

impl Dev {
    /// `holdfast dev --data-dir <data> <args>`; output to `<data>.out-<n>`.
    pub fn start(data: &Path, args: &[&str]) -> Dev {
        let _ = std::fs::remove_file(data.join("endpoints.json"));
        let n = std::fs::read_dir(data).map(|d| d.count()).unwrap_or(0);
        let out = std::fs::File::create(data.with_extension(format!("out-{n}"))).unwrap();
        let child = Command::new(BIN)
            .arg("dev")
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env("RUST_LOG", "warn,holdfast::dev=info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("start holdfast dev");
        Dev { child: Some(child), pids: Vec::new() }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// endpoints.json as it is now (it exists while the playground is up).
    pub fn reload(&mut self, data: &Path) -> Value {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(data.join("endpoints.json")).expect("endpoints.json")).expect("endpoints.json parses");
        for p in all_pids(&v) {
            if !self.pids.contains(&p) {
                self.pids.push(p);
            }
        }
        v
    }

    /// Waits for endpoints.json, which `holdfast dev` writes once everything is ready.
    pub fn endpoints(&mut self, data: &Path) -> Value {
        let end = Instant::now() + START;
        loop {
            if data.join("endpoints.json").exists() {
                return self.reload(data);
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("holdfast dev exited ({status}) before it was ready; see {}.out-*", data.display());
            }
            assert!(Instant::now() < end, "no endpoints.json after {START:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM, then the exit status within [`STOP`].
    pub fn stop(&mut self) -> std::process::ExitStatus {
        kill("TERM", self.pid());
        let end = Instant::now() + STOP;
        loop {
            if let Some(s) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return s;
            }
            assert!(Instant::now() < end, "holdfast dev did not exit within {STOP:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill("TERM", c.id());
            let end = Instant::now() + STOP;
            while c.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in &self.pids {
            if alive(*p) {
                kill("KILL", *p);
            }
        }
    }
}

/// Runs `holdfast <args>` to completion.
pub fn holdfast(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("RUST_LOG", "error").stdin(Stdio::null()).output().expect("run holdfast")
}

/// Polls `cond` every 100 ms until it holds, failing after `within`.
pub fn wait_for(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).stderr(Stdio::null()).status();
}

/// Is `pid` a live process (neither a zombie nor dead)?
pub fn alive(pid: u32) -> bool {
    // "pid (comm) S ...": the state follows the last ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))))
}

pub fn all_pids(v: &Value) -> Vec<u32> {
    let mut pids = Vec::new();
    for r in v["regions"].as_object().expect("regions").values() {
        pids.push(&r["gateway"]["pid"]);
        pids.push(&r["registry"]["pid"]);
        for c in r["cells"].as_array().unwrap() {
            pids.extend(c["nodes"].as_array().unwrap().iter().map(|n| &n["pid"]));
        }
    }
    pids.into_iter().filter_map(|p| p.as_u64()).map(|p| p as u32).collect()
}

/// Running as root (network namespaces and tmpfs mounts need it)?
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1)).map(|id| id == "0"))
        .unwrap_or(false)
}

/// May test `name`, which needs root for `why`, run here? Not as root it is skipped
/// with a printed reason — unless `CI_REQUIRE_ROOT=1` (CI sets it), where a
/// skip would hide a test that never ran: then it fails.
pub fn needs_root(name: &str, why: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(std::env::var("CI_REQUIRE_ROOT").as_deref() != Ok("1"), "{name} needs root ({why}) and CI_REQUIRE_ROOT=1: run the suite as root");
    eprintln!("SKIPPED {name}: not root ({why})");
    false
}

/// An HTTPS client presenting root's certificate of the playground in `data` (the
/// gateways' HTTP ports speak TLS).
pub fn https_client(data: &Path, timeout: Duration) -> reqwest::Client {
    let certs = data.join("certs");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(certs.join("ca.crt")).expect("the playground's CA")).unwrap();
    let mut pem = std::fs::read(certs.join("client.root.crt")).expect("root's certificate");
    pem.extend(std::fs::read(certs.join("client.root.key")).expect("root's key"));
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .timeout(timeout)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// `holdfast ARGS` as a command run against the playground in `data` (it finds root's
/// certificate there).
pub fn holdfast_at(data: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("HOLDFAST_PLAYGROUND", data);
    c
}

// ---- the gateway's HTTP API, as the process tests call it

pub fn http(v: &Value, region: &str) -> String {
    format!("https://{}", v["regions"][region]["gateway"]["http"].as_str().expect("gateway http address"))
}

/// A call retried while the playground settles (a shard being adopted, a leader
/// starting: 5xx, or 409/404 while placement propagates), up to [`WAIT`].
pub async fn call(c: &reqwest::Client, method: reqwest::Method, url: &str, body: Option<Value>) -> Value {
    let end = Instant::now() + WAIT;
    loop {
        let mut req = c.request(method.clone(), url);
        if let Some(b) = &body {
            req = req.json(b);
        }
        let last = match req.send().await {
            Ok(r) if r.status().is_success() => return r.json().await.expect("JSON answer"),
            Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        assert!(Instant::now() < end, "{method} {url}: {last}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub async fn ready(c: &reqwest::Client, v: &Value) {
    for region in v["regions"].as_object().unwrap().keys() {
        let url = format!("{}/readyz", http(v, region));
        let end = Instant::now() + WAIT;
        while !c.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < end, "{url} not ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

pub fn token(v: &Value) -> u64 {
    v["token"].as_str().expect("token is a JSON string").parse().expect("token is decimal")
}

pub async fn session(c: &reqwest::Client, gw: &str, ttl_ms: u64) -> String {
    let s = call(c, reqwest::Method::POST, &format!("{gw}/v1/sessions"), Some(json!({ "ns": "demo", "ttl_ms": ttl_ms }))).await;
    s["session"].as_str().expect("session handle").to_owned()
}

/// Acquires `name`, retrying (each attempt with its own request id: a retry with the
/// same one would get the first attempt's refusal back) until [`WAIT`].
pub async fn acquire(c: &reqwest::Client, gw: &str, name: &str, session: &str, wait_ms: u64) -> u64 {
    let url = format!("{gw}/v1/locks/demo/default/{name}/acquire");
    let end = Instant::now() + WAIT;
    for attempt in 0.. {
        let body = json!({ "session": session, "request_id": format!("{name}-{attempt}"), "wait_timeout_ms": wait_ms });
        let last = match c.post(&url).json(&body).send().await {
            Ok(r) if r.status().is_success() => return token(&r.json().await.expect("JSON answer")),
            Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        assert!(Instant::now() < end, "acquire {name}: {last}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    unreachable!()
}
