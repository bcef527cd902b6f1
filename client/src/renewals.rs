//! [`Renewals`]: the renewals of a client's sessions of one shard, sent as batches on
//! one KeepAlive stream instead of one stream (or one message) each.
//!
//! A renewal costs what a message costs (`docs/benchmarks.md`, "Renewals": the handler
//! is a few per cent of a cell leader's time, the HTTP/2 and TLS framing around it the
//! rest), so a process with many sessions renews them together:
//!
//! - on one stream per shard (and epoch), kept open: a cell answers each message of a
//!   KeepAlive stream in order, and a gateway forwards the whole stream to the shard's
//!   cell;
//! - in one message for the renewals that come due together: the first renewal of a
//!   batch waits [`LINGER`] for others, then all go as one message, the first in
//!   `session_id` and the rest in `more` (at most [`MAX_RENEWAL_BATCH`] a message).
//!   Sessions renew on a grid of the client's clock (`session.rs`), so those of one TTL
//!   come due together. Each session of `more` gets its own answer: one expired does
//!   not fail the others.
//!
//! The stream never pins a session to a deposed leader: a cell answers a renewal it
//! cannot confirm under its leader lease with `NOT_LEADER` and ends the stream. Any end
//! of the stream, and an answer that does not come in time, retires it; the renewal
//! fails like a failed call, and the session's retry (through the wire edge's
//! leader-following) opens a new stream. The first session of the oldest message
//! waiting on a stream that ends with an error gets that error (it is the renewal the
//! cell refused); every other waiting renewal gets `UNAVAILABLE` and retries at once.
//!
//! A cell older than batching answers a message's first session only; the client then
//! sends one renewal a message from then on.

use holdfast_core::{ErrorCode, ShardKey, MAX_RENEWAL_BATCH};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_rpc::status::status;
use holdfast_rpc::Channel;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

type Answer = Result<pb::KeepAliveResponse, Status>;
/// A renewal waiting for its answer: the session and where its answer goes.
type Waiter = (u64, oneshot::Sender<Answer>);
/// A stream's shard, and the epoch its sessions were created at.
type Key = (ShardKey, u32);

/// Messages sent on one stream and not yet answered, at most: a cell answers in
/// microseconds, so this is only reached when it stopped answering.
const MAX_IN_FLIGHT: usize = 1024;

/// How long the first renewal of a batch waits for others due with it. Sessions on
/// the same renewal grid wake in the same timer tick; this covers their scheduling.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// The open renewal streams of one client, by shard and the epoch its sessions were
/// created at. Sessions of an older epoch (left behind by a move) never share a stream
/// with newer ones: a gateway routes a stream by its first message's epoch, and the
/// shard's new owner answers such a session `NOT_OWNER` (moved) only when the renewal
/// arrives with its own epoch; on a newer session's stream it would be an unknown id.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    /// Ordered: streams end in one order when the client drops (docs/simulation.md).
    streams: Mutex<BTreeMap<Key, Arc<Stream>>>,
    /// Renewals waiting out the [`LINGER`] of their batch, by stream.
    pending: Mutex<BTreeMap<Key, Pending>>,
    /// A cell answered a batch with its first session only: it predates batching.
    singles: AtomicBool,
    /// KeepAlive messages sent.
    sent: AtomicU64,
    /// The origin of the renewal grid ([`Renewals::on_grid`]): this client's first
    /// renewal schedule.
    origin: OnceLock<Instant>,
}

/// One batch gathering: its renewals and the KeepAlive message's shard.
#[derive(Debug)]
struct Pending {
    shard: Option<pb::ShardRef>,
    waiters: Vec<Waiter>,
}

/// One open KeepAlive stream. The request side lives only here (and in calls sending
/// on it): once the stream is retired and they are done, the request side ends, the cell
/// ends the stream, and its reader stops.
#[derive(Debug)]
struct Stream {
    requests: mpsc::Sender<pb::KeepAliveRequest>,
    waiting: Arc<Waiting>,
}

/// Messages sent on a stream and not yet answered, in the order sent (the cell answers
/// in it), each with its renewals in the message's order; once the stream ended,
/// nothing more is sent on it.
#[derive(Debug, Default)]
struct Waiting(Mutex<Queue>);

#[derive(Debug, Default)]
struct Queue {
    ended: bool,
    queue: VecDeque<Vec<Waiter>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unavailable(why: &str) -> Status {
    Status::unavailable(why.to_owned())
}

/// Answers every renewal of `waiters` with `UNAVAILABLE`: they retry at once.
fn fail_all(waiters: impl IntoIterator<Item = Waiter>, why: &str) {
    for (_, w) in waiters {
        let _ = w.send(Err(unavailable(why)));
    }
}

impl Waiting {
    /// The stream ended: the first renewal of the oldest waiting message gets `error`
    /// (if any), every other one `UNAVAILABLE`.
    fn fail(&self, error: Option<Status>) {
        let mut waiting = {
            let mut q = lock(&self.0);
            q.ended = true;
            std::mem::take(&mut q.queue)
        };
        if let (Some(e), Some(oldest)) = (error, waiting.front_mut()) {
            let (_, first) = oldest.remove(0);
            let _ = first.send(Err(e));
        }
        fail_all(waiting.into_iter().flatten(), "the renewal stream ended before this renewal was answered");
    }
}

impl Stream {
    /// Sends one message, queued for its answers in the same critical section, so the
    /// queue's order is the order on the wire. Gives the renewals back if the stream
    /// ended or is full.
    fn send(&self, request: pb::KeepAliveRequest, waiters: Vec<Waiter>) -> Result<(), Vec<Waiter>> {
        let mut q = lock(&self.waiting.0);
        if q.ended || self.requests.try_send(request).is_err() {
            return Err(waiters);
        }
        q.queue.push_back(waiters);
        Ok(())
    }
}

/// The answer to one renewal of a batch, as its own call would have answered it.
fn answer_of(r: pb::Renewed) -> Answer {
    if r.code.is_empty() {
        return Ok(pb::KeepAliveResponse { session_id: r.session_id, ttl_remaining_ms: r.ttl_remaining_ms, more: vec![] });
    }
    Err(status(ErrorCode::parse(&r.code).unwrap_or(ErrorCode::Unavailable), r.message))
}

impl Renewals {
    /// Streams open now.
    pub(crate) fn open(&self) -> usize {
        lock(&self.streams).len()
    }

    /// KeepAlive messages sent so far.
    pub(crate) fn messages(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// `t` moved back onto this client's renewal grid (multiples of `step` from its
    /// origin), so that sessions of one TTL come due in the same instant and renew in
    /// one message. Never later than `t`.
    pub(crate) fn on_grid(&self, t: Instant, step: Duration) -> Instant {
        let origin = *self.origin.get_or_init(|| t);
        if step.is_zero() || t <= origin {
            return t;
        }
        let steps = u32::try_from((t - origin).as_nanos() / step.as_nanos()).unwrap_or(u32::MAX);
        step.checked_mul(steps).map_or(t, |d| origin + d)
    }

    /// Retires the stream whose queue is `waiting` (if it is still the shard's): the
    /// next renewal opens another.
    fn retire(&self, key: &Key, waiting: &Arc<Waiting>) {
        let mut streams = lock(&self.streams);
        if streams.get(key).is_some_and(|s| Arc::ptr_eq(&s.waiting, waiting)) {
            streams.remove(key);
        }
    }

    /// Renews one session: in the batch gathering for its shard's (and epoch's) stream,
    /// sent on the open stream or on a new one opened at `svc` (the node the wire edge
    /// chose for the attempt that started the batch). Answers within `within` or fails,
    /// retiring the stream, so a stuck node costs one attempt, not all.
    pub(crate) async fn renew(self: &Arc<Self>, svc: LockServiceClient<Channel>, shard: &ShardKey, request: pb::KeepAliveRequest, within: Duration) -> Answer {
        let deadline = Instant::now() + within;
        let key: Key = (shard.clone(), request.shard.as_ref().map_or(0, |s| s.epoch));
        let (tx, rx) = oneshot::channel();
        if self.singles.load(Ordering::Relaxed) {
            self.clone().send(svc, key.clone(), request.shard, vec![(request.session_id, tx)], deadline).await;
        } else {
            let starts_batch = {
                let mut pending = lock(&self.pending);
                let batch = pending.entry(key.clone()).or_insert_with(|| Pending { shard: request.shard.clone(), waiters: Vec::new() });
                batch.waiters.push((request.session_id, tx));
                batch.waiters.len() == 1
            };
            if starts_batch {
                // Its own task: the batch goes out even if this call is dropped.
                let (this, key) = (self.clone(), key.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(LINGER).await;
                    let Some(batch) = lock(&this.pending).remove(&key) else { return };
                    let mut waiters = batch.waiters;
                    while !waiters.is_empty() {
                        let rest = waiters.split_off(waiters.len().min(MAX_RENEWAL_BATCH));
                        this.clone().send(svc.clone(), key.clone(), batch.shard.clone(), waiters, deadline).await;
                        waiters = rest;
                    }
                });
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(unavailable("the renewal stream ended before this renewal was answered")),
            Err(_) => {
                let stuck = lock(&self.streams).get(&key).map(|s| s.waiting.clone());
                if let Some(waiting) = stuck {
                    self.retire(&key, &waiting);
                }
                Err(Status::deadline_exceeded("no answer on the renewal stream in time"))
            }
        }
    }

    /// Sends `waiters` as one KeepAlive message on the stream of `key`, opening it at
    /// `svc` if none is open. Every renewal is answered through its waiter.
    async fn send(self: Arc<Self>, mut svc: LockServiceClient<Channel>, key: Key, shard: Option<pb::ShardRef>, mut waiters: Vec<Waiter>, deadline: Instant) {
        let request = pb::KeepAliveRequest { session_id: waiters[0].0, shard, more: waiters[1..].iter().map(|(id, _)| *id).collect() };
        self.sent.fetch_add(1, Ordering::Relaxed);
        let open = lock(&self.streams).get(&key).cloned();
        if let Some(stream) = open {
            if let Err(waiters) = stream.send(request, waiters) {
                self.retire(&key, &stream.waiting);
                fail_all(waiters, "the renewal stream ended or is full");
            }
            return;
        }
        let (requests, rx_requests) = mpsc::channel(MAX_IN_FLIGHT);
        let _ = requests.try_send(request);
        // A cell answers the first message before it accepts the stream, so a
        // follower's NOT_LEADER (or any refusal) is this batch's error: the first
        // renewal gets it, the others retry at once and learn it for themselves.
        let open = tokio::time::timeout_at(deadline, svc.keep_alive(ReceiverStream::new(rx_requests))).await;
        let answers = match open {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => {
                let (_, first) = waiters.remove(0);
                let _ = first.send(Err(e));
                return fail_all(waiters, "the renewal stream could not be opened");
            }
            Err(_) => return fail_all(waiters, "opening the renewal stream timed out"),
        };
        let waiting = Arc::new(Waiting(Mutex::new(Queue { ended: false, queue: VecDeque::from([waiters]) })));
        lock(&self.streams).insert(key.clone(), Arc::new(Stream { requests, waiting: waiting.clone() }));
        tokio::spawn(read(Arc::downgrade(&self), key, answers, waiting));
    }
}

/// The reader of one stream: hands each answer to its message's renewals, then
/// retires the stream and fails what is left when it ends.
async fn read(renewals: Weak<Renewals>, key: Key, mut answers: tonic::Streaming<pb::KeepAliveResponse>, waiting: Arc<Waiting>) {
    let error = loop {
        let mut answer = match answers.message().await {
            Ok(Some(a)) => a,
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        let Some(message) = lock(&waiting.0).queue.pop_front() else { break None };
        let mut sessions = message.into_iter();
        let (first, w) = sessions.next().expect("a message renews at least one session");
        let more: Vec<Waiter> = sessions.collect();
        // Answers come in the order sent; anything else means the stream cannot
        // be trusted.
        if first != answer.session_id {
            let _ = w.send(Err(unavailable("the renewal stream answered out of order")));
            fail_all(more, "the renewal stream answered out of order");
            break None;
        }
        let answered = std::mem::take(&mut answer.more);
        if answered.len() == more.len() && answered.iter().zip(&more).all(|(r, (id, _))| r.session_id == *id) {
            for (r, (_, w)) in answered.into_iter().zip(more) {
                let _ = w.send(answer_of(r));
            }
        } else if answered.is_empty() {
            // A cell older than batching renewed the first session only.
            if let Some(this) = renewals.upgrade() {
                this.singles.store(true, Ordering::Relaxed);
            }
            fail_all(more, "this cell renews one session a message; retrying one by one");
        } else {
            let _ = w.send(Err(unavailable("the renewal stream answered a batch out of order")));
            fail_all(more, "the renewal stream answered a batch out of order");
            break None;
        }
        let _ = w.send(Ok(answer));
    };
    if let Some(this) = renewals.upgrade() {
        this.retire(&key, &waiting);
    }
    waiting.fail(error);
}
