//! `holdfast-bench`: one workload against one lock service, printed as one JSON line.
//! `scripts/bench.sh` runs every workload against holdfast and against its anchor (a
//! 3-member etcd 3.4 cluster, v3lock API, one lease per client) in the same run and
//! reports the ratios (docs/benchmarks.md). Not run in CI.
//!
//! Workloads (docs/design.md, "Numbers to design for"):
//! - `single`: one client, lock + unlock cycles on its own key;
//! - `parallel`: `--clients` (64) clients, each cycling on its own key;
//! - `contended`: `--clients` (16) clients on one key, each holding it 1 ms; the rate
//!   is hand-offs per second and the latency is the wait for the lock.
//!
//! Latency is measured per operation with `Instant` around the awaited call; the
//! percentiles are exact (all samples kept, sorted).

#[cfg(feature = "etcd")]
mod etcd_lock;
mod holdfast_lock;

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    Holdfast,
    Etcd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    Single,
    Parallel,
    Contended,
}

#[derive(Debug, Parser)]
#[command(name = "holdfast-bench", about = "Lock workloads against holdfast or etcd (scripts/bench.sh runs them side by side).")]
enum Cmd {
    /// Create the namespace `bench` (its acquire rate quota lifted) and place its shard
    /// on a cell, through a gateway. Idempotent.
    ///
    /// Example: holdfast-bench setup --endpoints 127.0.0.1:7400 --cell east-1
    Setup {
        #[arg(long)]
        endpoints: String,
        #[arg(long)]
        cell: String,
        /// holdfast: the playground's certificates (root's client certificate);
        /// unset: plaintext, for a playground run --insecure.
        #[arg(long)]
        certs_dir: Option<std::path::PathBuf>,
    },
    /// One workload against one system; one JSON line out.
    ///
    /// Example: holdfast-bench run --system etcd --workload single --endpoints 127.0.0.1:21379
    Run(Args),
}

#[derive(Debug, clap::Args)]
struct Args {
    #[arg(long, value_enum)]
    system: System,
    #[arg(long, value_enum)]
    workload: Workload,
    /// Comma-separated endpoints: holdfast gateway(s) or cell nodes; etcd members.
    #[arg(long)]
    endpoints: String,
    /// Clients (default: 1 single, 64 parallel, 16 contended).
    #[arg(long)]
    clients: Option<usize>,
    /// Measured seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// holdfast: namespace and shard.
    #[arg(long, default_value = "bench")]
    ns: String,
    #[arg(long, default_value = "default")]
    shard: String,
    /// A label for the run (which path: gateway, cell).
    #[arg(long, default_value = "")]
    label: String,
    /// holdfast: the playground's certificates (root's client certificate); unset:
    /// plaintext, for a playground run --insecure.
    #[arg(long)]
    certs_dir: Option<std::path::PathBuf>,
}

/// One client's lock operations, whatever the system.
pub trait Locker: Send {
    /// Takes `key`, waiting as long as needed.
    fn lock(&mut self, key: &str) -> impl std::future::Future<Output = Result<(), String>> + Send;
    /// Releases what `lock` took.
    fn unlock(&mut self) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

#[derive(Debug, Default)]
struct Samples {
    acquire: Vec<Duration>,
    cycle: Vec<Duration>,
    errors: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    system: System,
    workload: Workload,
    label: String,
    clients: usize,
    seconds: f64,
    /// Lock + unlock cycles (for `contended`: hand-offs) per second.
    ops_per_s: f64,
    acquire_p50_ms: f64,
    acquire_p99_ms: f64,
    cycle_p99_ms: f64,
    errors: u64,
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

async fn client_loop<L: Locker>(mut l: L, key: String, hold: Duration, warm_until: Instant, end: Instant) -> Samples {
    let mut s = Samples::default();
    while Instant::now() < end {
        let t0 = Instant::now();
        if let Err(e) = l.lock(&key).await {
            s.errors += 1;
            if s.errors < 3 {
                eprintln!("lock: {e}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let t1 = Instant::now();
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        if let Err(e) = l.unlock().await {
            s.errors += 1;
            if s.errors < 3 {
                eprintln!("unlock: {e}");
            }
        }
        let t2 = Instant::now();
        if t0 >= warm_until && t2 <= end {
            s.acquire.push(t1 - t0);
            s.cycle.push(t2 - t0);
        }
    }
    s
}

async fn run<L: Locker + 'static>(lockers: Vec<L>, a: &Args) -> Report {
    let workload = a.workload;
    let hold = if workload == Workload::Contended { Duration::from_millis(1) } else { Duration::ZERO };
    let start = Instant::now();
    let warm_until = start + Duration::from_secs(1);
    let end = warm_until + Duration::from_secs(a.seconds);
    let clients = lockers.len();
    let handles: Vec<_> = lockers
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let key = if workload == Workload::Contended { "bench-hot".to_owned() } else { format!("bench-{i}") };
            tokio::spawn(client_loop(l, key, hold, warm_until, end))
        })
        .collect();
    let mut all = Samples::default();
    for h in handles {
        let s = h.await.expect("a client task panicked");
        all.acquire.extend(s.acquire);
        all.cycle.extend(s.cycle);
        all.errors += s.errors;
    }
    let n = all.cycle.len();
    Report {
        system: a.system,
        workload,
        label: a.label.clone(),
        clients,
        seconds: a.seconds as f64,
        ops_per_s: n as f64 / a.seconds as f64,
        acquire_p50_ms: pct(&mut all.acquire, 0.50),
        acquire_p99_ms: pct(&mut all.acquire, 0.99),
        cycle_p99_ms: pct(&mut all.cycle, 0.99),
        errors: all.errors,
    }
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let a = match Cmd::parse() {
        Cmd::Setup { endpoints, cell, certs_dir } => return holdfast_lock::setup(&holdfast_lock::security(certs_dir.as_deref())?, &endpoints, &cell).await,
        Cmd::Run(a) => a,
    };
    let clients = a.clients.unwrap_or(match a.workload {
        Workload::Single => 1,
        Workload::Parallel => 64,
        Workload::Contended => 16,
    });
    let endpoints: Vec<String> = a.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
    let report = match a.system {
        System::Holdfast => {
            let security = holdfast_lock::security(a.certs_dir.as_deref())?;
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(holdfast_lock::HoldfastLocker::connect(&security, &endpoints, &a.ns, &a.shard).await?);
            }
            run(ls, &a).await
        }
        #[cfg(feature = "etcd")]
        System::Etcd => {
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(etcd_lock::EtcdLocker::connect(&endpoints).await?);
            }
            run(ls, &a).await
        }
        #[cfg(not(feature = "etcd"))]
        System::Etcd => return Err("built without the `etcd` feature: use scripts/bench.sh".into()),
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    Ok(())
}
