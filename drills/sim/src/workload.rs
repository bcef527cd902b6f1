//! The workload (workers taking one lock through the SDK and writing through the
//! fencing helper) and the fault schedule, both drawn from the seed.

use crate::{fault, host, Dice, Log, CLIENT_PORT, NODES};
use holdfast_client::{AcquireOptions, Client, ClientConfig, SessionOptions};
use holdfast_core::{CellId, FencingToken, LockName, NamespaceName, RegionId};
use holdfast_drills::history::{EventKind, FaultKind, LockKey, SessionRef};
use holdfast_fence::{FencedStore, LockId, MemoryFence};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_rpc::Transport;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const CELL: &str = "sim-1";
/// The longest a message takes on a healthy link.
pub(crate) const MAX_LATENCY: Duration = Duration::from_millis(5);
pub(crate) const REGION: &str = "sim";
const NS: &str = "sim";
const SHARD: &str = "default";
const LOCK: &str = "ledger";

/// What the workers do.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Workers, each an SDK client of its own.
    pub workers: u64,
    /// Sessions each worker opens, one after the other; each takes the lock once.
    pub rounds: u64,
    /// Session TTL.
    pub ttl: Duration,
}

impl Default for Workload {
    fn default() -> Self {
        Workload { workers: 3, rounds: 25, ttl: Duration::from_secs(2) }
    }
}

fn endpoints() -> Vec<String> {
    (1..=NODES).map(|n| format!("{}:{CLIENT_PORT}", host(n))).collect()
}

/// The cell serves the namespace's shard once its leader applied the namespace and
/// adopted the shard (there is no registry in this simulation; epoch 1 throughout).
async fn adopt(transport: &Transport, lock_delay_ms: Option<u64>) -> Result<(), String> {
    for attempt in 0.. {
        for ep in endpoints() {
            let Ok(ch) = transport.channel(&ep) else { continue };
            let mut admin = CellAdminClient::new(ch);
            let config = apb::NamespaceConfig {
                name: NS.into(),
                owner: "sim".into(),
                intent: holdfast_proto::lock::v1::Intent::Correctness as i32,
                ttl_min_ms: 500,
                ttl_max_ms: 60_000,
                lock_delay_ms,
                version: 1,
                ..Default::default()
            };
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
    pub(crate) async fn admin(ready: Ready, lock_delay_ms: Option<u64>) -> Result<(), String> {
        let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
        adopt(&transport, lock_delay_ms).await?;
        ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Worker `w`'s host: an SDK client of its own, taking the lock `rounds` times.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run_worker(
        self,
        w: u64,
        seed: u64,
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
        self.worker(w, Dice::new(seed.wrapping_add(w + 1)), &transport, &log, &grants, &resource, &held).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn worker(
        &self,
        w: u64,
        mut dice: Dice,
        transport: &Transport,
        log: &Log,
        grants: &AtomicUsize,
        resource: &MemoryFence,
        held: &Holding,
    ) -> Result<(), String> {
        let client = Client::connect_via(transport, &endpoints(), ClientConfig::default()).await.map_err(|e| e.to_string())?;
        let names = Names::new()?;
        for round in 0..self.rounds {
            let session = match client.create_session(SessionOptions::new(NS, SHARD, self.ttl).label(format!("worker-{w}"))).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(w, round, error = %e, "no session");
                    tokio::time::sleep(Duration::from_millis(dice.range(50, 500))).await;
                    continue;
                }
            };
            let sref = SessionRef { cell: names.cell.clone(), id: session.id() };
            let op = log.next_op();
            log.record(EventKind::GrantInvoked { op, lock: names.lock.clone(), session: sref.clone() });
            match session.acquire(LOCK, AcquireOptions::new().wait(Duration::from_secs(5))).await {
                Ok(lock) => {
                    let token = lock.token();
                    grants.fetch_add(1, Ordering::Relaxed);
                    holding(held, w, true);
                    log.record(EventKind::GrantOk {
                        op,
                        lock: names.lock.clone(),
                        session: sref.clone(),
                        token,
                        region: names.region.clone(),
                        cell: names.cell.clone(),
                    });
                    // Now and then a long hold: if the worker is cut off meanwhile, its
                    // session expires under it, another worker takes the lock, and this
                    // write comes late with the old token (the fence must refuse it).
                    let hold = if dice.range(0, 3) == 0 { dice.range(2_500, 4_000) } else { dice.range(1, 300) };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    write(log, resource, &names, token);
                    holding(held, w, false);
                    let op = log.next_op();
                    log.record(EventKind::ReleaseInvoked { op, lock: names.lock.clone(), session: sref, token });
                    match lock.release().await {
                        Ok(()) => log.record(EventKind::ReleaseOk { op }),
                        Err(_) => log.record(EventKind::ReleaseUnknown { op }),
                    }
                }
                // Whether a failed acquire was granted is unknown to the caller (a
                // grant whose answer was lost): the checker treats it so.
                Err(e) => {
                    tracing::debug!(w, error = %e, "acquire failed");
                    log.record(EventKind::GrantUnknown { op });
                }
            }
            let _ = session.close().await;
            tokio::time::sleep(Duration::from_millis(dice.range(0, 200))).await;
        }
        Ok(())
    }
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
    cell: CellId,
    region: RegionId,
}

impl Names {
    fn new() -> Result<Names, String> {
        let e = |e: holdfast_core::NameError| e.to_string();
        Ok(Names {
            lock: LockKey { ns: NamespaceName::new(NS).map_err(e)?, name: LockName::new(LOCK).map_err(e)? },
            id: LockId::parse(&format!("{NS}/{SHARD}/{LOCK}")).map_err(e)?,
            cell: CellId::new(CELL).map_err(e)?,
            region: RegionId::new(REGION).map_err(e)?,
        })
    }
}

/// The fault schedule: at seeded times, one fault, healed a seeded while later:
/// - a cell node cut off from the other two (both directions; half the time from the
///   workers too: a leader cut off from its followers may still answer them);
/// - a cell node crashed, restarted later on its memory disk;
/// - a cell node whose messages are lost while it still hears everyone (one way);
/// - every message to and from a cell node held, then delivered at once (what its
///   peers see of a paused process);
/// - a cell node's links slowed to up to 50–400 ms a message;
/// - a worker (one holding the lock, if any) cut off from every cell node for longer
///   than its session's TTL: its renewals stop, and a lock it holds expires under it.
///
/// At most one fault at a time, so the cell keeps a quorum and the workload progresses.
pub(crate) struct Faults {
    on: bool,
    workers: u64,
    held: Holding,
    next_ms: u64,
    /// The fault now in force: its kind, its target host.
    current: Option<(FaultKind, String)>,
}

impl Faults {
    pub(crate) fn new(on: bool, workers: u64, held: Holding, dice: &mut Dice) -> Faults {
        Faults { on, workers, held, next_ms: dice.range(1_000, 4_000), current: None }
    }

    fn cut(sim: &mut turmoil::Sim<'_>, name: &str, from: &[String], cut: bool) {
        for other in from {
            if cut {
                sim.partition(name, other.as_str());
            } else {
                sim.repair(name, other.as_str());
            }
        }
    }

    pub(crate) fn step(&mut self, sim: &mut turmoil::Sim<'_>, dice: &mut Dice, log: &Log) {
        if !self.on {
            return;
        }
        let now = sim.elapsed();
        let ms = now.as_millis() as u64;
        if ms < self.next_ms {
            return;
        }
        let cells: Vec<String> = (1..=NODES).map(host).collect();
        let workers: Vec<String> = (0..self.workers).map(worker_host).collect();
        match self.current.take() {
            Some((kind, name)) => {
                let everyone = [cells.clone(), workers.clone()].concat();
                match kind {
                    FaultKind::KillNode => sim.bounce(name.as_str()),
                    FaultKind::PauseHolder => Self::cut(sim, &name, &cells, false),
                    FaultKind::PartitionOneway => {
                        for other in everyone.iter().filter(|o| **o != name) {
                            sim.repair_oneway(name.as_str(), other.as_str());
                        }
                    }
                    FaultKind::HoldNode => {
                        for other in everyone.iter().filter(|o| **o != name) {
                            sim.release(name.as_str(), other.as_str());
                        }
                    }
                    FaultKind::SlowNode => {
                        for other in everyone.iter().filter(|o| **o != name) {
                            sim.set_link_max_message_latency(name.as_str(), other.as_str(), MAX_LATENCY);
                        }
                    }
                    _ => Self::cut(sim, &name, &everyone, false),
                }
                fault(log, now, FaultKind::Heal, name);
                self.next_ms = ms + dice.range(500, 3_000);
            }
            None => {
                let node = host(dice.range(1, NODES + 1));
                let (kind, name, lasts) = match dice.range(0, 9) {
                    0 | 1 => (FaultKind::PartitionRegion, node, dice.range(500, 4_000)),
                    2 => (FaultKind::KillNode, node, dice.range(500, 4_000)),
                    3 => (FaultKind::PartitionOneway, node, dice.range(500, 4_000)),
                    4 => (FaultKind::HoldNode, node, dice.range(500, 3_000)),
                    5 => (FaultKind::SlowNode, node, dice.range(1_000, 5_000)),
                    _ => {
                        // A worker holding the lock if there is one, else any.
                        let holders: Vec<u64> = self.held.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
                        let w = if holders.is_empty() { dice.range(0, self.workers) } else { holders[dice.range(0, holders.len() as u64) as usize] };
                        (FaultKind::PauseHolder, worker_host(w), dice.range(2_500, 5_000))
                    }
                };
                let others: Vec<String> = [cells.clone(), workers.clone()].concat().into_iter().filter(|o| *o != name).collect();
                match kind {
                    FaultKind::KillNode => sim.crash(name.as_str()),
                    FaultKind::PauseHolder => Self::cut(sim, &name, &cells, true),
                    FaultKind::PartitionOneway => {
                        for other in &others {
                            sim.partition_oneway(name.as_str(), other.as_str());
                        }
                    }
                    FaultKind::HoldNode => {
                        for other in &others {
                            sim.hold(name.as_str(), other.as_str());
                        }
                    }
                    FaultKind::SlowNode => {
                        let slow = Duration::from_millis(dice.range(50, 400));
                        for other in &others {
                            sim.set_link_max_message_latency(name.as_str(), other.as_str(), slow);
                        }
                    }
                    _ => {
                        let peers: Vec<String> = cells.iter().filter(|c| **c != name).cloned().collect();
                        Self::cut(sim, &name, &peers, true);
                        if dice.range(0, 2) == 0 {
                            Self::cut(sim, &name, &workers, true);
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
