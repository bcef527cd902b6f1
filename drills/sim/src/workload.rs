//! The workload (workers taking one lock through the SDK and writing through the
//! fencing helper) and the fault schedule, both drawn from the seed.

use crate::{fault, Dice, Layout, Log, CLIENT_PORT};
use holdfast_client::{AcquireOptions, Client, ClientConfig, Session, SessionOptions};
use holdfast_core::{CellId, ErrorCode, FencingToken, LockName, NamespaceName, RegionId};
use holdfast_drills::history::{EventKind, FaultKind, LockKey, SessionRef};
use holdfast_drills::observe::Owners;
use holdfast_fence::{FencedStore, LockId, MemoryFence};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_rpc::Transport;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const CELL: &str = "sim-1";
/// The longest a message takes on a healthy link.
pub(crate) const MAX_LATENCY: Duration = Duration::from_millis(5);
pub(crate) const REGION: &str = "sim";
pub(crate) const NS: &str = "sim";
pub(crate) const SHARD: &str = "default";
const LOCK: &str = "ledger";
/// How long each Acquire waits in the queue.
pub(crate) const WAIT: Duration = Duration::from_secs(5);
/// The most acquires one session of a worker makes.
const SESSION_ACQUIRES: u64 = 3;

/// What the workers do.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Workers, each an SDK client of its own.
    pub workers: u64,
    /// Acquires each worker makes, one after the other, in sessions of one to
    /// [`SESSION_ACQUIRES`] acquires each (drawn from the seed).
    pub rounds: u64,
    /// Session TTL.
    pub ttl: Duration,
}

/// Beyond a wait's own length, the most a correct cell takes to end it: a timeout is
/// proposed at its deadline and again every 500 ms until it commits, through the
/// run's faults (a slowed or held node, a slow disk). A cell cut off from the
/// registry holds its timers until its ownership lease is back; the checker counts
/// from the cut's heal for that. Measured on one cell: at most 4.6 s of it used.
const WAIT_SLACK: Duration = Duration::from_secs(12);

impl Workload {
    /// The longest a waiter may stay queued under one leader's timers (the checker's
    /// `waiter_outstayed`): until its call's wait runs out, or, for a waiter no call
    /// tracks, its session's TTL, plus the slack.
    pub(crate) fn wait_bound(&self) -> Duration {
        self.ttl.max(WAIT) + WAIT_SLACK
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload { workers: 3, rounds: 25, ttl: Duration::from_secs(2) }
    }
}

/// The simulation's namespace's name.
pub(crate) fn namespace_name() -> Result<NamespaceName, String> {
    NamespaceName::new(NS).map_err(|e| e.to_string())
}

/// The lock-delay a correctness namespace gets when its config names none.
pub(crate) fn default_lock_delay_ms(ns: NamespaceName) -> u64 {
    holdfast_core::NamespaceConfig::with_defaults(ns, "sim", holdfast_core::Intent::Correctness).lock_delay_ms
}

/// The simulation's namespace (`lock_delay_ms`: `None` is the default).
pub(crate) fn namespace(lock_delay_ms: Option<u64>) -> apb::NamespaceConfig {
    apb::NamespaceConfig {
        name: NS.into(),
        owner: "sim".into(),
        intent: holdfast_proto::lock::v1::Intent::Correctness as i32,
        ttl_min_ms: 500,
        ttl_max_ms: 60_000,
        lock_delay_ms,
        version: 1,
        ..Default::default()
    }
}

/// The cell serves the namespace's shard once its leader applied the namespace and
/// adopted the shard (no registry: epoch 1 throughout).
async fn adopt(transport: &Transport, layout: &Layout, lock_delay_ms: Option<u64>) -> Result<(), String> {
    for attempt in 0.. {
        for host in &layout.cells[0].hosts {
            let ep = format!("{host}:{CLIENT_PORT}");
            let Ok(ch) = transport.channel(&ep) else { continue };
            let mut admin = CellAdminClient::new(ch);
            let config = namespace(lock_delay_ms);
            let adopted = async {
                admin.apply_namespace(apb::ApplyNamespaceRequest { config: Some(config) }).await?;
                admin.adopt_shard(apb::AdoptShardRequest { ns: NS.into(), shard: SHARD.into(), epoch: 1, delayed_locks: vec![] }).await
            };
            match adopted.await {
                Ok(_) => return Ok(()),
                Err(e) => tracing::debug!(%ep, error = %e, "adopt"),
            }
        }
        if attempt > 600 {
            return Err("no node adopted the shard in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

/// Set once the cell serves the shard: the workers wait for it. (A flag the
/// simulation's hosts share; they all run on one thread.)
pub(crate) type Ready = Arc<std::sync::atomic::AtomicBool>;

/// The workers holding the lock now, as they believe: the fault schedule cuts one of
/// them off rather than an idle worker.
pub(crate) type Holding = Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>;

fn holding(h: &Holding, w: u64, on: bool) {
    let mut g = h.lock().unwrap_or_else(|e| e.into_inner());
    if on {
        g.insert(w);
    } else {
        g.remove(&w);
    }
}

/// The simulated host of worker `w`.
pub(crate) fn worker_host(w: u64) -> String {
    format!("worker-{w}")
}

impl Workload {
    /// The admin host: makes the cell serve the shard, then lets the workers go.
    /// `lock_delay_ms` is the namespace's (`None`: the default). Without a lock-delay,
    /// a lock that expired under a cut-off worker goes to the next one at once, and the
    /// cut-off worker's late write meets the fence.
    pub(crate) async fn admin(layout: &Layout, ready: Ready, lock_delay_ms: Option<u64>) -> Result<(), String> {
        let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
        adopt(&transport, layout, lock_delay_ms).await?;
        ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Worker `w`'s host: an SDK client of its own (calling `endpoints`), taking the
    /// lock `rounds` times.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run_worker(
        self,
        w: u64,
        seed: u64,
        endpoints: Vec<String>,
        owners: Owners,
        ready: Ready,
        log: Log,
        grants: Arc<AtomicUsize>,
        resource: Arc<MemoryFence>,
        held: Holding,
    ) -> Result<(), String> {
        while !ready.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
        let client = Client::connect_via(&transport, &endpoints, ClientConfig::default()).await.map_err(|e| e.to_string())?;
        self.worker(w, Dice::new(seed.wrapping_add(w + 1)), &client, &owners, &log, &grants, &resource, &held).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn worker(
        &self,
        w: u64,
        mut dice: Dice,
        client: &Client,
        owners: &Owners,
        log: &Log,
        grants: &AtomicUsize,
        resource: &MemoryFence,
        held: &Holding,
    ) -> Result<(), String> {
        let names = Names::new()?;
        // The session in use, with how many more acquires it is for.
        let mut current: Option<(Session, SessionRef, u64)> = None;
        for round in 0..self.rounds {
            if current.is_none() {
                match client.create_session(SessionOptions::new(NS, SHARD, self.ttl).label(format!("worker-{w}"))).await {
                    Ok(session) => {
                        // The session's cell: the shard's owner at the session's epoch.
                        let sref = SessionRef { cell: names.cell(owners, session.epoch().0).0, id: session.id() };
                        current = Some((session, sref, dice.range(1, SESSION_ACQUIRES + 1)));
                    }
                    Err(e) => {
                        tracing::debug!(w, round, error = %e, "no session");
                        tokio::time::sleep(Duration::from_millis(dice.range(50, 500))).await;
                        continue;
                    }
                }
            }
            let (session, sref, left) = current.as_mut().expect("a session, made above");
            let op = log.next_op();
            log.record(EventKind::GrantInvoked { op, lock: names.lock.clone(), session: sref.clone() });
            let mut lost = false;
            match session.acquire(LOCK, AcquireOptions::new().wait(WAIT)).await {
                Ok(lock) => {
                    let token = lock.token();
                    grants.fetch_add(1, Ordering::Relaxed);
                    holding(held, w, true);
                    let (cell, region) = names.cell(owners, token.epoch().0);
                    log.record(EventKind::GrantOk { op, lock: names.lock.clone(), session: sref.clone(), token, region, cell });
                    // Now and then a long hold: if the worker is cut off meanwhile, its
                    // session expires under it, another worker takes the lock, and this
                    // write comes late with the old token (the fence must refuse it).
                    let hold = if dice.range(0, 3) == 0 { dice.range(2_500, 4_000) } else { dice.range(1, 300) };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    write(log, resource, &names, token);
                    holding(held, w, false);
                    let op = log.next_op();
                    log.record(EventKind::ReleaseInvoked { op, lock: names.lock.clone(), session: sref.clone(), token });
                    match lock.release().await {
                        Ok(()) => log.record(EventKind::ReleaseOk { op }),
                        Err(_) => log.record(EventKind::ReleaseUnknown { op }),
                    }
                }
                // Whether a failed acquire was granted is unknown to the caller (a
                // grant whose answer was lost): the checker treats it so. The session
                // goes on to its next acquire unless it is lost: a call that went away
                // must not leave its waiter queued while the session lives.
                Err(e) => {
                    tracing::debug!(w, error = %e, "acquire failed");
                    log.record(EventKind::GrantUnknown { op });
                    lost = matches!(e, holdfast_client::Error::SessionLost { .. })
                        || matches!(e.code(), Some(ErrorCode::SessionExpired | ErrorCode::UnknownSession));
                }
            }
            *left -= 1;
            if *left == 0 || lost {
                let (session, sref, _) = current.take().expect("in use");
                close(log, session, sref).await;
            }
            tokio::time::sleep(Duration::from_millis(dice.range(0, 200))).await;
        }
        if let Some((session, sref, _)) = current.take() {
            close(log, session, sref).await;
        }
        Ok(())
    }
}

/// Closing releases whatever the session still holds (a grant whose answer was lost,
/// too): the checker's release check needs the line.
async fn close(log: &Log, session: Session, sref: SessionRef) {
    log.record(EventKind::SessionCloseInvoked { session: sref });
    let _ = session.close().await;
}

fn write(log: &Log, resource: &MemoryFence, names: &Names, token: FencingToken) {
    let op = log.next_op();
    log.record(EventKind::WriteAttempt { op, lock: names.lock.clone(), token, resource: "ledger".into() });
    match resource.write(&names.id, token, b"entry", format!("written with {}", token.0).as_bytes()) {
        Ok(_) => log.record(EventKind::WriteAccepted { op }),
        Err(e) if e.is_stale() => log.record(EventKind::WriteRejected { op }),
        Err(_) => log.record(EventKind::WriteUnknown { op }),
    }
}

struct Names {
    lock: LockKey,
    id: LockId,
}

impl Names {
    fn new() -> Result<Names, String> {
        let e = |e: holdfast_core::NameError| e.to_string();
        Ok(Names {
            lock: LockKey { ns: NamespaceName::new(NS).map_err(e)?, name: LockName::new(LOCK).map_err(e)? },
            id: LockId::parse(&format!("{NS}/{SHARD}/{LOCK}")).map_err(e)?,
        })
    }

    /// The cell (and its region) that served the shard at `epoch`.
    fn cell(&self, owners: &Owners, epoch: u32) -> (CellId, RegionId) {
        let (cell, region) = owners.at(NS, SHARD, epoch);
        let unknown = || (CellId::new("unknown").expect("a valid name"), RegionId::new("unknown").expect("a valid name"));
        match (CellId::new(cell), RegionId::new(region)) {
            (Ok(c), Ok(r)) => (c, r),
            _ => unknown(),
        }
    }
}

/// The fault schedule: at seeded times, one fault, healed a seeded while later:
/// - a Raft node (a cell's or the registry's) cut off from the other nodes (both
///   directions; half the time from the workers and the gateway too: a leader cut off
///   from its followers may still answer them);
/// - a node crashed, restarted later on its memory disk;
/// - a node whose messages are lost while it still hears everyone (one way);
/// - every message to and from a node held, then delivered at once (what its peers
///   see of a paused process);
/// - a node's links slowed to up to 50–400 ms a message;
/// - with `--slow-disk`, a node's disk slowed: each sync of its Raft log takes
///   20–300 ms;
/// - with `--power-cuts`, every node of one group (a cell, or the registry) losing
///   power at once: its disks slowed to 50–300 ms a sync for 0.1–1 s (writes in
///   flight), then every node crashed, each losing the log entries it had written and
///   not synced, and started again 0.5–3 s later on what its disk kept;
/// - a worker (one holding the lock, if any) cut off from every server for longer
///   than its session's TTL: its renewals stop, and a lock it holds expires under it;
/// - with moves, a whole cell cut off from the registry for 3–8 s (longer than its
///   ownership lease) while it keeps its quorum, the gateway and the workers; half
///   the time the gateway is cut off from the registry too (a stale route), so it
///   goes on sending the cell Acquires for a shard the registry may have moved away;
/// - with moves and `--region-faults`, two of the registry's three voters paused
///   (its quorum lost) for 1-6 s; and a third of the cuts from the registry cut the
///   cell's whole region off (for the gateway's region the same as a stale route; for
///   the other, its cell is cut off from the gateway too).
///
/// One such fault at a time. With moves and `--overlapping-faults`, a second one on a
/// node of a group the first leaves alone (crashed, a slow disk, or its links to its
/// own group lost one way, held or slowed), so every group but one hit by a group-wide
/// fault keeps a quorum and the workload progresses.
pub(crate) struct Faults {
    on: bool,
    /// The hosts: its Raft nodes are what node faults hit.
    layout: Layout,
    /// Every Raft node's disk, by host.
    disks: HashMap<String, holdfast_raft::MemoryDisk>,
    /// Disks are slowed now and then (`--slow-disk`).
    slow_disks: bool,
    /// Groups lose power now and then (`--power-cuts`).
    power_cuts: bool,
    /// The registry loses its quorum now and then (`--region-faults`; with moves).
    region_faults: bool,
    /// The registry voters a [`FaultKind::RegistryQuorumLost`] in force has paused.
    paused_voters: Vec<String>,
    /// With moves (`--overlapping-faults`): a second fault, on one node of another
    /// group than the first fault's, while the first is in force; and when the next
    /// one is due.
    overlapping: bool,
    second: Option<(FaultKind, String)>,
    second_next_ms: u64,
    workers: Vec<String>,
    held: Holding,
    next_ms: u64,
    /// The fault now in force: its kind, its target host.
    current: Option<(FaultKind, String)>,
    /// A power cut is past its first phase: the group's nodes are down.
    powered_off: bool,
}

/// How a power cut names the registry's group.
const REGISTRY_GROUP: &str = "registry";

/// The Raft nodes' disks, and which disk faults the schedule draws.
pub(crate) struct Disks {
    pub disks: HashMap<String, holdfast_raft::MemoryDisk>,
    pub slow: bool,
    pub power_cuts: bool,
    /// Not a disk's fault, but drawn the same way: the registry's quorum lost.
    pub region_faults: bool,
    /// Nor this: a second fault at once, in another group (with moves).
    pub overlapping: bool,
}

impl Faults {
    pub(crate) fn new(on: bool, layout: &Layout, disks: Disks, workers: u64, held: Holding, dice: &mut Dice) -> Faults {
        let next_ms = dice.range(1_000, 4_000);
        // Drawn only when on: without it every seed draws what it drew before.
        let overlapping = disks.overlapping && !layout.registry.is_empty();
        let second_next_ms = if overlapping { dice.range(2_000, 6_000) } else { u64::MAX };
        Faults {
            on,
            layout: layout.clone(),
            disks: disks.disks,
            slow_disks: disks.slow,
            power_cuts: disks.power_cuts,
            region_faults: disks.region_faults,
            paused_voters: Vec::new(),
            overlapping,
            second: None,
            second_next_ms,
            workers: (0..workers).map(worker_host).collect(),
            held,
            next_ms,
            current: None,
            powered_off: false,
        }
    }

    /// The hosts of group `name`: a cell's, or the registry's.
    fn group_hosts(&self, name: &str) -> Vec<String> {
        if name == REGISTRY_GROUP {
            return self.layout.registry.clone();
        }
        self.cell_hosts(name).to_vec()
    }

    /// Node `name`'s disk syncs in `latency` from now on.
    fn disk_latency(&self, name: &str, latency: Duration) {
        if let Some(disk) = self.disks.get(name) {
            disk.set_sync_latency(latency);
        }
    }

    /// The hosts of cell `name`.
    fn cell_hosts(&self, name: &str) -> &[String] {
        self.layout.cells.iter().find(|c| c.name == name).map_or(&[], |c| c.hosts.as_slice())
    }

    /// Cell `name` (and with [`FaultKind::StaleRoute`] the gateway) cut off from, or
    /// joined again to, the registry's voters. With [`FaultKind::RegionCut`], the
    /// cell's whole region: the gateway too if it is in that region, else the cell is
    /// cut off from the gateway as well (its clients are in another region).
    fn cut_from_registry(&self, sim: &mut turmoil::Sim<'_>, kind: FaultKind, name: &str, cut: bool) {
        let in_region = self.layout.cells.iter().any(|c| c.name == name && c.region == crate::regions::GATEWAY_REGION);
        let gateway = match kind {
            FaultKind::StaleRoute => self.layout.front(),
            FaultKind::RegionCut if in_region => self.layout.front(),
            _ => Vec::new(),
        };
        for host in self.cell_hosts(name).iter().chain(&gateway) {
            Self::cut(sim, host, &self.layout.registry, cut);
        }
        if kind == FaultKind::RegionCut && !in_region {
            for host in self.cell_hosts(name) {
                Self::cut(sim, host, &self.layout.front(), cut);
            }
        }
    }

    fn cut(sim: &mut turmoil::Sim<'_>, name: &str, from: &[String], cut: bool) {
        for other in from.iter().filter(|o| *o != name) {
            if cut {
                sim.partition(name, other.as_str());
            } else {
                sim.repair(name, other.as_str());
            }
        }
    }

    /// The group a fault's target belongs to: a cell's name, the registry's, or the
    /// target itself (a worker, the gateway).
    fn group_of(&self, target: &str) -> String {
        if target == REGISTRY_GROUP || self.layout.registry.iter().any(|h| h == target) {
            return REGISTRY_GROUP.to_owned();
        }
        self.layout.cells.iter().find(|c| c.name == target || c.hosts.iter().any(|h| h == target)).map_or(target.to_owned(), |c| c.name.to_owned())
    }

    /// The second fault (see [`Faults::overlapping`]): one node of a group the first
    /// fault leaves alone crashed, given a slow disk, or its links to its own group's
    /// other nodes lost one way, held or slowed. It touches no link of the first
    /// fault's hosts, so neither one's heal undoes the other.
    fn step_second(&mut self, sim: &mut turmoil::Sim<'_>, dice: &mut Dice, log: &Log) {
        let now = sim.elapsed();
        let ms = now.as_millis() as u64;
        if !self.overlapping || ms < self.second_next_ms {
            return;
        }
        match self.second {
            Some(_) => {
                self.heal_second(sim, log);
                self.second_next_ms = ms + dice.range(1_000, 5_000);
            }
            None => {
                let Some((_, first)) = &self.current else {
                    self.second_next_ms = ms + 500;
                    return;
                };
                let busy = self.group_of(first);
                let candidates: Vec<String> = self.layout.nodes().into_iter().filter(|n| self.group_of(n) != busy).collect();
                if candidates.is_empty() {
                    self.second_next_ms = ms + 500;
                    return;
                }
                let name = candidates[dice.range(0, candidates.len() as u64) as usize].clone();
                let peers: Vec<String> = self.group_hosts(&self.group_of(&name)).into_iter().filter(|h| *h != name).collect();
                let kinds = [FaultKind::KillNode, FaultKind::PartitionOneway, FaultKind::HoldNode, FaultKind::SlowNode, FaultKind::SlowDisk];
                let kind = kinds[dice.range(0, kinds.len() as u64) as usize];
                match kind {
                    FaultKind::KillNode => sim.crash(name.as_str()),
                    FaultKind::PartitionOneway => peers.iter().for_each(|o| sim.partition_oneway(name.as_str(), o.as_str())),
                    FaultKind::HoldNode => peers.iter().for_each(|o| sim.hold(name.as_str(), o.as_str())),
                    FaultKind::SlowNode => {
                        let slow = Duration::from_millis(dice.range(50, 400));
                        peers.iter().for_each(|o| sim.set_link_max_message_latency(name.as_str(), o.as_str(), slow));
                    }
                    _ => self.disk_latency(&name, Duration::from_millis(dice.range(20, 300))),
                }
                fault(log, now, kind, name.clone());
                self.second = Some((kind, name));
                self.second_next_ms = ms + dice.range(500, 3_000);
            }
        }
    }

    /// Ends the second fault now.
    fn heal_second(&mut self, sim: &mut turmoil::Sim<'_>, log: &Log) {
        let Some((kind, name)) = self.second.take() else { return };
        let peers: Vec<String> = self.group_hosts(&self.group_of(&name)).into_iter().filter(|h| *h != name).collect();
        match kind {
            FaultKind::KillNode => sim.bounce(name.as_str()),
            FaultKind::PartitionOneway => peers.iter().for_each(|o| sim.repair_oneway(name.as_str(), o.as_str())),
            FaultKind::HoldNode => peers.iter().for_each(|o| sim.release(name.as_str(), o.as_str())),
            FaultKind::SlowNode => peers.iter().for_each(|o| sim.set_link_max_message_latency(name.as_str(), o.as_str(), MAX_LATENCY)),
            _ => self.disk_latency(&name, Duration::ZERO),
        }
        fault(log, sim.elapsed(), FaultKind::Heal, name);
    }

    pub(crate) fn step(&mut self, sim: &mut turmoil::Sim<'_>, dice: &mut Dice, log: &Log) {
        if !self.on {
            return;
        }
        self.step_second(sim, dice, log);
        let now = sim.elapsed();
        let ms = now.as_millis() as u64;
        if ms < self.next_ms {
            return;
        }
        let (nodes, front, registry) = (self.layout.nodes(), self.layout.front(), &self.layout.registry);
        let servers: Vec<String> = [nodes.clone(), front.clone()].concat();
        let everyone: Vec<String> = [servers.clone(), self.workers.clone()].concat();
        match self.current.take() {
            Some((kind, name)) => {
                let others = everyone.iter().filter(|o| **o != name);
                match kind {
                    FaultKind::KillNode => sim.bounce(name.as_str()),
                    FaultKind::PauseHolder => Self::cut(sim, &name, &servers, false),
                    FaultKind::PartitionOneway => others.for_each(|o| sim.repair_oneway(name.as_str(), o.as_str())),
                    FaultKind::HoldNode => others.for_each(|o| sim.release(name.as_str(), o.as_str())),
                    FaultKind::SlowNode => others.for_each(|o| sim.set_link_max_message_latency(name.as_str(), o.as_str(), MAX_LATENCY)),
                    FaultKind::SlowDisk => self.disk_latency(&name, Duration::ZERO),
                    FaultKind::CutFromRegistry | FaultKind::StaleRoute | FaultKind::RegionCut => self.cut_from_registry(sim, kind, &name, false),
                    FaultKind::PowerCut if !self.powered_off => {
                        // The power goes: every node of the group at once, with writes in
                        // flight on its slow disks. It stays off a while.
                        for host in self.group_hosts(&name) {
                            sim.crash(host.as_str());
                            if let Some(disk) = self.disks.get(&host) {
                                disk.power_cut();
                                disk.set_sync_latency(Duration::ZERO);
                            }
                        }
                        self.powered_off = true;
                        self.current = Some((kind, name));
                        self.next_ms = ms + dice.range(500, 3_000);
                        return;
                    }
                    FaultKind::PowerCut => {
                        for host in self.group_hosts(&name) {
                            sim.bounce(host.as_str());
                        }
                        self.powered_off = false;
                    }
                    FaultKind::RegistryQuorumLost => {
                        for voter in std::mem::take(&mut self.paused_voters) {
                            everyone.iter().filter(|o| **o != voter).for_each(|o| sim.release(voter.as_str(), o.as_str()));
                        }
                    }
                    _ => Self::cut(sim, &name, &everyone, false),
                }
                fault(log, now, FaultKind::Heal, name);
                self.next_ms = ms + dice.range(500, 3_000);
            }
            None => {
                let node = nodes[dice.range(0, nodes.len() as u64) as usize].clone();
                // With a registry, one fault in ten cuts a whole cell off from it. A slow
                // disk, when asked for, comes last: without it every seed draws the
                // faults it drew before there was one.
                let (slow_disk, power_cuts) = (self.slow_disks, self.power_cuts);
                let outages = self.region_faults && !registry.is_empty();
                let kinds = 9 + u64::from(!registry.is_empty()) + u64::from(slow_disk) + u64::from(power_cuts) + u64::from(outages);
                let power_cut_at = kinds - 1 - u64::from(outages);
                // The optional kinds come last, in the order they were added: without
                // them every seed draws the faults it drew before they existed.
                let slow_disk_at = 9 + u64::from(!registry.is_empty());
                let (kind, name, lasts) = match dice.range(0, kinds) {
                    0 | 1 => (FaultKind::PartitionRegion, node, dice.range(500, 4_000)),
                    2 => (FaultKind::KillNode, node, dice.range(500, 4_000)),
                    3 => (FaultKind::PartitionOneway, node, dice.range(500, 4_000)),
                    4 => (FaultKind::HoldNode, node, dice.range(500, 3_000)),
                    5 => (FaultKind::SlowNode, node, dice.range(1_000, 5_000)),
                    k if slow_disk && k == slow_disk_at => (FaultKind::SlowDisk, node, dice.range(1_000, 5_000)),
                    k if outages && k == kinds - 1 => {
                        // Two of the three voters paused (what SIGSTOP does to them; their
                        // messages are held and delivered at the heal), often for longer
                        // than the 3 s ownership lease: every cell then stops granting,
                        // and after it cells renew and serve again.
                        let keep = dice.range(0, registry.len() as u64) as usize;
                        self.paused_voters = registry.iter().enumerate().filter(|(i, _)| *i != keep).map(|(_, v)| v.clone()).collect();
                        (FaultKind::RegistryQuorumLost, REGISTRY_GROUP.to_owned(), dice.range(1_000, 6_000))
                    }
                    k if power_cuts && k == power_cut_at => {
                        let mut groups: Vec<String> = self.layout.cells.iter().map(|c| c.name.to_owned()).collect();
                        if !registry.is_empty() {
                            groups.push(REGISTRY_GROUP.to_owned());
                        }
                        let group = groups[dice.range(0, groups.len() as u64) as usize].clone();
                        (FaultKind::PowerCut, group, dice.range(100, 1_000))
                    }
                    9 => {
                        let cell = self.layout.cells[dice.range(0, self.layout.cells.len() as u64) as usize].name.to_owned();
                        // With `--region-faults`, a third of them cut the cell's whole region.
                        let kind = match dice.range(0, if outages { 3 } else { 2 }) {
                            0 => FaultKind::CutFromRegistry,
                            1 => FaultKind::StaleRoute,
                            _ => FaultKind::RegionCut,
                        };
                        (kind, cell, dice.range(3_000, 8_000))
                    }
                    _ => {
                        // A worker holding the lock if there is one, else any.
                        let holders: Vec<u64> = self.held.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
                        let w =
                            if holders.is_empty() { dice.range(0, self.workers.len() as u64) } else { holders[dice.range(0, holders.len() as u64) as usize] };
                        (FaultKind::PauseHolder, worker_host(w), dice.range(2_500, 5_000))
                    }
                };
                // A first fault in the group the second one is in ends the second one
                // first: two faults never change the same links.
                if self.second.as_ref().is_some_and(|(_, n)| self.group_of(n) == self.group_of(&name)) {
                    self.heal_second(sim, log);
                }
                let others = everyone.iter().filter(|o| **o != name);
                match kind {
                    FaultKind::KillNode => sim.crash(name.as_str()),
                    FaultKind::PauseHolder => Self::cut(sim, &name, &servers, true),
                    FaultKind::PartitionOneway => others.for_each(|o| sim.partition_oneway(name.as_str(), o.as_str())),
                    FaultKind::HoldNode => others.for_each(|o| sim.hold(name.as_str(), o.as_str())),
                    FaultKind::SlowNode => {
                        let slow = Duration::from_millis(dice.range(50, 400));
                        others.for_each(|o| sim.set_link_max_message_latency(name.as_str(), o.as_str(), slow));
                    }
                    FaultKind::SlowDisk => self.disk_latency(&name, Duration::from_millis(dice.range(20, 300))),
                    FaultKind::CutFromRegistry | FaultKind::StaleRoute | FaultKind::RegionCut => self.cut_from_registry(sim, kind, &name, true),
                    FaultKind::RegistryQuorumLost => {
                        for voter in &self.paused_voters {
                            everyone.iter().filter(|o| *o != voter).for_each(|o| sim.hold(voter.as_str(), o.as_str()));
                        }
                    }
                    FaultKind::PowerCut => {
                        // Writes in flight first: the disks of the group slow down.
                        for host in self.group_hosts(&name) {
                            self.disk_latency(&host, Duration::from_millis(dice.range(50, 300)));
                        }
                    }
                    _ => {
                        Self::cut(sim, &name, &nodes, true);
                        if dice.range(0, 2) == 0 {
                            Self::cut(sim, &name, &[front, self.workers.clone()].concat(), true);
                        }
                    }
                }
                fault(log, now, kind, name.clone());
                self.current = Some((kind, name));
                self.next_ms = ms + lasts;
            }
        }
    }
}
