//! `holdfast demo`: the timeline of docs/design.md, played with real processes.
//!
//! 1. It starts a playground (`holdfast dev`, its own data dir and ports) and a fenced
//!    ledger (a `MemoryFence` behind HTTP, in this process).
//! 2. Worker A (a `holdfast demo-worker` process) takes the lock and writes.
//! 3. A is SIGSTOPped past its TTL; worker B is granted the lock and writes.
//! 4. A resumes and writes with its old token: the ledger must refuse it.
//! 5. The shard moves to another region; a lock taken there carries a larger token.
//!
//! It prints the timeline with tokens and exits non-zero if any step did not happen as
//! expected.

use crate::dev::endpoints::Endpoints;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use clap::Args;
use holdfast_core::{FencingToken, LockName, NamespaceName, ShardKey, ShardName};
use holdfast_fence::{FencedStore, LockId, MemoryFence};
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LOCK: &str = "ledger-writer";
const TTL_MS: u64 = 3_000;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// First port of the playground the demo starts (60 ports are used).
    #[arg(long, default_value_t = 7600)]
    base_port: u16,
    /// Where the playground keeps its data (default: a fresh temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[arg(long)]
    endpoint: String,
    #[arg(long)]
    ledger: String,
    #[arg(long)]
    lock: String,
    #[arg(long, default_value_t = TTL_MS)]
    ttl_ms: u64,
    #[arg(long, default_value = "demo")]
    ns: String,
    #[arg(long, default_value = "default")]
    shard: String,
    #[command(flatten)]
    tls: crate::remote::ClientTls,
}

struct Timeline(Instant);

impl Timeline {
    fn say(&self, what: impl AsRef<str>) {
        println!("[{:>6.2}s] {}", self.0.elapsed().as_secs_f64(), what.as_ref());
    }
}

/// Kills what the demo started, whatever happens.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
        for c in &mut self.0 {
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Worker {
    child_index: usize,
    pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(procs: &mut Procs, endpoint: &str, ledger: &str, tls: &crate::remote::ClientTls) -> Result<Worker, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["demo-worker", "--endpoint", endpoint, "--ledger", ledger, "--lock", LOCK])
            .args(tls.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        let stdin = child.stdin.take().ok_or("worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("worker stdout")?);
        let pid = child.id();
        procs.0.push(child);
        Ok(Worker { child_index: procs.0.len() - 1, pid, stdin, stdout })
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        self.stdout.read_line(&mut l).map_err(|e| e.to_string())?;
        if l.is_empty() {
            return Err("the worker exited".into());
        }
        Ok(l.trim().to_owned())
    }

    /// Waits for the worker's grant: its token.
    fn token(&mut self) -> Result<u64, String> {
        let l = self.line()?;
        l.strip_prefix("TOKEN ")
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("worker said {l:?}, not its token"))
    }

    fn write(&mut self, value: &str) -> Result<String, String> {
        writeln!(self.stdin, "{value}").map_err(|e| e.to_string())?;
        self.line()
    }
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("demo step failed: {what}"))
    }
}

pub async fn run(a: DemoArgs) -> Result<(), String> {
    let t = Timeline(Instant::now());
    let scratch = tempfile_dir()?;
    let data = a.data_dir.clone().unwrap_or_else(|| scratch.join("playground"));
    let mut procs = Procs(Vec::new());

    t.say(format!("starting a playground (3 regions, 15 processes) in {}", data.display()));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(scratch.join("dev.log")).map_err(|e| e.to_string())?;
    procs.0.push(
        Command::new(&exe)
            .args(["dev", "--base-port", &a.base_port.to_string()])
            .arg("--data-dir")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start holdfast dev: {e}"))?,
    );
    let endpoints = wait_endpoints(&data, &mut procs).await?;
    let gw = endpoints.regions.get("east").ok_or("no east gateway in endpoints.json")?.gateway.grpc.clone();
    let tls = endpoints.client_tls();
    t.say(format!("playground ready; east gateway {gw}"));

    let ledger = MemoryFence::new("demo-ledger");
    let ledger_url = serve_ledger(ledger).await?;
    t.say(format!("fenced ledger at {ledger_url} (rejects a token lower than the highest it has seen)"));

    let mut a_w = Worker::start(&mut procs, &gw, &ledger_url, &tls)?;
    let ta = a_w.token()?;
    t.say(format!("worker A (pid {}) holds {LOCK} with token {ta}", a_w.pid));
    let r = a_w.write("A:1")?;
    t.say(format!("A writes with token {ta}: {r}"));
    check(r == "ACCEPTED", "A's first write must be accepted")?;

    let _ = Command::new("kill").args(["-STOP", &a_w.pid.to_string()]).status();
    t.say(format!("A paused (SIGSTOP), past its {TTL_MS} ms TTL: a GC pause, a frozen VM"));
    let mut b_w = Worker::start(&mut procs, &gw, &ledger_url, &tls)?;
    let tb = b_w.token()?;
    t.say(format!("A's session expired; worker B (pid {}) granted {LOCK} with token {tb}", b_w.pid));
    check(tb > ta, "B's token must be larger than A's")?;
    let r = b_w.write("B:2")?;
    t.say(format!("B writes with token {tb}: {r}"));
    check(r == "ACCEPTED", "B's write must be accepted")?;

    let _ = Command::new("kill").args(["-CONT", &a_w.pid.to_string()]).status();
    t.say("A resumes, still believing it holds the lock, and writes");
    let r = a_w.write("A:3")?;
    t.say(format!("A writes with token {ta}: {r}"));
    check(r == "REJECTED", "the zombie holder's write must be rejected by the fence")?;
    let _ = (a_w.child_index, b_w.child_index);

    t.say("moving shard demo/default from east-1 to west-1 (planned: drain, seal, epoch + 1)");
    let mut reg = RegistryServiceClient::new(crate::remote::connect(crate::remote::transport(&tls)?, &gw).await?);
    let req = rpb::MoveShardRequest { ns: "demo".into(), shard: "default".into(), to_cell: "west-1".into(), planned: true, ..Default::default() };
    reg.move_shard(req).await.map_err(|s| holdfast_rpc::status::one_line(&s))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let owner = loop {
        let o = reg
            .get_owner(rpb::GetOwnerRequest { ns: "demo".into(), shard: "default".into(), fresh: true })
            .await
            .map_err(|s| holdfast_rpc::status::one_line(&s))?
            .into_inner()
            .owner;
        if let Some(o) = o.filter(|o| o.cell == "west-1" && o.state == rpb::ShardState::Active as i32) {
            break o;
        }
        check(Instant::now() < deadline, "the move must complete within 60 s")?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    t.say(format!("demo/default now on {} in {} at epoch {}", owner.cell, owner.region, owner.epoch));
    let mut c_w = Worker::start(&mut procs, &gw, &ledger_url, &tls)?;
    let tc = c_w.token()?;
    let epoch = FencingToken(tc).epoch().0;
    t.say(format!("worker C granted {LOCK} after the move with token {tc} (epoch {epoch})"));
    check(tc > tb && epoch == owner.epoch, "a token after the move must beat every token before it")?;
    let r = c_w.write("C:4")?;
    t.say(format!("C writes with token {tc}: {r}"));
    check(r == "ACCEPTED", "C's write must be accepted")?;
    let r = b_w.write("B:5")?;
    t.say(format!("B, moved away, writes with token {tb}: {r}"));
    check(r == "REJECTED", "a write with a token from before the move must be rejected")?;

    t.say("every step happened as expected; stopping the playground");
    drop(procs);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!("holdfast-demo-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    Ok(d)
}

async fn wait_endpoints(data: &Path, procs: &mut Procs) -> Result<Endpoints, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if Endpoints::file(data).exists() {
            return Endpoints::read(data);
        }
        if let Some(status) = procs.0[0].try_wait().map_err(|e| e.to_string())? {
            return Err(format!("holdfast dev exited ({status}) before it was ready"));
        }
        check(Instant::now() < deadline, "the playground must be ready within 120 s")?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn lock_id() -> LockId {
    LockId::new(ShardKey::new(NamespaceName::new("demo").expect("name"), ShardName::default_shard()), LockName::new(LOCK).expect("name"))
}

async fn serve_ledger(ledger: MemoryFence) -> Result<String, String> {
    let app = Router::new().route("/write", post(write)).with_state(Arc::new(ledger));
    Ok(format!("{}/write", crate::remote::serve_local(app).await?))
}

async fn write(State(ledger): State<Arc<MemoryFence>>, Json(b): Json<Value>) -> (StatusCode, Json<Value>) {
    let token = b["token"].as_str().and_then(|t| t.parse().ok()).unwrap_or(0);
    let value = b["value"].as_str().unwrap_or("");
    match ledger.write(&lock_id(), FencingToken(token), b"balance", value.as_bytes()) {
        Ok(_) => (StatusCode::OK, Json(json!({ "accepted": true }))),
        Err(e) => (StatusCode::CONFLICT, Json(json!({ "accepted": false, "why": e.to_string() }))),
    }
}

/// The worker process: takes the lock through the SDK, prints `TOKEN <t> SESSION <id>`,
/// then for each stdin line writes it to the ledger with its token and prints ACCEPTED,
/// REJECTED or UNKNOWN. It deliberately does not check its lease before writing: it
/// plays the zombie holder the fence must stop. `holdfast drill run` uses it too, as
/// a holder it can SIGSTOP.
pub async fn worker(a: WorkerArgs) -> Result<(), String> {
    let transport = crate::remote::transport(&a.tls)?;
    let client =
        holdfast_client::Client::connect_via(transport, &[a.endpoint.as_str()], holdfast_client::ClientConfig::default()).await.map_err(|e| e.to_string())?;
    let opts = holdfast_client::SessionOptions::new(a.ns.as_str(), a.shard.as_str(), Duration::from_millis(a.ttl_ms)).label("demo-worker");
    let session = client.create_session(opts).await.map_err(|e| e.to_string())?;
    let lock = session.acquire(&a.lock, holdfast_client::AcquireOptions::new().wait(Duration::from_secs(60))).await.map_err(|e| e.to_string())?;
    let token = lock.token().0;
    println!("TOKEN {token} SESSION {}", session.id().0);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let http = reqwest::Client::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let value = line.map_err(|e| e.to_string())?;
        let body = json!({ "ns": a.ns, "shard": a.shard, "lock": a.lock, "token": token.to_string(), "value": value });
        let r = http.post(&a.ledger).json(&body).send().await;
        let verdict = match r {
            Ok(r) if r.status().is_success() => "ACCEPTED",
            Ok(_) => "REJECTED",
            Err(_) => "UNKNOWN",
        };
        println!("{verdict}");
        std::io::stdout().flush().map_err(|e| e.to_string())?;
    }
    std::mem::forget(lock); // the demo kills this process; the lease ends on its own
    Ok(())
}
