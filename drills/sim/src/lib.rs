//! holdfast-sim: one cell of three nodes, simulated (docs/simulation.md).
//!
//! What runs is the product's own code: openraft, the cell's `LockService` and
//! `CellAdmin` over tonic, the RocksDB log and state machine (on RocksDB's in-memory
//! environment), and the SDK's clients with their sessions, renewals and
//! leader-following. What is simulated is underneath: turmoil's network (latency,
//! partitions) and time (every host's tokio clock), all on one thread. The seed
//! decides everything that varies: the fault schedule, message latencies, the order
//! `tokio::select!` polls its branches in (turmoil seeds each host's runtime under
//! `tokio_unstable`), each node's election timeout, and every id and jitter the
//! servers and the SDK draw ([`holdfast_rpc::entropy`]). One seed, one history.
//!
//! Each worker, a simulated host of its own, records what it invoked and what it saw
//! into a drills history, and writes through the fencing helper to a simulated
//! resource; the drills' checker reads the whole history afterwards.

mod net;
mod workload;

use holdfast_drills::checker::{check, CheckReport};
use holdfast_drills::history::{EventKind, FaultKind, History};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use workload::Workload;

/// The cell's nodes (hosts `cell-1` ..).
pub const NODES: u64 = 3;
/// Each node's Raft port and client port on its simulated host.
const RAFT_PORT: u16 = 7100;
const CLIENT_PORT: u16 = 7200;

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub workload: Workload,
    /// Inject faults (partitions, crashes and restarts of nodes).
    pub faults: bool,
    /// A planted bug every node runs (the cell's `unsafe_plant`; debug builds only):
    /// the checker must find it.
    pub plant: Option<String>,
}

impl Options {
    pub fn new(seed: u64) -> Options {
        Options { seed, workload: Workload::default(), faults: true, plant: None }
    }
}

/// What one run produced.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub history: History,
    pub report: CheckReport,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Grants the workers saw: a run without any checked nothing.
    pub grants: usize,
}

impl Outcome {
    pub fn is_clean(&self) -> bool {
        self.report.is_clean()
    }
}

/// The fault schedule's own generator (splitmix64): the schedule depends on the seed
/// alone, not on what the servers draw.
pub(crate) struct Dice(u64);

impl Dice {
    pub(crate) fn new(seed: u64) -> Dice {
        Dice(seed ^ 0x5eed_5eed_5eed_5eed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

pub(crate) fn host(id: u64) -> String {
    format!("cell-{id}")
}

/// The simulated time now, in ms (on any host, or in the driver between steps).
pub(crate) fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// The run's history, shared by the workers and the fault driver.
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<(History, u64)>>);

impl Log {
    /// Records `kind` now (on a simulated host).
    pub(crate) fn record(&self, kind: EventKind) {
        self.record_at(now_ms(), kind);
    }

    /// Records `kind` at simulated time `ms` (the fault driver, between steps).
    pub(crate) fn record_at(&self, ms: u64, kind: EventKind) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let t = ms.max(g.0.end_ms());
        g.0.push(t, t, kind);
    }

    /// The next operation's id.
    pub(crate) fn next_op(&self) -> holdfast_drills::history::OpId {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.1 += 1;
        holdfast_drills::history::OpId(g.1)
    }

    fn take(&self) -> History {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
}

fn cell_config(id: u64, election_min_ms: u64, plant: Option<String>) -> holdfast_cell::CellConfig {
    holdfast_cell::CellConfig {
        node_id: id,
        cell: workload::CELL.into(),
        region: workload::REGION.into(),
        data_dir: format!("/sim/{}", host(id)).into(),
        raft_addr: format!("0.0.0.0:{RAFT_PORT}"),
        client_addr: format!("0.0.0.0:{CLIENT_PORT}"),
        advertise_client_addr: None,
        metrics_addr: None,
        registry_endpoints: String::new(),
        ownership_margin_ms: 500,
        heartbeat_ms: 100,
        // One value per node, drawn from the seed: openraft draws the timeout from
        // [min, max) with the OS's generator, and a range of one is no draw.
        election_min_ms,
        election_max_ms: election_min_ms + 1,
        checkpoint_interval_ms: 500,
        snapshot_every_logs: 200,
        shutdown_deadline_ms: 2_000,
        transport: Default::default(),
        tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
        unsafe_plant: plant,
    }
}

/// Starts node `id` on its host (again, after a crash: same memory disk).
async fn run_node(id: u64, election_min_ms: u64, plant: Option<String>, disk: holdfast_raft::MemoryDisk) -> turmoil::Result {
    let name = host(id);
    let raft = net::listen(&name, RAFT_PORT).await?;
    let client = net::listen(&name, CLIENT_PORT).await?;
    let transport = holdfast_rpc::Transport::over(Default::default(), Arc::new(net::SimNetwork));
    let cfg = cell_config(id, election_min_ms, plant);
    let server = holdfast_cell::CellServer::start_simulated(&cfg, raft, client, transport, disk).await?;
    if id == 1 && !server.raft_node().raft().is_initialized().await? {
        let members = (1..=NODES)
            .map(|n| {
                let ip = turmoil::lookup(host(n).as_str());
                (n, holdfast_raft::Node::new(format!("{ip}:{RAFT_PORT}"), format!("{ip}:{CLIENT_PORT}")))
            })
            .collect();
        server.initialize(members).await?;
    }
    // Serves until the simulation crashes this host or ends.
    std::future::pending::<()>().await;
    Ok(())
}

/// Runs one seed to its end and checks its history.
pub fn run(opts: &Options) -> Result<Outcome, String> {
    holdfast_rpc::entropy::seed_this_thread(Some(opts.seed));
    let mut dice = Dice::new(opts.seed);
    let mut sim = turmoil::Builder::new()
        .rng_seed(opts.seed)
        .simulation_duration(Duration::from_secs(3_600))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(workload::MAX_LATENCY)
        .tcp_capacity(1 << 20)
        .build();
    let disks: Vec<holdfast_raft::MemoryDisk> = (1..=NODES).map(|_| holdfast_raft::MemoryDisk::new().map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    for id in 1..=NODES {
        let disk = disks[(id - 1) as usize].clone();
        let election_min_ms = dice.range(400, 800);
        let plant = opts.plant.clone();
        sim.host(host(id), move || run_node(id, election_min_ms, plant.clone(), disk.clone()));
    }
    let log = Log::default();
    let grants = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ready = workload::Ready::default();
    {
        let ready = ready.clone();
        // Half the seeds run the namespace without a lock-delay, half with the default.
        let lock_delay_ms = (dice.range(0, 2) == 0).then_some(0);
        sim.client("admin", async move {
            Workload::admin(ready, lock_delay_ms).await?;
            Ok(())
        });
    }
    let resource = Arc::new(holdfast_fence::MemoryFence::new("ledger"));
    let held = workload::Holding::default();
    for w in 0..opts.workload.workers {
        let (ready, log, grants, workload, resource, held, seed) =
            (ready.clone(), log.clone(), grants.clone(), opts.workload.clone(), resource.clone(), held.clone(), opts.seed);
        sim.client(workload::worker_host(w), async move {
            workload.run_worker(w, seed, ready, log, grants, resource, held).await?;
            Ok(())
        });
    }

    let mut faults = workload::Faults::new(opts.faults, opts.workload.workers, held, &mut dice);
    let result = loop {
        match sim.step() {
            Ok(true) => break Ok(()),
            Ok(false) => faults.step(&mut sim, &mut dice, &log),
            Err(e) => break Err(e.to_string()),
        }
    };
    let simulated = sim.elapsed();
    holdfast_rpc::entropy::seed_this_thread(None);
    drop(sim);
    result.map_err(|e| format!("seed {}: {e}", opts.seed))?;
    let history = log.take();
    let report = check(&history);
    Ok(Outcome { seed: opts.seed, history, report, simulated, grants: grants.load(std::sync::atomic::Ordering::Relaxed) })
}

pub(crate) fn fault(log: &Log, at: Duration, kind: FaultKind, target: String) {
    tracing::info!(at_ms = at.as_millis() as u64, %kind, %target, "fault");
    log.record_at(at.as_millis() as u64, EventKind::FaultInjected { kind, target });
}
