//! `holdfast-bench`: one workload against one lock service, printed as one JSON line.
//! `scripts/bench.sh` runs every workload against holdfast and against its anchor (a
//! 3-member etcd 3.4 cluster, v3lock API, one lease per client) in the same run and
//! reports the ratios (docs/benchmarks.md). Not run in CI.
//!
//! Workloads (docs/design.md, "Numbers to design for"):
//! - `single`: one client, lock + unlock cycles on its own key;
//! - `efficiency`: `single` in an efficiency namespace (`bench-fast`), whose locks the
//!   cell leader keeps in memory (docs/semantics.md); etcd runs `single` (it has one
//!   kind of lock);
//! - `parallel`: `--clients` (64) clients, each cycling on its own key;
//! - `contended`: `--clients` (16) clients on one key, each holding it 1 ms; the rate
//!   is hand-offs per second and the latency is the wait for the lock;
//! - `owner-lookups`: `--clients` (64) services asking who owns a shard: holdfast's
//!   `GetOwner` through a gateway (answered from its placement cache), etcd a range
//!   read of one key (linearizable, its default). The rate is lookups per second and
//!   the latency ("acquire") is one lookup;
//! - `renewals`: `single`'s one client while `--sessions` (10,000) other sessions
//!   (etcd: leases) of `--session-ttl-ms` (15 s, the seed's TTL) renew at TTL/3 in the
//!   background, in their own shard (`--renewals-shard`) of the same cell
//!   (`renewals.rs`). Compared with `single` alone: the cost of a cell's idle tenants.
//!
//! - `floor-rpc`, `floor-fsync` (holdfast only): the machine's floor, one gRPC round
//!   trip and one synced log append per call (`floor.rs`).
//!
//! Latency is measured per operation with `Instant` around the awaited call; the
//! percentiles are exact (all samples kept, sorted).
//!
//! `failover` is the other measurement: one client cycling lock + unlock while
//! `scripts/failover.sh` SIGKILLs the service's leader and restarts it; it reports
//! every gap between consecutive grants (docs/guarantees.md, "Failover").

mod control;
#[cfg(feature = "etcd")]
mod etcd_lock;
mod floor;
mod holdfast_lock;
mod renewals;

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
    Efficiency,
    Parallel,
    Contended,
    OwnerLookups,
    Renewals,
    FloorRpc,
    FloorFsync,
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
    /// One client cycling lock + unlock on one key for `--seconds`, errors retried
    /// after 10 ms; one JSON line out with the gaps between consecutive grants. Run it
    /// while the leader is killed (scripts/failover.sh).
    ///
    /// Example: holdfast-bench failover --system holdfast --endpoints 127.0.0.1:7400 --seconds 40
    Failover(FailoverArgs),
    /// The safety checker's positive control: a holder paused past its lease while
    /// another takes the lock, then the drills' checker on the history (control.rs,
    /// scripts/control.sh). One JSON line out.
    ///
    /// Example: holdfast-bench control --system etcd --endpoints 127.0.0.1:21379 --history /tmp/h.jsonl
    Control(control::ControlArgs),
    /// The paused holder of `control` (started by it).
    #[command(hide = true)]
    ControlHolder(control::HolderArgs),
}

#[derive(Debug, clap::Args)]
struct FailoverArgs {
    #[arg(long, value_enum)]
    system: System,
    #[arg(long)]
    endpoints: String,
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    /// Gaps at least this long are listed one by one.
    #[arg(long, default_value_t = 250)]
    list_gaps_ms: u64,
    #[command(flatten)]
    target: Target,
}

/// Where a run goes, beyond the endpoints.
#[derive(Debug, clap::Args)]
struct Target {
    /// holdfast: namespace and shard.
    #[arg(long, default_value = "bench")]
    ns: String,
    #[arg(long, default_value = "default")]
    shard: String,
    /// A label for the run (which path: gateway, cell).
    #[arg(long, default_value = "")]
    label: String,
    /// holdfast: the playground's certificates (root's client certificate); etcd: a
    /// directory with `ca.crt`, `client.crt` and `client.key`. Unset: plaintext (a
    /// playground run --insecure; etcd as the script starts it by default).
    #[arg(long)]
    certs_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct FailoverReport {
    system: System,
    label: String,
    seconds: f64,
    grants: usize,
    errors: u64,
    max_gap_ms: f64,
    /// Every gap of at least `--list-gaps-ms`: (seconds into the run it ended, length).
    gaps: Vec<(f64, f64)>,
}

/// Cycles lock + unlock until `seconds` passed, recording when each grant came back.
async fn failover_loop<L: Locker>(mut l: L, a: &FailoverArgs) -> FailoverReport {
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    let mut grants: Vec<Instant> = Vec::new();
    let mut errors = 0u64;
    while Instant::now() < end {
        match l.lock("failover").await {
            Ok(()) => {
                grants.push(Instant::now());
                if let Err(e) = l.unlock().await {
                    errors += 1;
                    eprintln!("unlock: {e}");
                }
            }
            Err(e) => {
                errors += 1;
                if errors % 50 == 1 {
                    eprintln!("lock: {e}");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut max_gap = 0.0f64;
    let mut gaps = Vec::new();
    for w in grants.windows(2) {
        let gap = ms(w[1] - w[0]);
        max_gap = max_gap.max(gap);
        if gap >= a.list_gaps_ms as f64 {
            gaps.push(((w[1] - start).as_secs_f64(), gap));
        }
    }
    FailoverReport { system: a.system, label: a.target.label.clone(), seconds: a.seconds as f64, grants: grants.len(), errors, max_gap_ms: max_gap, gaps }
}

async fn failover(a: FailoverArgs) -> Result<(), String> {
    let endpoints: Vec<String> = a.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
    let report = match a.system {
        System::Holdfast => {
            let security = holdfast_lock::security(a.target.certs_dir.as_deref())?;
            failover_loop(holdfast_lock::HoldfastLocker::connect(&security, &endpoints, &a.target.ns, &a.target.shard).await?, &a).await
        }
        #[cfg(feature = "etcd")]
        System::Etcd => failover_loop(etcd_lock::EtcdLocker::connect(&endpoints, a.target.certs_dir.as_deref(), Some(Duration::from_secs(1))).await?, &a).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => return Err("built without the `etcd` feature: use scripts/failover.sh".into()),
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    Ok(())
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
    /// `renewals`: background sessions (etcd: leases).
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// `renewals`: their TTL; they renew at a third of it.
    #[arg(long, default_value_t = 15_000)]
    session_ttl_ms: u64,
    /// `renewals`, holdfast: the shard the background sessions live in (placed on
    /// the same cell by `setup`), so they do not count against the foreground shard's
    /// session quota.
    #[arg(long, default_value = "renewals")]
    renewals_shard: String,
    /// `floor-fsync`: where its file goes (the playground's RocksDB lives under /tmp).
    #[arg(long, default_value = "/tmp")]
    floor_dir: std::path::PathBuf,
    #[command(flatten)]
    target: Target,
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
    /// `renewals`: what the background did.
    #[serde(skip_serializing_if = "Option::is_none")]
    background: Option<renewals::BackgroundReport>,
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
        label: a.target.label.clone(),
        clients,
        seconds: a.seconds as f64,
        ops_per_s: n as f64 / a.seconds as f64,
        acquire_p50_ms: pct(&mut all.acquire, 0.50),
        acquire_p99_ms: pct(&mut all.acquire, 0.99),
        cycle_p99_ms: pct(&mut all.cycle, 0.99),
        errors: all.errors,
        background: None,
    }
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let a = match Cmd::parse() {
        Cmd::Setup { endpoints, cell, certs_dir } => return holdfast_lock::setup(&holdfast_lock::security(certs_dir.as_deref())?, &endpoints, &cell).await,
        Cmd::Run(a) => a,
        Cmd::Failover(a) => return failover(a).await,
        Cmd::Control(a) => return control::control(a).await,
        Cmd::ControlHolder(a) => return control::holder(a).await,
    };
    let clients = a.clients.unwrap_or(match a.workload {
        Workload::Single | Workload::Efficiency | Workload::Renewals | Workload::FloorRpc | Workload::FloorFsync => 1,
        Workload::Parallel => 64,
        Workload::Contended => 16,
        Workload::OwnerLookups => 64,
    });
    let endpoints: Vec<String> = a.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
    let report = match a.system {
        System::Holdfast if a.workload == Workload::FloorRpc => {
            let security = holdfast_lock::security(a.target.certs_dir.as_deref())?;
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(floor::RpcPing::connect(&security, &endpoints).await?);
            }
            run(ls, &a).await
        }
        System::Holdfast if a.workload == Workload::FloorFsync => {
            let ls = (0..clients).map(|_| floor::DiskSync::create(&a.floor_dir)).collect::<Result<Vec<_>, _>>()?;
            run(ls, &a).await
        }
        System::Etcd if matches!(a.workload, Workload::FloorRpc | Workload::FloorFsync) => {
            return Err("the floor is the machine's: run it with --system holdfast".into());
        }
        System::Holdfast if a.workload == Workload::OwnerLookups => {
            let security = holdfast_lock::security(a.target.certs_dir.as_deref())?;
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(holdfast_lock::OwnerReader::connect(&security, &endpoints, &a.target.ns, &a.target.shard).await?);
            }
            run(ls, &a).await
        }
        System::Holdfast if a.workload == Workload::Renewals => {
            let security = holdfast_lock::security(a.target.certs_dir.as_deref())?;
            let ttl = Duration::from_millis(a.session_ttl_ms);
            let background = renewals::HoldfastRenewers::start(&security, &endpoints, &a.target.ns, &a.renewals_shard, a.sessions, ttl).await?;
            let l = holdfast_lock::HoldfastLocker::connect(&security, &endpoints, &a.target.ns, &a.target.shard).await?;
            let report = run(vec![l], &a).await;
            Report { background: Some(background.stop().await?), ..report }
        }
        System::Holdfast => {
            let security = holdfast_lock::security(a.target.certs_dir.as_deref())?;
            let ns = if a.workload == Workload::Efficiency { holdfast_lock::FAST_NS } else { &a.target.ns };
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(holdfast_lock::HoldfastLocker::connect(&security, &endpoints, ns, &a.target.shard).await?);
            }
            run(ls, &a).await
        }
        #[cfg(feature = "etcd")]
        System::Etcd if a.workload == Workload::OwnerLookups => {
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(etcd_lock::EtcdReader::connect(&endpoints, a.target.certs_dir.as_deref()).await?);
            }
            run(ls, &a).await
        }
        #[cfg(feature = "etcd")]
        System::Etcd if a.workload == Workload::Renewals => {
            let certs = a.target.certs_dir.as_deref();
            let background = renewals::EtcdRenewers::start(&endpoints, certs, a.sessions, Duration::from_millis(a.session_ttl_ms)).await?;
            let l = etcd_lock::EtcdLocker::connect(&endpoints, certs, None).await?;
            let report = run(vec![l], &a).await;
            Report { background: Some(background.stop().await?), ..report }
        }
        #[cfg(feature = "etcd")]
        System::Etcd => {
            let mut ls = Vec::new();
            for _ in 0..clients {
                ls.push(etcd_lock::EtcdLocker::connect(&endpoints, a.target.certs_dir.as_deref(), None).await?);
            }
            run(ls, &a).await
        }
        #[cfg(not(feature = "etcd"))]
        System::Etcd => return Err("built without the `etcd` feature: use scripts/bench.sh".into()),
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    Ok(())
}
