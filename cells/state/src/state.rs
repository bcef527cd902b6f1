//! The lock table's data and the one entry point that changes it: [`CellState::apply`].
//!
//! Invariants kept here (and checked by the property tests):
//! - a lock has at most one exclusive holder, and never exclusive and shared together;
//! - a shard's tokens strictly increase: each grant takes the next `seq`;
//! - only live sessions hold or wait; a session that ends leaves every queue at once;
//! - waiters are granted in FIFO order, in the same apply as the release that frees them;
//! - a refused command changes nothing (every check happens before the first write).

use crate::command::{Command, Entry};
use crate::outcome::{Applied, CellError, DequeueReason, Event, EventKind, Outcome};
use holdfast_core::{EndReason, Epoch, FencingToken, LockName, Mode, NamespaceConfig, NamespaceName, RequestId, Revision, Seq, SessionId, ShardKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Events kept for Watch to resume from. Older revisions answer "compacted".
pub const HISTORY_CAP: usize = 10_000;
/// Ended sessions remembered, so their ids answer `SESSION_EXPIRED` not `UNKNOWN_SESSION`.
pub const ENDED_SESSIONS_CAP: usize = 10_000;
/// Ended holds remembered per shard, so a repeated release is OK and a stale token is
/// told how its hold ended.
pub const ENDED_HOLDS_CAP: usize = 4_096;
/// BreakLock audit records kept per shard.
pub const AUDIT_CAP: usize = 256;
/// Finished acquire records kept per session for idempotent retries in a leader's
/// volatile table (efficiency namespaces, where a duplicate grant is harmless by
/// definition). The replicated table keeps them for a stated time instead: until the
/// leader commits `ForgetRequests` past them (`cells/server/src/clock.rs`, the retry
/// window).
pub const ENDED_REQUESTS_PER_SESSION: usize = 64;

/// The whole replicated state of one cell.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CellState {
    pub(crate) configs: BTreeMap<NamespaceName, NamespaceConfig>,
    pub(crate) shards: BTreeMap<ShardKey, Shard>,
    pub(crate) sessions: BTreeMap<SessionId, Session>,
    /// Sessions that ended, oldest first, bounded by [`ENDED_SESSIONS_CAP`].
    pub(crate) ended_sessions: VecDeque<(SessionId, EndReason)>,
    pub(crate) requests: BTreeMap<(SessionId, RequestId), RequestRecord>,
    pub(crate) revision: Revision,
    pub(crate) history: VecDeque<Event>,
    /// A planted bug (debug builds only, [`CellState::plant_token_reuse`]): grants do
    /// not advance the token sequence. Not replicated, not in snapshots: every node of
    /// a planted cell is started with it.
    #[serde(skip)]
    pub(crate) planted_token_reuse: bool,
    /// The identity each live session was created by (sessions created by an
    /// unauthenticated caller, on an `--insecure` cell, have none). Outside the serde of
    /// this struct: a snapshot carries it next to the rest (format version 2), so a
    /// version 1 snapshot, written before it existed, still loads (with none).
    #[serde(skip)]
    pub(crate) owners: BTreeMap<SessionId, String>,
    /// This is a leader's volatile table (`volatile.rs`), never a replica: its shards
    /// grant only the sequence numbers the log reserved for them.
    #[serde(skip)]
    pub(crate) volatile: bool,
    /// How the lock-delay each delayed lock is in began: the token of the hold whose
    /// end began it, or the floor token of the epoch whose adoption did. A lift names
    /// it ([`Command::EndLockDelayAt`]), so a late copy of a lift cannot end the next
    /// delay. Both are the same on every replica, whether it applied the log or
    /// restored a snapshot. Outside this struct's serde, like `owners`: a snapshot
    /// carries it after them (format version 4). A delayed lock missing here (from an
    /// older snapshot) is in an unrecorded delay, which any lift ends.
    #[serde(skip)]
    pub(crate) delays: BTreeMap<(ShardKey, LockName), FencingToken>,
    /// The revision at which each waiting request was queued: a timeout names it
    /// ([`Command::EndWait`]), so a late copy cannot end the wait of a retry queued
    /// again with the same request id. Carried like `delays`; a waiter missing here
    /// (from an older snapshot) is ended by any timeout of its request.
    #[serde(skip)]
    pub(crate) queued_at: BTreeMap<(SessionId, RequestId), Revision>,
    /// The revision at which each finished acquire's hold ended (the event that ended
    /// it): `ForgetRequests` forgets the records that ended at or before a revision.
    /// Carried like `delays` (format version 5); a record missing here (from an older
    /// snapshot) is forgotten by the first `ForgetRequests`.
    #[serde(skip)]
    pub(crate) ended_at: BTreeMap<(SessionId, RequestId), Revision>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Shard {
    pub(crate) epoch: Epoch,
    /// The last seq granted in this epoch; the next grant takes `seq + 1`.
    pub(crate) seq: Seq,
    pub(crate) sealed: Option<SealReport>,
    pub(crate) locks: BTreeMap<LockName, Lock>,
    /// Tokens whose holds ended, with the lock and why; bounded, oldest dropped first.
    pub(crate) ended: BTreeMap<FencingToken, (LockName, EndReason)>,
    pub(crate) audit: VecDeque<BreakRecord>,
    /// In a volatile table only: the highest seq the log reserved for it; nothing
    /// above is granted. `None` in the replicated table.
    #[serde(skip)]
    pub(crate) ceiling: Option<Seq>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SealReport {
    pub(crate) highest: Option<FencingToken>,
    pub(crate) held_locks: Vec<LockName>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Lock {
    pub(crate) holders: BTreeMap<FencingToken, Hold>,
    pub(crate) waiters: VecDeque<Waiter>,
    /// In lock-delay: nothing is granted until the leader commits `LiftLockDelay`.
    pub(crate) delayed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub(crate) session: SessionId,
    pub(crate) mode: Mode,
    pub(crate) request_id: RequestId,
    pub(crate) value: Vec<u8>,
    pub(crate) granted_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiter {
    pub(crate) session: SessionId,
    pub(crate) mode: Mode,
    pub(crate) request_id: RequestId,
    pub(crate) value: Vec<u8>,
    pub(crate) queued_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Session {
    /// The shard it was created in; it counts against that shard's session quota.
    pub(crate) home: ShardKey,
    pub(crate) ttl_ms: u64,
    pub(crate) label: String,
    /// Remaining TTL recorded by the latest checkpoint that listed it, until cleared.
    pub(crate) checkpoint_ms: Option<u64>,
    pub(crate) created_at_ms: u64,
    pub(crate) holds: BTreeSet<(ShardKey, LockName, FencingToken)>,
    pub(crate) waits: BTreeSet<(ShardKey, LockName, RequestId)>,
    /// Request ids of finished acquires, oldest first, for pruning.
    pub(crate) ended_requests: VecDeque<RequestId>,
}

/// What an acquire request led to, for idempotent retries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RequestRecord {
    Holding { shard: ShardKey, name: LockName, token: FencingToken },
    Waiting { shard: ShardKey, name: LockName },
    Ended { shard: ShardKey, name: LockName, token: FencingToken, reason: EndReason },
}

/// An audited BreakLock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakRecord {
    pub name: LockName,
    pub by: String,
    pub reason: String,
    /// The holds it ended: (session, token).
    pub ended: Vec<(SessionId, FencingToken)>,
    pub new_floor: FencingToken,
    pub at_unix_ms: u64,
}

/// The per-apply context: the entry's timestamp and the events produced so far.
pub(crate) struct Ctx {
    pub(crate) at_ms: u64,
    pub(crate) events: Vec<Event>,
}

impl CellState {
    pub fn new() -> CellState {
        CellState::default()
    }

    /// Plants a bug, to prove that a drill's safety checker catches it: from now on a
    /// grant does not advance its shard's token sequence, so a lock's next holder gets
    /// the same token as the last ("a cell forced to grant twice"). Debug builds only;
    /// a release build has no way to turn it on.
    #[cfg(debug_assertions)]
    pub fn plant_token_reuse(&mut self) {
        self.planted_token_reuse = true;
    }

    /// Applies one committed entry. Deterministic: the same state and entry give the
    /// same result and the same next state on every replica.
    pub fn apply(&mut self, entry: &Entry) -> Applied {
        let mut ctx = Ctx { at_ms: entry.at_unix_ms, events: Vec::new() };
        let result = match &entry.cmd {
            Command::ApplyConfig { config } => self.apply_config(config),
            Command::AdoptShard { shard, epoch, delayed_locks } => self.adopt_shard(&mut ctx, shard, *epoch, delayed_locks),
            Command::SealShard { shard, epoch } => self.seal_shard(&mut ctx, shard, *epoch),
            Command::CreateSession { shard, session, ttl_ms, label } => self.create_session(&ctx, shard, *session, *ttl_ms, label, None),
            Command::CreateOwnedSession { shard, session, ttl_ms, label, owner } => self.create_session(&ctx, shard, *session, *ttl_ms, label, Some(owner)),
            Command::CloseSession { session } => self.end_session(&mut ctx, *session, EndReason::Released),
            Command::ExpireSession { session } => self.end_session(&mut ctx, *session, EndReason::Expired),
            Command::Checkpoint { sessions } => self.checkpoint(sessions),
            Command::ClearCheckpoint { session } => self.clear_checkpoint(*session),
            Command::Acquire { shard, epoch, name, session, mode, request_id, value, wait } => {
                self.acquire(&mut ctx, crate::locks::AcquireArgs { shard, epoch: *epoch, name, session: *session, mode: *mode, request_id, value, wait: *wait })
            }
            // An entry of an older release: bound to whoever holds the token.
            Command::Release { shard, name, token } => self.release(&mut ctx, shard, name, *token, None),
            Command::ReleaseHeld { shard, name, token, session } => self.release(&mut ctx, shard, name, *token, Some(*session)),
            Command::CancelWait { session, request_id } => self.cancel_wait(&mut ctx, *session, request_id, None),
            Command::EndWait { session, request_id, queued } => self.cancel_wait(&mut ctx, *session, request_id, Some(*queued)),
            Command::EndHold { shard, name, token } => self.end_hold_cmd(&mut ctx, shard, name, *token),
            // Both older forms end whichever delay runs: see their documentation.
            Command::LiftLockDelay { shard, name } | Command::EndLockDelay { shard, name, .. } => self.lift_lock_delay(&mut ctx, shard, name, None),
            Command::EndLockDelayAt { shard, name, begun } => self.lift_lock_delay(&mut ctx, shard, name, Some(*begun)),
            Command::BreakLock { shard, name, by, reason } => self.break_lock(&mut ctx, shard, name, by, reason),
            Command::ReserveTokens { shard, epoch, count } => self.reserve_tokens(shard, *epoch, *count),
            Command::ForgetRequests { through } => self.forget_requests(*through),
        };
        debug_assert!(result.is_ok() || ctx.events.is_empty(), "a refused command emitted events");
        for ev in &ctx.events {
            if self.history.len() == HISTORY_CAP {
                self.history.pop_front();
            }
            self.history.push_back(ev.clone());
        }
        Applied { result, events: ctx.events }
    }

    // ---- small shared helpers used by the command modules

    /// Records an event with the next revision.
    // An event's fields, each its own; a struct for them would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn emit(&mut self, ctx: &mut Ctx, shard: &ShardKey, name: &LockName, session: SessionId, request_id: &RequestId, kind: EventKind, value: &[u8]) {
        self.revision = Revision(self.revision.0 + 1);
        ctx.events.push(Event {
            revision: self.revision,
            at_unix_ms: ctx.at_ms,
            shard: shard.clone(),
            name: name.clone(),
            session,
            request_id: request_id.clone(),
            kind,
            value: value.to_vec(),
        });
    }

    /// Why a session id is not live: it ended (and how), or it never existed here.
    pub fn dead_session_error(&self, session: SessionId) -> CellError {
        match self.ended_sessions.iter().rev().find(|(id, _)| *id == session) {
            Some((_, reason)) => CellError::SessionExpired(session, *reason),
            None => CellError::UnknownSession(session),
        }
    }

    /// The shard, checked to be served here at the expected epoch.
    pub(crate) fn serving_shard(&self, key: &ShardKey, expected: Option<Epoch>) -> Result<&Shard, CellError> {
        let shard = self.shards.get(key).ok_or_else(|| CellError::NotOwner { shard: key.to_string(), sealed: false })?;
        if shard.sealed.is_some() {
            return Err(CellError::NotOwner { shard: key.to_string(), sealed: true });
        }
        if let Some(expected) = expected {
            if expected != shard.epoch {
                return Err(CellError::StaleEpoch { shard: key.to_string(), expected: expected.0, actual: shard.epoch.0 });
            }
        }
        Ok(shard)
    }

    pub(crate) fn config(&self, ns: &NamespaceName) -> Result<&NamespaceConfig, CellError> {
        self.configs.get(ns).ok_or_else(|| CellError::UnknownNamespace(ns.to_string()))
    }

    /// Ends one hold: records why, tells watchers, and sets lock-delay when the
    /// namespace has one and the hold did not end by release. Does not grant waiters:
    /// the caller does that once every hold it ends is gone.
    pub(crate) fn end_hold(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, token: FencingToken, reason: EndReason) {
        let lock_delay = self.configs.get(&key.ns).map(|c| c.lock_delay_ms).unwrap_or(0);
        let Some(shard) = self.shards.get_mut(key) else { return };
        let Some(lock) = shard.locks.get_mut(name) else { return };
        let Some(hold) = lock.holders.remove(&token) else { return };
        // A delay already running goes on as it is (the leader times it from its start).
        let delay_begins = reason.triggers_lock_delay() && lock_delay > 0 && reason != EndReason::Moved && !lock.delayed;
        lock.delayed |= delay_begins;
        if shard.ended.len() == ENDED_HOLDS_CAP {
            shard.ended.pop_first();
        }
        shard.ended.insert(token, (name.clone(), reason));
        if delay_begins {
            self.delays.insert((key.clone(), name.clone()), token);
        }
        let finished = match self.sessions.get_mut(&hold.session) {
            Some(sess) => {
                sess.holds.remove(&(key.clone(), name.clone(), token));
                Self::finish_request(&mut self.requests, sess, hold.session, &hold.request_id, key, name, token, reason, self.volatile);
                true
            }
            None => false,
        };
        self.emit(ctx, key, name, hold.session, &hold.request_id, EventKind::Ended { token, reason }, &hold.value);
        if finished && !self.volatile {
            // Stamped with the revision of the event that ended it: that event happened
            // no later than any moment the leader saw this revision.
            self.ended_at.insert((hold.session, hold.request_id.clone()), self.revision);
        }
    }

    /// Forgets the records of acquires whose holds ended at or before `through` (the
    /// leader's retry window has passed for them). Each session's finished requests are
    /// kept in the order they ended, so only the front of each is looked at.
    pub(crate) fn forget_requests(&mut self, through: Revision) -> Result<Outcome, CellError> {
        let mut forgotten = 0;
        for (id, sess) in self.sessions.iter_mut() {
            while let Some(rid) = sess.ended_requests.front() {
                let key = (*id, rid.clone());
                if self.ended_at.get(&key).is_some_and(|at| *at > through) {
                    break;
                }
                self.ended_at.remove(&key);
                if matches!(self.requests.get(&key), Some(RequestRecord::Ended { .. })) {
                    self.requests.remove(&key);
                }
                sess.ended_requests.pop_front();
                forgotten += 1;
            }
        }
        Ok(Outcome::Forgotten { requests: forgotten })
    }

    /// Would `ForgetRequests { through }` forget anything?
    pub fn forgettable(&self, through: Revision) -> bool {
        self.sessions.iter().any(|(id, s)| s.ended_requests.front().is_some_and(|rid| self.ended_at.get(&(*id, rid.clone())).is_none_or(|at| *at <= through)))
    }

    /// Turns a holding request record into an ended one. A volatile table prunes its
    /// oldest ended records beyond [`ENDED_REQUESTS_PER_SESSION`]; the replicated one
    /// keeps them until the leader's retry window passes (`ForgetRequests`).
    #[allow(clippy::too_many_arguments)]
    fn finish_request(
        requests: &mut BTreeMap<(SessionId, RequestId), RequestRecord>,
        sess: &mut Session,
        session: SessionId,
        request_id: &RequestId,
        key: &ShardKey,
        name: &LockName,
        token: FencingToken,
        reason: EndReason,
        volatile: bool,
    ) {
        requests.insert((session, request_id.clone()), RequestRecord::Ended { shard: key.clone(), name: name.clone(), token, reason });
        sess.ended_requests.push_back(request_id.clone());
        while volatile && sess.ended_requests.len() > ENDED_REQUESTS_PER_SESSION {
            if let Some(old) = sess.ended_requests.pop_front() {
                requests.remove(&(session, old));
            }
        }
    }

    /// Removes one waiter (not granted) and tells watchers why.
    pub(crate) fn dequeue(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, session: SessionId, request_id: &RequestId, reason: DequeueReason) {
        let Some(lock) = self.shards.get_mut(key).and_then(|s| s.locks.get_mut(name)) else { return };
        let Some(pos) = lock.waiters.iter().position(|w| w.session == session && &w.request_id == request_id) else { return };
        let waiter = lock.waiters.remove(pos).expect("position is in range");
        self.requests.remove(&(session, request_id.clone()));
        self.queued_at.remove(&(session, request_id.clone()));
        if let Some(sess) = self.sessions.get_mut(&session) {
            sess.waits.remove(&(key.clone(), name.clone(), request_id.clone()));
        }
        self.emit(ctx, key, name, session, request_id, EventKind::Dequeued { reason }, &waiter.value);
    }

    /// Grants waiters from the front of the queue while they are compatible, then
    /// drops the lock if nothing is left of it. Waiters are always live sessions:
    /// a session that ends leaves its queues first.
    pub(crate) fn grant_waiters(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName) {
        loop {
            let Some(shard) = self.shards.get(key) else { return };
            let Some(lock) = shard.locks.get(name) else { return };
            if lock.delayed || shard.sealed.is_some() {
                break;
            }
            let Some(front) = lock.waiters.front() else { break };
            if !compatible(lock, front.mode) || next_token(shard).is_none() {
                break;
            }
            let waiter = self.shards.get_mut(key).and_then(|s| s.locks.get_mut(name)).and_then(|l| l.waiters.pop_front()).expect("front exists");
            self.queued_at.remove(&(waiter.session, waiter.request_id.clone()));
            if let Some(sess) = self.sessions.get_mut(&waiter.session) {
                sess.waits.remove(&(key.clone(), name.clone(), waiter.request_id.clone()));
            }
            self.grant(ctx, key, name, waiter.session, waiter.mode, &waiter.request_id, waiter.value);
        }
        self.gc_lock(key, name);
    }

    /// Gives the lock to a live session with the shard's next token.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn grant(
        &mut self,
        ctx: &mut Ctx,
        key: &ShardKey,
        name: &LockName,
        session: SessionId,
        mode: Mode,
        request_id: &RequestId,
        value: Vec<u8>,
    ) -> FencingToken {
        let planted = self.planted_token_reuse;
        let shard = self.shards.get_mut(key).expect("caller checked the shard");
        let token = next_token(shard).expect("caller checked the seq");
        if !planted {
            shard.seq = token.seq();
        }
        let lock = shard.locks.entry(name.clone()).or_default();
        lock.holders.insert(token, Hold { session, mode, request_id: request_id.clone(), value: value.clone(), granted_at_ms: ctx.at_ms });
        let sess = self.sessions.get_mut(&session).expect("grants go to live sessions only");
        sess.holds.insert((key.clone(), name.clone(), token));
        self.requests.insert((session, request_id.clone()), RequestRecord::Holding { shard: key.clone(), name: name.clone(), token });
        self.emit(ctx, key, name, session, request_id, EventKind::Acquired { mode, token }, &value);
        token
    }

    /// Forgets a lock that has no holders, no waiters and no delay. Its token floor
    /// lives on in the shard's seq, so nothing is lost.
    pub(crate) fn gc_lock(&mut self, key: &ShardKey, name: &LockName) {
        if let Some(shard) = self.shards.get_mut(key) {
            if shard.locks.get(name).is_some_and(|l| l.holders.is_empty() && l.waiters.is_empty() && !l.delayed) {
                shard.locks.remove(name);
            }
        }
    }
}

/// Whether a new holder of `mode` can join the current holders.
pub(crate) fn compatible(lock: &Lock, mode: Mode) -> bool {
    match mode {
        Mode::Exclusive => lock.holders.is_empty(),
        Mode::Shared => lock.holders.values().all(|h| h.mode == Mode::Shared),
    }
}

/// The token the shard would grant next, or `None` if its seq is exhausted and it
/// needs an epoch bump from the registry (or, in a volatile table, a reservation).
pub(crate) fn next_token(shard: &Shard) -> Option<FencingToken> {
    let seq = Seq(shard.seq.0.checked_add(1)?);
    if shard.ceiling.is_some_and(|c| seq > c) {
        return None;
    }
    FencingToken::new(shard.epoch, seq).ok()
}

impl Shard {
    pub(crate) fn new(epoch: Epoch) -> Shard {
        Shard { epoch, seq: Seq(0), sealed: None, locks: BTreeMap::new(), ended: BTreeMap::new(), audit: VecDeque::new(), ceiling: None }
    }

    /// The highest token issued in this epoch, if any.
    pub(crate) fn highest(&self) -> Option<FencingToken> {
        (self.seq.0 > 0).then(|| FencingToken::new(self.epoch, self.seq).expect("seq in range"))
    }

    /// Every token granted from now on is larger than this.
    pub(crate) fn floor(&self) -> FencingToken {
        self.highest().unwrap_or(FencingToken::floor_of(self.epoch))
    }
}
