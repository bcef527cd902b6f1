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
async fn adopt(transport: &Transport) -> Result<(), String> {
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

impl Workload {
    pub(crate) async fn run(self, seed: u64, log: Log, grants: Arc<AtomicUsize>) -> Result<(), String> {
        let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
        adopt(&transport).await?;
        let resource = Arc::new(MemoryFence::new("ledger"));
        let mut workers = Vec::new();
        for w in 0..self.workers {
            let (transport, log, grants, resource, me) = (transport.clone(), log.clone(), grants.clone(), resource.clone(), self.clone());
            let dice = Dice::new(seed.wrapping_add(w + 1));
            workers.push(tokio::spawn(async move { me.worker(w, dice, &transport, &log, &grants, &resource).await }));
        }
        for w in workers {
            w.await.map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    async fn worker(&self, w: u64, mut dice: Dice, transport: &Transport, log: &Log, grants: &AtomicUsize, resource: &MemoryFence) -> Result<(), String> {
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
            let op = log_op(log);
            log.record(EventKind::GrantInvoked { op, lock: names.lock.clone(), session: sref.clone() });
            match session.acquire(LOCK, AcquireOptions::new().wait(Duration::from_secs(5))).await {
                Ok(lock) => {
                    let token = lock.token();
                    grants.fetch_add(1, Ordering::Relaxed);
                    log.record(EventKind::GrantOk {
                        op,
                        lock: names.lock.clone(),
                        session: sref.clone(),
                        token,
                        region: names.region.clone(),
                        cell: names.cell.clone(),
                    });
                    tokio::time::sleep(Duration::from_millis(dice.range(1, 300))).await;
                    write(log, resource, &names, token);
                    let op = log_op(log);
                    log.record(EventKind::ReleaseInvoked { op, lock: names.lock.clone(), session: sref, token });
                    match lock.release().await {
                        Ok(()) => log.record(EventKind::ReleaseOk { op }),
                        Err(_) => log.record(EventKind::ReleaseUnknown { op }),
                    }
                }
                // Whether a failed acquire was granted is unknown to the caller (a
                // grant whose answer was lost): the checker treats it so.
                Err(_) => log.record(EventKind::GrantUnknown { op }),
            }
            let _ = session.close().await;
            tokio::time::sleep(Duration::from_millis(dice.range(0, 200))).await;
        }
        Ok(())
    }
}

/// An op id: the history's own counter (ops are numbered in the order they start).
fn log_op(log: &Log) -> holdfast_drills::history::OpId {
    log.next_op()
}

fn write(log: &Log, resource: &MemoryFence, names: &Names, token: FencingToken) {
    let op = log_op(log);
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

/// The fault schedule: at seeded times, cut one node off from the others (both
/// directions) or crash it, and heal or restart it a seeded while later. At most one
/// node is faulty at a time, so the cell keeps a quorum and the workload progresses.
pub(crate) struct Faults {
    on: bool,
    next_ms: u64,
    /// The node now faulty, how, and when it heals.
    current: Option<(u64, FaultKind, u64)>,
}

impl Faults {
    pub(crate) fn new(on: bool, dice: &mut Dice) -> Faults {
        Faults { on, next_ms: dice.range(1_000, 4_000), current: None }
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
        match self.current.take() {
            Some((node, kind, _)) => {
                let name = host(node);
                match kind {
                    FaultKind::KillNode => sim.bounce(name.as_str()),
                    _ => {
                        for other in (1..=NODES).filter(|&o| o != node) {
                            sim.repair(name.as_str(), host(other).as_str());
                        }
                        sim.repair(name.as_str(), "client");
                    }
                }
                fault(log, now, FaultKind::Heal, name);
                self.next_ms = ms + dice.range(500, 3_000);
            }
            None => {
                let node = dice.range(1, NODES + 1);
                let name = host(node);
                let kind = if dice.range(0, 3) == 0 { FaultKind::KillNode } else { FaultKind::PartitionRegion };
                match kind {
                    FaultKind::KillNode => sim.crash(name.as_str()),
                    _ => {
                        for other in (1..=NODES).filter(|&o| o != node) {
                            sim.partition(name.as_str(), host(other).as_str());
                        }
                        // Half the time the clients still reach it (a leader cut off
                        // from its followers, still answering).
                        if dice.range(0, 2) == 0 {
                            sim.partition(name.as_str(), "client");
                        }
                    }
                }
                fault(log, now, kind, name);
                let heal = ms + dice.range(500, 4_000);
                self.current = Some((node, kind, heal));
                self.next_ms = heal;
            }
        }
    }
}
