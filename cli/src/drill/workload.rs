//! The drill's workload: workers that take locks through the SDK (any gateway, their
//! own region's first) and write to the fenced resource with their tokens, recording
//! every step.
//!
//! A worker holds its lock for a moment, writing twice, then releases it. Every
//! fourth worker is a *staller*: on every third hold it hangs — no progress, so the
//! SDK stops renewing and the session expires — then wakes and writes with its old
//! token, as a paused process would. Those late writes are what the fence must
//! refuse (and what a planted unfenced resource lets through).

use super::observe::Owners;
use super::resource::Resource;
use holdfast_client::{AcquireOptions, Client, Error, LossReason, Session, SessionOptions};
use holdfast_core::{CellId, EndReason, ErrorCode, FencingToken, LockName, NamespaceName, RegionId};
use holdfast_drills::history::{EventKind, LockKey, SessionRef};
use holdfast_drills::record::Recorder;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct Spec {
    pub ns: String,
    pub shards: Vec<String>,
    pub locks_per_shard: usize,
    pub workers: usize,
    pub ttl: Duration,
    /// Gateways, one list per worker region (that region's gateway first).
    pub gateways: Vec<Vec<String>>,
}

impl Spec {
    /// (ns, shard, lock) of every lock the workload uses.
    pub fn locks(&self) -> Vec<(String, String, String)> {
        let mut v = Vec::new();
        for shard in &self.shards {
            for l in 0..self.locks_per_shard {
                // Lock names are unique in the namespace: the history names a lock by
                // (namespace, name), and the checker must not mix two shards' locks.
                v.push((self.ns.clone(), shard.clone(), format!("{shard}-job-{l}")));
            }
        }
        v
    }
}

/// What the workers did, for the report and the test.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub grants: u64,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    pub stalls: u64,
}

pub struct Workload {
    handles: Vec<tokio::task::JoinHandle<Tally>>,
    stop: CancellationToken,
}

impl Workload {
    pub fn start(spec: &Spec, rec: Arc<Recorder>, owners: Owners, resource: Arc<Resource>) -> Workload {
        let stop = CancellationToken::new();
        let locks = spec.locks();
        let handles = (0..spec.workers)
            .map(|i| {
                let (ns, shard, lock) = locks[i % locks.len()].clone();
                let w = Worker {
                    index: i,
                    ns,
                    shard,
                    lock,
                    ttl: spec.ttl,
                    staller: i % 4 == 3,
                    gateways: spec.gateways[i % spec.gateways.len()].clone(),
                    rec: rec.clone(),
                    owners: owners.clone(),
                    resource: resource.clone(),
                    stop: stop.clone(),
                };
                tokio::spawn(w.run())
            })
            .collect();
        Workload { handles, stop }
    }

    /// Stops the workers (each finishes its current step) and sums what they did.
    pub async fn stop(self) -> Tally {
        self.stop.cancel();
        let mut t = Tally::default();
        for h in self.handles {
            if let Ok(w) = h.await {
                t.grants += w.grants;
                t.writes_accepted += w.writes_accepted;
                t.writes_rejected += w.writes_rejected;
                t.stalls += w.stalls;
            }
        }
        t
    }
}

struct Worker {
    index: usize,
    ns: String,
    shard: String,
    lock: String,
    ttl: Duration,
    staller: bool,
    gateways: Vec<String>,
    rec: Arc<Recorder>,
    owners: Owners,
    resource: Arc<Resource>,
    stop: CancellationToken,
}

/// A refusal with a stable code other than UNAVAILABLE is definite: nothing was
/// granted. No answer, or UNAVAILABLE ("outcome unknown"), may have granted.
fn definite(e: &Error) -> Option<ErrorCode> {
    e.code().filter(|c| *c != ErrorCode::Unavailable)
}

fn id<T>(r: Result<T, holdfast_core::NameError>) -> Option<T> {
    r.ok()
}

impl Worker {
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    async fn run(self) -> Tally {
        let mut tally = Tally::default();
        let (Some(ns), Some(name)) = (id(NamespaceName::new(self.ns.as_str())), id(LockName::new(self.lock.as_str()))) else { return tally };
        let key = LockKey { ns, name };
        let client = loop {
            let Ok(transport) = super::playground::transport() else { return tally };
            match Client::connect_via(transport, &self.gateways, holdfast_client::ClientConfig::default()).await {
                Ok(c) => break c,
                Err(_) if self.pause(Duration::from_millis(500)).await => continue,
                Err(_) => return tally,
            }
        };
        let mut holds = 0u64;
        while !self.stop.is_cancelled() {
            let mut opts = SessionOptions::new(self.ns.as_str(), self.shard.as_str(), self.ttl).label(format!("drill-worker-{}", self.index));
            if self.staller {
                opts = opts.progress_timeout(self.ttl / 3);
            }
            let created_ms = self.rec.ms();
            let session = match tokio::time::timeout(Duration::from_secs(10), client.create_session(opts)).await {
                Ok(Ok(s)) => s,
                _ => {
                    if !self.pause(Duration::from_millis(300)).await {
                        break;
                    }
                    continue;
                }
            };
            let sref = SessionRef {
                cell: CellId::new(self.owners.cell_now(&self.ns, &self.shard)).unwrap_or_else(|_| CellId::new("unknown").expect("a valid name")),
                id: session.id(),
            };
            while !self.stop.is_cancelled() && !session.is_lost() {
                session.progress();
                let Some(lock) = self.acquire(&session, &key, &sref).await else {
                    if !self.pause(Duration::from_millis(50)).await {
                        break;
                    }
                    continue;
                };
                tally.grants += 1;
                holds += 1;
                let stall = self.staller && holds.is_multiple_of(3);
                self.hold(lock, &key, &sref, stall, &mut tally).await;
            }
            if let Some(reason) = session.loss_reason() {
                self.record_loss(&sref, created_ms, reason);
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), session.close()).await;
        }
        tally
    }

    async fn acquire(&self, session: &Session, key: &LockKey, sref: &SessionRef) -> Option<holdfast_client::Lock> {
        let op = self.rec.op();
        self.rec.record(EventKind::GrantInvoked { op, lock: key.clone(), session: sref.clone() });
        let r = tokio::time::timeout(Duration::from_secs(10), session.acquire(&self.lock, AcquireOptions::new().wait(Duration::from_secs(2)))).await;
        match r {
            Ok(Ok(lock)) => {
                let token = lock.token();
                let (cell, region) = self.owners.at(&self.ns, &self.shard, token.epoch().0);
                self.rec.record(EventKind::GrantOk {
                    op,
                    lock: key.clone(),
                    session: sref.clone(),
                    token,
                    region: RegionId::new(region).unwrap_or_else(|_| RegionId::new("unknown").expect("a valid name")),
                    cell: CellId::new(cell).unwrap_or_else(|_| CellId::new("unknown").expect("a valid name")),
                });
                Some(lock)
            }
            Ok(Err(e)) => {
                match definite(&e) {
                    Some(code) => self.rec.record(EventKind::GrantFailed { op, code: code.as_str().to_owned() }),
                    None => self.rec.record(EventKind::GrantUnknown { op }),
                }
                None
            }
            Err(_) => {
                self.rec.record(EventKind::GrantUnknown { op });
                None
            }
        }
    }

    fn write(&self, lock: &holdfast_client::Lock, key: &LockKey, token: FencingToken, tally: &mut Tally) {
        let op = self.rec.op();
        self.rec.record(EventKind::WriteAttempt { op, lock: key.clone(), token, resource: self.resource.name.clone() });
        let value = format!("worker-{}@{}", self.index, token.0);
        if self.resource.write(lock.shard(), lock.name(), token, value.as_bytes()) {
            tally.writes_accepted += 1;
            self.rec.record(EventKind::WriteAccepted { op });
        } else {
            tally.writes_rejected += 1;
            self.rec.record(EventKind::WriteRejected { op });
        }
    }

    async fn hold(&self, lock: holdfast_client::Lock, key: &LockKey, sref: &SessionRef, stall: bool, tally: &mut Tally) {
        let token = lock.token();
        self.write(&lock, key, token, tally);
        if stall {
            // Hang without progress: the SDK stops renewing, the cell expires the
            // session after its TTL and grants the lock to another worker.
            tally.stalls += 1;
            // From now on the cell may expire the session at any moment.
            self.rec.record(EventKind::SessionExpired { session: sref.clone(), at_ms: self.rec.ms() });
            self.pause(self.ttl * 2 + Duration::from_millis(500)).await;
            // Wake up and write anyway, as a paused process would.
            self.write(&lock, key, token, tally);
            std::mem::forget(lock); // its session is gone; nothing to release
            return;
        }
        let ms = 50 + (rand::random::<u64>() % 150);
        self.pause(Duration::from_millis(ms)).await;
        // Deliberately no lease check before the second write: the fence is the
        // safety net under test, the loss signal only narrows the window.
        self.write(&lock, key, token, tally);
        if let Some(why) = lock.session().loss_reason() {
            let reason = if why == LossReason::Moved { EndReason::Moved } else { EndReason::Expired };
            self.rec.record(EventKind::HoldEnded { lock: key.clone(), token, reason });
            return;
        }
        let op = self.rec.op();
        self.rec.record(EventKind::ReleaseInvoked { op, lock: key.clone(), session: sref.clone(), token });
        match tokio::time::timeout(Duration::from_secs(10), lock.release()).await {
            Ok(Ok(())) => self.rec.record(EventKind::ReleaseOk { op }),
            Ok(Err(e)) => match definite(&e) {
                Some(code) => self.rec.record(EventKind::ReleaseFailed { op, code: code.as_str().to_owned() }),
                None => self.rec.record(EventKind::ReleaseUnknown { op }),
            },
            Err(_) => self.rec.record(EventKind::ReleaseUnknown { op }),
        }
    }

    /// The session is gone. What the checker may assume: a moved shard ended its holds
    /// (`HoldEnded` is recorded where the hold was dropped); any other loss may mean
    /// the cell expired the session — conservatively, at any time since it was created.
    fn record_loss(&self, sref: &SessionRef, created_ms: u64, reason: LossReason) {
        if reason != LossReason::Moved && reason != LossReason::Closed {
            self.rec.record(EventKind::SessionExpired { session: sref.clone(), at_ms: created_ms });
        }
    }
}
