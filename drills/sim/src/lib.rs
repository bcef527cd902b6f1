//! holdfast-sim: one cell of three nodes, or (with `moves`) two cells, the registry
//! and a gateway with the shard moving between the cells, simulated
//! (docs/simulation.md).
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

mod drift;
mod net;
mod regions;
mod stamps;
mod workload;

use holdfast_drills::checker::{check, CheckReport};
use holdfast_drills::history::{EventKind, FaultKind, History};
use holdfast_drills::observe::{OwnerSeen, Owners};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use drift::{Lead, BOUND_PPM};
pub use workload::Workload;

/// The nodes of each cell and of the registry.
pub const NODES: u64 = 3;
/// Each node's Raft port and client port on its simulated host.
const RAFT_PORT: u16 = 7100;
const CLIENT_PORT: u16 = 7200;
/// The gateway's gRPC and HTTP ports.
const GATEWAY_PORT: u16 = 7400;
const GATEWAY_HTTP_PORT: u16 = 7480;

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
    /// Two cells in two regions, the registry and a gateway, and the shard moving
    /// between the cells (planned and unplanned) under the workload. Without it: one
    /// cell serving its shard at epoch 1, the workers calling it directly.
    pub moves: bool,
    /// turmoil's step of simulated time. Every host's runtime is polled once a step, so
    /// the step sets the cost of a seed; a coarser one is cheaper, rounds every message
    /// latency and timer up to it, and gives other histories.
    pub tick: Duration,
    /// Also slow a node's disk now and then (each sync of its Raft log takes 20–300 ms
    /// for a few seconds). On by default; off (`--no-slow-disk`) replays the histories
    /// of the seeds run before it was (docs/simulation.md).
    pub slow_disk: bool,
    /// Also cut the power of a whole group now and then: its nodes crash together and
    /// lose the log entries they had not synced (`holdfast_raft::MemoryDisk::power_cut`).
    /// On by default; off (`--no-power-cuts`) replays the histories of the seeds run
    /// before it was.
    pub power_cuts: bool,
    /// With moves, also pause two of the registry's three voters now and then (its
    /// quorum lost for 1–6 s, often past the ownership lease), and cut a cell's whole
    /// region off instead of the cell alone a third of the time. On by default; off
    /// (`--no-region-faults`) replays the histories of the seeds run before it was.
    pub region_faults: bool,
    /// With moves, also a second fault now and then while the first is in force, on a
    /// node of another group (`workload::Faults`). On by default; off
    /// (`--no-overlapping-faults`) replays the histories of the seeds run before it was.
    pub overlapping_faults: bool,
    /// Clock-rate drift: each host's clock runs fast by a rate drawn in `0..=` this many
    /// parts per million (`drift.rs`). The stated bound ([`BOUND_PPM`]) by default;
    /// 0 (`--drift-ppm 0`) replays the histories of the seeds run before drift was in
    /// the schedule; above the bound, the checker should find what it breaks.
    pub drift_ppm: u32,
    /// Real time slept after every step (`--real-pause-us`): the machine's clock runs
    /// on while simulated time does not. A seed's history must not change with it;
    /// the replay test runs one process slowed so (docs/simulation.md).
    pub real_pause: Duration,
}

/// The step of simulated time unless `--tick-ms` says otherwise (turmoil's default).
pub const DEFAULT_TICK: Duration = Duration::from_millis(1);

impl Options {
    pub fn new(seed: u64) -> Options {
        Options {
            seed,
            workload: Workload::default(),
            faults: true,
            plant: None,
            moves: false,
            tick: DEFAULT_TICK,
            slow_disk: true,
            power_cuts: true,
            region_faults: true,
            overlapping_faults: true,
            drift_ppm: BOUND_PPM,
            real_pause: Duration::ZERO,
        }
    }
}

/// One cell: its name, its region, its nodes' hosts.
#[derive(Debug, Clone)]
pub(crate) struct CellSpec {
    pub name: &'static str,
    pub region: &'static str,
    pub hosts: Vec<String>,
}

/// The simulated hosts that serve: the cells, the registry (if any), the gateway (if
/// any).
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub cells: Vec<CellSpec>,
    pub registry: Vec<String>,
    pub gateway: Option<String>,
}

impl Layout {
    fn new(moves: bool) -> Layout {
        let hosts = |prefix: &str| (1..=NODES).map(|n| format!("{prefix}-{n}")).collect::<Vec<_>>();
        if !moves {
            return Layout { cells: vec![CellSpec { name: workload::CELL, region: workload::REGION, hosts: hosts("cell") }], registry: vec![], gateway: None };
        }
        Layout {
            cells: vec![
                CellSpec { name: regions::CELLS[0].0, region: regions::CELLS[0].1, hosts: hosts("a") },
                CellSpec { name: regions::CELLS[1].0, region: regions::CELLS[1].1, hosts: hosts("b") },
            ],
            registry: hosts("reg"),
            gateway: Some("gw".into()),
        }
    }

    /// Where the workers' SDK clients call: the gateway, or the one cell's nodes.
    pub(crate) fn lock_endpoints(&self) -> Vec<String> {
        match &self.gateway {
            Some(gw) => vec![format!("{gw}:{GATEWAY_PORT}")],
            None => self.cells[0].hosts.iter().map(|h| format!("{h}:{CLIENT_PORT}")).collect(),
        }
    }

    pub(crate) fn registry_endpoints(&self) -> Vec<String> {
        self.registry.iter().map(|h| format!("{h}:{CLIENT_PORT}")).collect()
    }

    /// The Raft nodes, cells' and registry's: what node faults hit.
    pub(crate) fn nodes(&self) -> Vec<String> {
        self.cells.iter().flat_map(|c| c.hosts.iter().cloned()).chain(self.registry.iter().cloned()).collect()
    }

    /// The hosts in front of the nodes that the workers call (the gateway), if any.
    pub(crate) fn front(&self) -> Vec<String> {
        self.gateway.iter().cloned().collect()
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
    /// How far each drifting host's clock had got ahead when last measured.
    pub leads: Vec<Lead>,
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

/// Log lines stamped with simulated time (s), which a replay repeats.
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match drift::global_now() {
            Some(d) => write!(w, "{:>8.3}s", d.as_secs_f64()),
            None => write!(w, "{:>9}", "-"),
        }
    }
}

/// The simulated time now, in ms (on any host, or in the driver between steps).
pub(crate) fn now_ms() -> u64 {
    drift::global_now().map_or(0, |d| d.as_millis() as u64)
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

/// What starts one Raft node of the simulation (again after a crash: same disk).
#[derive(Clone)]
struct NodeSpec {
    id: u64,
    /// Its group's hosts, in node id order (node 1 initializes the group).
    group: Vec<String>,
    election_min_ms: u64,
    disk: holdfast_raft::MemoryDisk,
}

impl NodeSpec {
    fn host(&self) -> &str {
        &self.group[(self.id - 1) as usize]
    }

    /// Binds the node's ports on its host; a transport over the simulated network.
    async fn listen(&self) -> std::io::Result<(holdfast_rpc::net::Listener, holdfast_rpc::net::Listener, holdfast_rpc::Transport)> {
        let raft = net::listen(self.host(), RAFT_PORT).await?;
        let client = net::listen(self.host(), CLIENT_PORT).await?;
        Ok((raft, client, holdfast_rpc::Transport::over(Default::default(), Arc::new(net::SimNetwork))))
    }

    /// Node 1 initializes its group on its first start.
    async fn initialize<S: holdfast_raft::ReplicatedState>(&self, serving: &holdfast_raft::Serving<S>) -> turmoil::Result {
        if self.id == 1 && !serving.raft_node().raft().is_initialized().await? {
            let members = self
                .group
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let ip = turmoil::lookup(h.as_str());
                    (i as u64 + 1, holdfast_raft::Node::new(format!("{ip}:{RAFT_PORT}"), format!("{ip}:{CLIENT_PORT}")))
                })
                .collect();
            serving.initialize(members).await?;
        }
        Ok(())
    }
}

fn cell_config(spec: &NodeSpec, cell: &CellSpec, registry: &[String], plant: Option<String>) -> holdfast_cell::CellConfig {
    holdfast_cell::CellConfig {
        node_id: spec.id,
        cell: cell.name.into(),
        region: cell.region.into(),
        data_dir: format!("/sim/{}", spec.host()).into(),
        raft_addr: format!("0.0.0.0:{RAFT_PORT}"),
        client_addr: format!("0.0.0.0:{CLIENT_PORT}"),
        advertise_client_addr: None,
        metrics_addr: None,
        registry_endpoints: registry.join(","),
        ownership_margin_ms: 500,
        heartbeat_ms: 100,
        // One value per node, drawn from the seed: openraft draws the timeout from
        // [min, max) with the OS's generator, and a range of one is no draw.
        election_min_ms: spec.election_min_ms,
        election_max_ms: spec.election_min_ms + 1,
        checkpoint_interval_ms: 500,
        snapshot_every_logs: 200,
        shutdown_deadline_ms: 2_000,
        transport: Default::default(),
        tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
        unsafe_plant: plant,
    }
}

/// Starts a cell node on its host (again, after a crash: same memory disk).
async fn run_cell_node(spec: NodeSpec, cell: CellSpec, registry: Vec<String>, plant: Option<String>) -> turmoil::Result {
    let (raft, client, transport) = spec.listen().await?;
    let cfg = cell_config(&spec, &cell, &registry, plant);
    let server = holdfast_cell::CellServer::start_simulated(&cfg, raft, client, transport, spec.disk.clone()).await?;
    spec.initialize(&server).await?;
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
        .tick_duration(opts.tick)
        .simulation_duration(Duration::from_secs(3_600))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(workload::MAX_LATENCY)
        .tcp_capacity(1 << 20)
        .build();
    let layout = Layout::new(opts.moves);
    let registry = layout.registry_endpoints();
    let log = Log::default();
    let mut clocks = drift::Clocks::new(opts, &log);
    // Every Raft node's disk, by host: the faults slow one now and then.
    let mut disks = std::collections::HashMap::new();
    for cell in &layout.cells {
        for id in 1..=NODES {
            let spec = NodeSpec { id, group: cell.hosts.clone(), election_min_ms: dice.range(400, 800), disk: memory_disk()? };
            disks.insert(spec.host().to_owned(), spec.disk.clone());
            let (cell, registry, plant) = (cell.clone(), registry.clone(), opts.plant.clone());
            let clock = clocks.draw(spec.host());
            sim.host(spec.host().to_owned(), move || clock.run(run_cell_node(spec.clone(), cell.clone(), registry.clone(), plant.clone())));
        }
    }
    for id in 1..=layout.registry.len() as u64 {
        let spec = NodeSpec { id, group: layout.registry.clone(), election_min_ms: dice.range(400, 800), disk: memory_disk()? };
        disks.insert(spec.host().to_owned(), spec.disk.clone());
        let clock = clocks.draw(spec.host());
        sim.host(spec.host().to_owned(), move || clock.run(regions::run_registry_node(spec.clone())));
    }
    if let Some(gw) = &layout.gateway {
        let (name, registry, clock) = (gw.clone(), registry.clone(), clocks.draw(gw));
        sim.host(gw.as_str(), move || clock.run(regions::run_gateway(name.clone(), registry.clone())));
    }
    // The servers' moments into the history; with RUST_LOG, their logs to stderr. Two
    // subscribers, not one with an optional layer: an absent layer counts as enabled
    // for every event, and every event and span of every crate is then built
    // (measured, seeds 0-9 at --tick-ms 5: 1.28 s of CPU a seed, against 0.81).
    let _tracing = {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::Layer;
        let stamps = stamps::Stamps(log.clone()).with_filter(stamps::Stamps::filter());
        let dispatch = match std::env::var_os("RUST_LOG") {
            None => tracing::Dispatch::new(tracing_subscriber::registry().with(stamps)),
            Some(_) => tracing::Dispatch::new(
                tracing_subscriber::registry().with(stamps).with(
                    tracing_subscriber::fmt::layer()
                        .with_timer(SimTime)
                        .with_writer(std::io::stderr)
                        .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
                ),
            ),
        };
        tracing::dispatcher::set_default(&dispatch)
    };
    let grants = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ready = workload::Ready::default();
    let owners = Owners::default();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let (ready, layout, owners, log, done, workers) = (ready.clone(), layout.clone(), owners.clone(), log.clone(), done.clone(), opts.workload.workers);
        // Half the seeds run the namespace without a lock-delay, half with the default.
        let lock_delay_ms = (dice.range(0, 2) == 0).then_some(0);
        let ns = workload::namespace_name()?;
        log.record_at(0, EventKind::LockDelaySet { ms: lock_delay_ms.unwrap_or_else(|| workload::default_lock_delay_ms(ns.clone())), ns });
        log.record_at(0, EventKind::WaitsBounded { ms: opts.workload.wait_bound().as_millis() as u64 });
        let moves = (!layout.registry.is_empty()).then(|| Dice::new(dice.next()));
        sim.client("admin", async move {
            match moves {
                None => {
                    // No registry: the owner is known, not observed (no line).
                    let _ = owners.saw(OwnerSeen {
                        ns: workload::NS,
                        shard: workload::SHARD,
                        region: workload::REGION,
                        cell: workload::CELL,
                        epoch: 1,
                        to_cell: "",
                    });
                    Workload::admin(&layout, ready, lock_delay_ms).await?;
                }
                Some(moves) => regions::admin(&layout, ready, lock_delay_ms, moves, owners, log, done, workers).await?,
            }
            Ok(())
        });
    }
    let resource = Arc::new(holdfast_fence::MemoryFence::new("ledger"));
    let held = workload::Holding::default();
    for w in 0..opts.workload.workers {
        let (ready, log, grants, workload, resource, held, seed) =
            (ready.clone(), log.clone(), grants.clone(), opts.workload.clone(), resource.clone(), held.clone(), opts.seed);
        let (endpoints, owners, done) = (layout.lock_endpoints(), owners.clone(), done.clone());
        let clock = clocks.draw(&workload::worker_host(w));
        sim.client(
            workload::worker_host(w),
            clock.run(async move {
                let ends = workload.run_worker(w, seed, endpoints, owners, ready, log, grants, resource, held).await;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ends?;
                Ok(())
            }),
        );
    }

    let disks =
        workload::Disks { disks, slow: opts.slow_disk, power_cuts: opts.power_cuts, region_faults: opts.region_faults, overlapping: opts.overlapping_faults };
    let mut faults = workload::Faults::new(opts.faults, &layout, disks, opts.workload.workers, held, &mut dice);
    let result = loop {
        match sim.step() {
            Ok(true) => break Ok(()),
            Ok(false) => {
                faults.step(&mut sim, &mut dice, &log);
                if !opts.real_pause.is_zero() {
                    std::thread::sleep(opts.real_pause);
                }
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    let simulated = sim.elapsed();
    holdfast_rpc::entropy::seed_this_thread(None);
    drop(sim);
    result.map_err(|e| format!("seed {}: {e}", opts.seed))?;
    let history = log.take();
    let report = check(&history);
    let leads = clocks.leads.take();
    Ok(Outcome { seed: opts.seed, history, report, simulated, grants: grants.load(std::sync::atomic::Ordering::Relaxed), leads })
}

fn memory_disk() -> Result<holdfast_raft::MemoryDisk, String> {
    holdfast_raft::MemoryDisk::new().map_err(|e| e.to_string())
}

pub(crate) fn fault(log: &Log, at: Duration, kind: FaultKind, target: String) {
    tracing::info!(at_ms = at.as_millis() as u64, %kind, %target, "fault");
    log.record_at(at.as_millis() as u64, EventKind::FaultInjected { kind, target });
}
