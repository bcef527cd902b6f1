//! [`Renewals`]: the renewals of a client's sessions of one shard, sent as messages on
//! one KeepAlive stream instead of one stream each.
//!
//! A renewal costs what a stream costs (`docs/benchmarks.md`, "Renewals": the handler
//! is a few per cent of a cell leader's time, the HTTP/2 and TLS framing of a new
//! stream the rest), so a process with many sessions renews them as messages on a
//! stream it keeps per shard. The protocol already allows it: a cell answers each
//! message of a KeepAlive stream in order, and a gateway forwards the whole stream to
//! the shard's cell.
//!
//! The stream never pins a session to a deposed leader: a cell answers a renewal it
//! cannot confirm under its leader lease with `NOT_LEADER` and ends the stream. Any end
//! of the stream, and an answer that does not come in time, retires it; the renewal
//! fails like a failed call, and the session's retry (through the wire edge's
//! leader-following) opens a new stream. The oldest renewal waiting on a stream that
//! ends with an error gets that error (it is the message the cell refused); the others
//! get `UNAVAILABLE` and retry at once.

use holdfast_core::ShardKey;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_rpc::Channel;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

type Answer = Result<pb::KeepAliveResponse, Status>;

/// Renewals sent on one stream and not yet answered, at most: a cell answers in
/// microseconds, so this is only reached when it stopped answering.
const MAX_IN_FLIGHT: usize = 1024;

/// The open renewal streams of one client, by shard and the epoch its sessions were
/// created at. Sessions of an older epoch (left behind by a move) never share a stream
/// with newer ones: a gateway routes a stream by its first message's epoch, and the
/// shard's new owner answers such a session `NOT_OWNER` (moved) only when the renewal
/// arrives with its own epoch; on a newer session's stream it would be an unknown id.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    /// Ordered: streams end in one order when the client drops (docs/simulation.md).
    streams: Mutex<BTreeMap<(ShardKey, u32), Arc<Stream>>>,
}

/// One open KeepAlive stream. The request side lives only here (and in calls sending
/// on it): once the stream is retired and they are done, the request side ends, the cell
/// ends the stream, and its reader stops.
#[derive(Debug)]
struct Stream {
    requests: mpsc::Sender<pb::KeepAliveRequest>,
    waiting: Arc<Waiting>,
}

/// Renewals sent on a stream and not yet answered, in the order sent (the cell answers
/// in it); once the stream ended, nothing more is sent on it.
#[derive(Debug, Default)]
struct Waiting(Mutex<Queue>);

#[derive(Debug, Default)]
struct Queue {
    ended: bool,
    queue: VecDeque<(u64, oneshot::Sender<Answer>)>,
}

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stream ended: the oldest waiting renewal gets `error` (if any), the rest
    /// `UNAVAILABLE`.
    fn fail(&self, error: Option<Status>) {
        let mut waiting = {
            let mut q = self.lock();
            q.ended = true;
            std::mem::take(&mut q.queue)
        };
        if let (Some(e), Some((_, first))) = (error, waiting.pop_front()) {
            let _ = first.send(Err(e));
        }
        for (_, w) in waiting {
            let _ = w.send(Err(Status::unavailable("the renewal stream ended before this renewal was answered")));
        }
    }
}

impl Stream {
    /// Sends a renewal, queued for its answer in the same critical section, so the
    /// queue's order is the order on the wire. `false` if the stream ended or is full.
    fn send(&self, request: pb::KeepAliveRequest, answer: oneshot::Sender<Answer>) -> bool {
        let mut q = self.waiting.lock();
        let session = request.session_id;
        if q.ended || self.requests.try_send(request).is_err() {
            return false;
        }
        q.queue.push_back((session, answer));
        true
    }
}

impl Renewals {
    /// Streams open now.
    pub(crate) fn open(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(ShardKey, u32), Arc<Stream>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Retires the stream whose queue is `waiting` (if it is still the shard's): the
    /// next renewal opens another.
    fn retire(&self, key: &(ShardKey, u32), waiting: &Arc<Waiting>) {
        let mut streams = self.lock();
        if streams.get(key).is_some_and(|s| Arc::ptr_eq(&s.waiting, waiting)) {
            streams.remove(key);
        }
    }

    /// Renews one session: on its shard's (and epoch's) open stream, or on a new one opened at
    /// `svc` (the node the wire edge chose for this attempt). Answers within `within`
    /// or fails, retiring the stream, so a stuck node costs one attempt, not all.
    pub(crate) async fn renew(
        self: &Arc<Self>,
        mut svc: LockServiceClient<Channel>,
        shard: &ShardKey,
        request: pb::KeepAliveRequest,
        within: Duration,
    ) -> Answer {
        let deadline = tokio::time::Instant::now() + within;
        let session = request.session_id;
        let key = (shard.clone(), request.shard.as_ref().map_or(0, |s| s.epoch));
        let (tx, rx) = oneshot::channel();
        let open = self.lock().get(&key).cloned();
        let stream = match open {
            Some(stream) => {
                if !stream.send(request, tx) {
                    self.retire(&key, &stream.waiting);
                    return Err(Status::unavailable("the renewal stream ended or is full"));
                }
                stream
            }
            None => {
                let (requests, rx_requests) = mpsc::channel(MAX_IN_FLIGHT);
                let _ = requests.try_send(request);
                // A cell answers the first message before it accepts the stream, so a
                // follower's NOT_LEADER (or any refusal) is this call's error.
                let open = tokio::time::timeout_at(deadline, svc.keep_alive(ReceiverStream::new(rx_requests))).await;
                let mut answers = match open {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(Status::deadline_exceeded("opening the renewal stream timed out")),
                };
                let waiting = Arc::new(Waiting(Mutex::new(Queue { ended: false, queue: VecDeque::from([(session, tx)]) })));
                let stream = Arc::new(Stream { requests, waiting: waiting.clone() });
                self.lock().insert(key.clone(), stream.clone());
                let (this, reader_key, reader) = (Arc::downgrade(self), key.clone(), waiting);
                tokio::spawn(async move {
                    let error = loop {
                        match answers.message().await {
                            Ok(Some(answer)) => {
                                let next = reader.lock().queue.pop_front();
                                match next {
                                    Some((id, w)) if id == answer.session_id => {
                                        let _ = w.send(Ok(answer));
                                    }
                                    // Answers come in the order sent; anything else
                                    // means the stream cannot be trusted.
                                    other => {
                                        if let Some((_, w)) = other {
                                            let _ = w.send(Err(Status::unavailable("the renewal stream answered out of order")));
                                        }
                                        break None;
                                    }
                                }
                            }
                            Ok(None) => break None,
                            Err(e) => break Some(e),
                        }
                    };
                    if let Some(this) = this.upgrade() {
                        this.retire(&reader_key, &reader);
                    }
                    reader.fail(error);
                });
                stream
            }
        };
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(Status::unavailable("the renewal stream ended before this renewal was answered")),
            Err(_) => {
                self.retire(&key, &stream.waiting);
                Err(Status::deadline_exceeded("no answer on the renewal stream in time"))
            }
        }
    }
}
