//! The LockService of `proto/holdfast/lock/v1`, served by every node of a cell. Writes
//! and reads go to the leader (others answer `NOT_LEADER` with a hint); a queued
//! acquire's call stays open until its grant or its timeout commits.

use crate::cell::{cell_status, wall_clock_ms, Cell};
use crate::clock::Renewal;
use crate::convert::{self, invalid, lock_name, mode_from, request_id, shard_ref};
use crate::machine::WaitResult;
use holdfast_cell_state::{CellError, Command, DequeueReason, Outcome, MAX_REASON_BYTES};
use holdfast_core::{ErrorCode, FencingToken, Revision, SessionId, ShardKey, MAX_RENEWAL_BATCH};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_server::LockService;
use holdfast_rpc::status::status;
use holdfast_rpc::CallContext;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, Instrument};

/// After a wait's deadline, how long the call waits for the leader's `CancelWait` to
/// commit before it answers "outcome unknown".
const WAIT_GRACE: Duration = Duration::from_secs(3);
/// Longest server-side wait a client may ask for.
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// Default and largest page of List.
const LIST_DEFAULT: usize = 1_000;
/// How long a KeepAlive stream may stay silent after it opened.
const FIRST_RENEWAL_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct LockApi {
    cell: Arc<Cell>,
}

impl LockApi {
    pub fn new(cell: Arc<Cell>) -> LockApi {
        LockApi { cell }
    }

    fn ttl_remaining(&self, session: SessionId) -> u64 {
        self.cell.hooks.door(|t| t.clock().remaining(Instant::now(), session)).ok().flatten().map_or(0, |d| d.as_millis() as u64)
    }

    /// `NOT_OWNER` for a renewal whose session's shard has moved on: the session lives
    /// here but its shard was sealed (it left this cell), or the session is unknown here
    /// and the client names an epoch this cell does not serve (the renewal was routed to
    /// the shard's new owner, perhaps before it adopted). Its client re-creates the
    /// session.
    fn moved_on(&self, session: SessionId, named: Option<&(ShardKey, u32)>) -> Option<Status> {
        let why = self.cell.group.state().read(|m| {
            let st = m.state();
            match st.session(session) {
                Some(v) => st.served_epoch(&v.home).is_none().then(|| format!("shard {} of session {session} left this cell", v.home)),
                // Unknown here, and the session names an epoch this cell does not serve
                // (it serves a newer one, or is still adopting the shard, or never had
                // it): the session was left behind by a move, not expired here.
                None => {
                    let &(ref key, epoch) = named?;
                    match st.served_epoch(key) {
                        Some(now) if now.0 == epoch => None,
                        Some(now) => Some(format!("shard {key} moved on from epoch {epoch} (now {}); session {session} stayed behind", now.0)),
                        None => Some(format!("this cell does not serve shard {key} at epoch {epoch}; session {session} lives elsewhere")),
                    }
                }
            }
        })?;
        Some(status(ErrorCode::NotOwner, format!("{why}; create a new session")))
    }

    /// One KeepAlive message answered: its first session (whose refusal ends the
    /// stream), then the batch in `more` (each answered on its own). One leader-lease
    /// check for the whole message, then the leader's clock confirms every session
    /// under one lock, as a single renewal is confirmed. A session whose checkpoint
    /// must be superseded first takes the single path ([`LockApi::renew`]) after. In
    /// the batch, only a refusal that says this node cannot confirm renewals at all
    /// (`NOT_LEADER`, `UNAVAILABLE`) ends the stream.
    async fn renew_message(&self, ctx: &CallContext, msg: pb::KeepAliveRequest) -> Result<pb::KeepAliveResponse, Status> {
        if msg.more.len() >= MAX_RENEWAL_BATCH {
            return Err(invalid(format!("{} sessions in one KeepAlive message; at most {MAX_RENEWAL_BATCH}", msg.more.len() + 1)));
        }
        // The shard and epoch the client names, parsed once for every session.
        let named = msg.shard.filter(|s| s.epoch != 0).and_then(|s| Some((holdfast_proto::convert::shard_key(s.ns, s.shard).ok()?, s.epoch)));
        let first = SessionId(msg.session_id);
        if let Some(refusal) = self.moved_on(first, named.as_ref()) {
            return Err(refusal);
        }
        self.cell.check_session_owner(ctx, first)?;
        let refused = |session: SessionId, e: Status| {
            let code = holdfast_rpc::status::code_of(&e).unwrap_or(ErrorCode::Unavailable);
            match code {
                ErrorCode::NotLeader | ErrorCode::Unavailable => Err(e),
                _ => Ok(pb::Renewed { session_id: session.0, ttl_remaining_ms: 0, code: code.as_str().to_owned(), message: e.message().to_owned() }),
            }
        };
        // The batch's own refusals, before the clock is asked.
        let mut more: Vec<Option<pb::Renewed>> = Vec::with_capacity(msg.more.len());
        for &id in &msg.more {
            let session = SessionId(id);
            let check = match self.moved_on(session, named.as_ref()) {
                Some(refusal) => Err(refusal),
                None => self.cell.check_session_owner(ctx, session),
            };
            more.push(match check {
                Ok(()) => None,
                Err(e) => Some(refused(session, e)?),
            });
        }
        // Rule 1, once for the message.
        self.cell.lease_check().await?;
        // Where each session lives, read before the term is taken (never under it).
        let homes = self.cell.group.state().read(|m| {
            let st = m.state();
            let home = |id: SessionId| st.session(id).and_then(|v| st.served_epoch(&v.home).map(|e| (v.home, e)));
            (home(first), msg.more.iter().map(|id| home(SessionId(*id))).collect::<Vec<_>>())
        });
        let (first_decision, decisions) = self.cell.hooks.door(|t| {
            let now = Instant::now();
            let first_decision = t.renew(now, first, homes.0.as_ref());
            let decisions: Vec<Option<Renewal>> = msg
                .more
                .iter()
                .zip(&more)
                .zip(&homes.1)
                .map(|((id, done), home)| done.is_none().then(|| t.renew(now, SessionId(*id), home.as_ref())))
                .collect();
            (first_decision, decisions)
        })?;
        let ttl_remaining_ms = self.settle(first, first_decision).await?;
        for ((&id, slot), decision) in msg.more.iter().zip(more.iter_mut()).zip(decisions) {
            let Some(decision) = decision else { continue };
            let session = SessionId(id);
            *slot = Some(match self.settle(session, decision).await {
                Ok(ttl) => pb::Renewed { session_id: id, ttl_remaining_ms: ttl, ..Default::default() },
                Err(e) => refused(session, e)?,
            });
        }
        let more = more.into_iter().map(|r| r.expect("every session of the batch answered")).collect();
        Ok(pb::KeepAliveResponse { session_id: first.0, ttl_remaining_ms, more })
    }

    /// What the leader's clock decided for `session`, as an answer: the time left, the
    /// single path when a checkpoint must be superseded first, or why it is unknown.
    async fn settle(&self, session: SessionId, decision: Renewal) -> Result<u64, Status> {
        match decision {
            Renewal::Confirmed { ttl_remaining } => Ok(ttl_remaining.as_millis() as u64),
            Renewal::NeedsClear => self.renew(session).await,
            Renewal::Unknown => Err(self.unknown_session(session)),
            Renewal::LeaseEnded => Err(lease_ended(session)),
        }
    }

    /// Why the leader's clock does not know `session`.
    fn unknown_session(&self, session: SessionId) -> Status {
        // Still in the state: its expiry is due or in flight.
        self.cell.group.state().read(|m| match m.state().session(session) {
            Some(_) => status(ErrorCode::SessionExpired, format!("session {session} has expired")),
            None => cell_status(&m.state().dead_session_error(session)),
        })
    }

    /// One renewal under the session rules, each try with its own leader-lease check:
    /// `Ok(remaining)` or the status that refuses it.
    async fn renew(&self, session: SessionId) -> Result<u64, Status> {
        // A renewal racing a checkpoint's proposal clears twice: once perhaps before the
        // checkpoint lands in the log (not counted), once after.
        for _ in 0..4 {
            let leader = self.cell.lease_check().await?;
            let home = self.cell.group.state().read(|m| m.state().session(session).and_then(|v| m.state().served_epoch(&v.home).map(|e| (v.home, e))));
            let decision = self.cell.hooks.door(|t| t.renew(Instant::now(), session, home.as_ref()))?;
            match decision {
                Renewal::Confirmed { ttl_remaining } => return Ok(ttl_remaining.as_millis() as u64),
                Renewal::NeedsClear => {
                    // Rule 3: the checkpoint that listed it must be superseded first.
                    if let Err(e) = self.cell.propose(leader, Command::ClearCheckpoint { session }).await? {
                        return Err(cell_status(&e));
                    }
                }
                Renewal::Unknown => return Err(self.unknown_session(session)),
                Renewal::LeaseEnded => return Err(lease_ended(session)),
            }
        }
        Err(status(ErrorCode::Unavailable, "renewal kept racing with checkpoints"))
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl LockService for LockApi {
    async fn create_session(&self, req: Request<pb::CreateSessionRequest>) -> Result<Response<pb::CreateSessionResponse>, Status> {
        // Bound to whoever proves who they are; on an `--insecure` cell, to nobody.
        let owner = CallContext::from_grpc(&req).principal();
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let leader = self.cell.assume_leader()?;
        self.cell.may_grant(&shard)?;
        for _ in 0..5 {
            let session = SessionId(holdfast_rpc::entropy::random_u64().max(1));
            let (key, ttl_ms, label) = (shard.clone(), r.ttl_ms, r.client_label.clone());
            let cmd = match owner.clone() {
                Some(owner) => Command::CreateOwnedSession { shard: key, session, ttl_ms, label, owner },
                None => Command::CreateSession { shard: key, session, ttl_ms, label },
            };
            match self.cell.propose(leader, cmd).await? {
                Ok(Outcome::SessionCreated { session, ttl_ms }) => {
                    info!(session = %session, shard = %shard, ttl_ms, "session created");
                    let served = self.cell.group.state().read(|m| m.state().served_epoch(&shard));
                    let home = served.map(|e| (shard.clone(), e));
                    // Confirmed like a renewal: never past the ownership lease.
                    let ttl = Duration::from_millis(ttl_ms);
                    let confirmed = self.cell.hooks.door(|t| t.confirmable(Instant::now(), home.as_ref(), ttl, ttl))?.ok_or_else(|| lease_ended(session))?;
                    return Ok(Response::new(pb::CreateSessionResponse {
                        session_id: session.0,
                        ttl_remaining_ms: confirmed.as_millis() as u64,
                        epoch: served.map_or(0, |e| e.0),
                        ttl_ms,
                    }));
                }
                Err(CellError::SessionIdInUse(_)) => continue,
                Err(e) => return Err(cell_status(&e)),
                Ok(other) => return Err(unexpected(other)),
            }
        }
        Err(status(ErrorCode::Unavailable, "could not draw a free session id"))
    }

    type KeepAliveStream = BoxStream<pb::KeepAliveResponse>;

    /// The first renewal is answered before the stream is: a refusal of it (above all
    /// `NOT_LEADER` with its hint) is the call's status, which every leader-following
    /// caller — a gateway forwarding an HTTP renewal included — acts on. Later
    /// refusals end the stream as its last message.
    async fn keep_alive(&self, req: Request<Streaming<pb::KeepAliveRequest>>) -> Result<Response<Self::KeepAliveStream>, Status> {
        let ctx = CallContext::from_grpc(&req);
        let mut inbound = req.into_inner();
        let first = match tokio::time::timeout(FIRST_RENEWAL_WITHIN, inbound.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(s))) => return Err(s),
            Ok(None) => return Err(invalid("empty KeepAlive stream: send the session id first")),
            Err(_) => return Err(invalid(format!("no renewal within {} ms of opening the KeepAlive stream", FIRST_RENEWAL_WITHIN.as_millis()))),
        };
        let first = self.renew_message(&ctx, first).await?;
        let (tx, rx) = mpsc::channel(8);
        let _ = tx.send(Ok(first)).await;
        let api = self.clone();
        self.cell.tasks.spawn("renewal stream", async move {
            loop {
                let msg = tokio::select! {
                    m = inbound.next() => m,
                    // The client went away: stop at once, not at its next message.
                    _ = tx.closed() => return,
                };
                let Some(Ok(msg)) = msg else { return };
                let reply = api.renew_message(&ctx, msg).await;
                let end = reply.is_err();
                if tx.send(reply).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn close_session(&self, req: Request<pb::CloseSessionRequest>) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let ctx = CallContext::from_grpc(&req);
        let session = SessionId(req.into_inner().session_id);
        let leader = self.cell.assume_leader()?;
        self.cell.check_session_owner(&ctx, session)?;
        let cmd = Command::CloseSession { session };
        // Its holds and waits go to the next waiters: a grant like any other.
        self.cell.may_propose(&cmd)?;
        match self.cell.propose(leader, cmd).await? {
            Ok(_) => Ok(Response::new(pb::CloseSessionResponse {})),
            Err(e) => Err(cell_status(&e)),
        }
    }

    async fn acquire(&self, req: Request<pb::AcquireRequest>) -> Result<Response<pb::AcquireResponse>, Status> {
        let started = Instant::now();
        let ctx = CallContext::from_grpc(&req);
        let r = req.into_inner();
        let (shard, epoch) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        let rid = request_id(r.request_id)?;
        let mode = mode_from(r.mode)?;
        let session = SessionId(r.session_id);
        let wait = Duration::from_millis(r.wait_timeout_ms);
        if wait > MAX_WAIT {
            return Err(invalid(format!("wait_timeout_ms {} exceeds {} ms", r.wait_timeout_ms, MAX_WAIT.as_millis())));
        }
        let leader = self.cell.assume_leader()?;
        // The term this call lives in: its grant is answered, and its wait lasts, only
        // while that term does (`term.rs`).
        let term = self.cell.hooks.door(|t| t.number())?;
        self.cell.check_session_owner(&ctx, session)?;
        let cmd =
            Command::Acquire { shard: shard.clone(), epoch, name: name.clone(), session, mode, request_id: rid.clone(), value: r.value, wait: !wait.is_zero() };
        if let Err(e) = self.cell.check_session_room(session, &rid).and_then(|()| self.cell.may_propose(&cmd)) {
            let result = Err(e);
            crate::metrics::acquire_answered(&shard.ns, started, Duration::ZERO, &result);
            return result;
        }
        // Armed before proposing: a grant may commit before we hear "queued".
        // Dropped (and the wake-up with it) however this call ends.
        let mut armed = (!wait.is_zero()).then(|| self.cell.hooks.arm_guarded(session, rid.clone())).transpose()?;
        let outcome = self.cell.submit(leader, cmd).await;
        // Time spent in the lock's queue: not service time (`metrics.rs`).
        let mut queue_time = Duration::ZERO;
        let granted = |token: FencingToken| {
            self.cell.answer_grant(term, &shard, token)?;
            debug!(shard = %shard, lock = %name, session = %session, token = token.0, "granted");
            Ok(Response::new(pb::AcquireResponse { token: token.0, ttl_remaining_ms: self.ttl_remaining(session), epoch: token.epoch().0, unfenced: false }))
        };
        let result = match outcome? {
            Ok(Outcome::Granted { token }) => granted(token),
            // A retry without a wait of a request that is already queued: it keeps its
            // place, but this call does not wait.
            Ok(Outcome::Queued { .. }) if armed.is_none() => {
                Err(status(ErrorCode::LockHeld, format!("request {rid} is queued for {name}; retry it with wait_timeout_ms to wait for the grant")))
            }
            Ok(Outcome::Queued { .. }) => {
                let woken = armed.as_mut().expect("checked above").take();
                let _ = self.cell.hooks.door_in(term, |t| t.clock().track_wait(session, rid.clone(), started + wait));
                let queued = Instant::now();
                // The term ends the wait too: deposed, this node hears the log late if at
                // all, and dropping the term answers the call (`WaitResult::Deposed`).
                let woken = tokio::time::timeout(wait.saturating_sub(started.elapsed()) + WAIT_GRACE, woken)
                    .instrument(tracing::info_span!("lock.queue_wait", lock = %name))
                    .await;
                queue_time = queued.elapsed();
                match woken {
                    Ok(Ok(WaitResult::Granted(token))) => {
                        crate::metrics::waited(&shard.ns, queue_time);
                        granted(token)
                    }
                    Ok(Ok(WaitResult::Dequeued(DequeueReason::Timeout))) => {
                        Err(status(ErrorCode::Timeout, format!("not granted within {} ms", wait.as_millis())))
                    }
                    Ok(Ok(WaitResult::Dequeued(DequeueReason::SessionEnded))) => {
                        Err(status(ErrorCode::SessionExpired, format!("session {session} ended while waiting")))
                    }
                    Ok(Ok(WaitResult::Dequeued(DequeueReason::Moved))) => Err(status(ErrorCode::NotOwner, format!("shard {shard} moved while waiting"))),
                    Ok(Ok(WaitResult::LeaseEnded)) => Err(status(
                        ErrorCode::Unavailable,
                        format!("request {rid} was granted after this cell's ownership lease of {shard} ended; retry it with the same request_id"),
                    )),
                    Ok(Ok(WaitResult::Deposed)) => {
                        Err(status(ErrorCode::Unavailable, format!("this node stopped leading while request {rid} waited; retry it with the same request_id")))
                    }
                    // The timeout's commit did not arrive: the outcome is unknown, never "absent".
                    _ => Err(status(ErrorCode::Unavailable, "wait outcome unknown (leader change?); retry with the same request_id")),
                }
            }
            Ok(Outcome::HoldEnded { token, reason }) => {
                Err(status(ErrorCode::NotHolder, format!("request {rid} was granted token {} and that hold has ended ({reason})", token.0)))
            }
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(cell_status(&e)),
        };
        drop(armed);
        crate::metrics::acquire_answered(&shard.ns, started, queue_time, &result);
        result
    }

    async fn release(&self, req: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let ctx = CallContext::from_grpc(&req);
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        let leader = self.cell.assume_leader()?;
        // Only the holder's own identity releases a hold (an administrator breaks it),
        // and only the session named here, checked again when the release is applied
        // (issue #42, hole 3: checked only now, a release of a token not yet granted
        // could end the hold of whoever is granted it next).
        let token = FencingToken(r.token);
        let session = match SessionId(r.session_id) {
            SessionId(0) => {
                let holder = self.cell.group.state().read(|m| m.state().holder_session(&shard, &name, token));
                // Not held now: bound to nobody, so it ends no later grant of the token.
                holder.or_else(|| self.cell.hooks.read_volatile(|t| t.holder_session(&shard, &name, token)).flatten()).unwrap_or(SessionId(0))
            }
            named => named,
        };
        if session != SessionId(0) {
            self.cell.check_session_owner(&ctx, session)?;
        }
        let cmd = Command::ReleaseHeld { shard, name, token, session };
        // A release hands the lock to the next waiter: a grant like any other.
        self.cell.may_propose(&cmd)?;
        match self.cell.submit(leader, cmd).await? {
            Ok(_) => Ok(Response::new(pb::ReleaseResponse {})),
            Err(e) => Err(cell_status(&e)),
        }
    }

    async fn describe(&self, req: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        let (view, config) = self
            .cell
            .read_locks(&shard, |st| st.describe(&shard, &name).map(|v| (v, st.namespace(&shard.ns).cloned().expect("describe checked it"))))
            .await?
            .map_err(|e| cell_status(&e))?;
        let now = wall_clock_ms();
        Ok(Response::new(pb::DescribeResponse {
            name: view.name.to_string(),
            holders: view.holders.iter().map(|h| convert::holder(h, now)).collect(),
            waiters: view.waiters.iter().map(convert::waiter).collect(),
            token_floor: view.token_floor.0,
            intent: convert::intent_to(config.intent),
            posture: convert::posture_to(config.posture),
            epoch: view.epoch.0,
            last_break: view.last_break.map(|b| pb::BreakRecord {
                token: b.ended.first().map_or(0, |(_, t)| t.0),
                session_id: b.ended.first().map_or(0, |(s, _)| s.0),
                by: b.by,
                reason: b.reason,
                new_floor: b.new_floor.0,
                at_unix_ms: b.at_unix_ms,
            }),
            lock_delayed: view.delayed,
            revision: view.revision.0,
        }))
    }

    async fn list(&self, req: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let limit = if r.limit == 0 { LIST_DEFAULT } else { (r.limit as usize).min(LIST_DEFAULT) };
        let (locks, truncated) = self.cell.read_locks(&shard, |st| st.list(&shard, &r.prefix, limit)).await?.map_err(|e| cell_status(&e))?;
        let now = wall_clock_ms();
        Ok(Response::new(pb::ListResponse {
            locks: locks
                .iter()
                .map(|l| pb::LockSummary {
                    name: l.name.to_string(),
                    holders: l.holders.iter().map(|h| convert::holder(h, now)).collect(),
                    waiters: l.waiters.len() as u32,
                })
                .collect(),
            truncated,
        }))
    }

    async fn list_sessions(&self, req: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let (shard, _) = shard_ref(req.into_inner().shard)?;
        let sessions = self.cell.list_sessions(&shard).await?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: sessions
                .into_iter()
                .map(|s| pb::SessionInfo {
                    session_id: s.session.0,
                    ttl_ms: s.ttl_ms,
                    client_label: s.label,
                    holds: s.holds as u32,
                    waits: s.waits as u32,
                    created_unix_ms: s.created_at_unix_ms,
                    owner: s.owner.unwrap_or_default(),
                })
                .collect(),
        }))
    }

    type WatchStream = BoxStream<pb::WatchResponse>;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        // Subscribe before reading the history, so no event falls between the two.
        let mut live = self.cell.hooks.subscribe();
        let from = Revision(r.from_revision);
        let (start, history) = self
            .cell
            .read_locks(&shard, |st| {
                let start = if from.0 == 0 { st.revision() } else { from };
                (start, st.events_after(start, Some((&shard, &name))))
            })
            .await?;
        let history = history.map_err(|c| status(ErrorCode::InvalidArgument, format!("{c}; re-read with Describe and watch from {}", c.oldest.0)))?;
        let (tx, rx) = mpsc::channel(64);
        let cell = self.cell.clone();
        self.cell.tasks.spawn("watch stream", async move {
            let mut last = history.last().map_or(start, |e| e.revision);
            if !history.is_empty() {
                let events = history.iter().map(convert::event).collect();
                if tx.send(Ok(pb::WatchResponse { events, compact_revision: 0 })).await.is_err() {
                    return;
                }
            }
            loop {
                let next = tokio::select! {
                    ev = live.recv() => ev,
                    // The watcher went away: a quiet lock must not keep this task alive.
                    _ = tx.closed() => return,
                };
                let batch = match next {
                    Ok(ev) if ev.revision > last && ev.shard == shard && ev.name == name => vec![ev],
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Fell behind the broadcast: catch up from the retained history.
                        match cell.locks_now(&shard, |t| t.events_after(last, Some((&shard, &name)))) {
                            Some(Ok(evs)) => evs,
                            // This node stopped leading: its volatile table is gone.
                            None => return,
                            Some(Err(c)) => {
                                let _ = tx.send(Ok(pb::WatchResponse { events: vec![], compact_revision: c.oldest.0 })).await;
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let batch: Vec<_> = batch.into_iter().filter(|e| e.revision > last).collect();
                let Some(newest) = batch.last() else { continue };
                last = newest.revision;
                let events = batch.iter().map(convert::event).collect();
                if tx.send(Ok(pb::WatchResponse { events, compact_revision: 0 })).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn check_token(&self, req: Request<pb::CheckTokenRequest>) -> Result<Response<pb::CheckTokenResponse>, Status> {
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        let current = self.cell.read_locks(&shard, |st| st.check_token(&shard, &name, FencingToken(r.token))).await?.map_err(|e| cell_status(&e))?;
        let status = if current { pb::TokenStatus::Current } else { pb::TokenStatus::Stale };
        Ok(Response::new(pb::CheckTokenResponse { status: status as i32 }))
    }

    async fn break_lock(&self, req: Request<pb::BreakLockRequest>) -> Result<Response<pb::BreakLockResponse>, Status> {
        let ctx = CallContext::from_grpc(&req);
        let by = ctx.identity();
        let r = req.into_inner();
        let (shard, _) = shard_ref(r.shard)?;
        let name = lock_name(r.name)?;
        if r.reason.trim().is_empty() || r.reason.len() > MAX_REASON_BYTES {
            return Err(invalid(format!("break-lock needs a reason of 1 to {MAX_REASON_BYTES} bytes; it is audited")));
        }
        let leader = self.cell.assume_leader()?;
        // A break hands the lock to the next waiter: gated like any grant, and checked
        // before the audit record is written.
        let cmd = Command::BreakLock { shard: shard.clone(), name: name.clone(), by: by.clone(), reason: r.reason.clone() };
        self.cell.may_propose(&cmd)?;
        // Written ahead: a break the durable audit log does not record does not happen.
        self.cell.audit(&ctx, "break_lock", format!("{shard} lock {name}: {}", r.reason)).await?;
        match self.cell.submit(leader, cmd).await? {
            Ok(Outcome::Broken { floor, ended }) => {
                crate::metrics::lock_broken(&shard.ns);
                info!(shard = %shard, lock = %name, by = %by, reason = %r.reason, ended = ?ended, floor = floor.0, "lock broken by an administrator");
                Ok(Response::new(pb::BreakLockResponse { new_floor: floor.0 }))
            }
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(cell_status(&e)),
        }
    }
}

/// A renewal refused because the cell's ownership lease no longer covers the session's
/// shard (the registry unreachable for longer than the lease, or the shard moved).
fn lease_ended(session: SessionId) -> Status {
    status(
        ErrorCode::Unavailable,
        format!("session {session}: this cell's ownership lease of its shard has run out (registry unreachable?); the renewal is not confirmed"),
    )
}

fn unexpected(o: Outcome) -> Status {
    status(ErrorCode::Unavailable, format!("internal: unexpected outcome {o:?}"))
}
