//! Session commands. The state machine never measures time: it records TTLs and the
//! checkpointed remaining TTL, and ends a session only when the leader commits
//! `ExpireSession` (or the client closes it).

use crate::outcome::{CellError, DequeueReason, Outcome};
use crate::state::{CellState, Ctx, Session, ENDED_SESSIONS_CAP};
use holdfast_core::{EndReason, SessionId, ShardKey, MAX_SHORT_NAME_BYTES};

/// Longest label a client may attach to a session.
pub const MAX_LABEL_BYTES: usize = 4 * MAX_SHORT_NAME_BYTES;
/// Longest identity a session is bound to (`user:` or `token:` and a 64-byte name, or a
/// node's name).
pub const MAX_OWNER_BYTES: usize = 128;
/// Holds and waits one session may have at once, across every lock: a session cannot
/// make its cell keep more than this for it, whatever its namespace's quotas.
pub const MAX_HOLDS_AND_WAITS_PER_SESSION: usize = 1_000;

impl CellState {
    // A session's fields, each its own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_session(
        &mut self,
        ctx: &Ctx,
        key: &ShardKey,
        session: SessionId,
        ttl_ms: u64,
        label: &str,
        owner: Option<&String>,
    ) -> Result<Outcome, CellError> {
        let config = self.config(&key.ns)?;
        let (lo, hi, max_sessions) = (config.ttl_min_ms, config.ttl_max_ms, config.quotas.max_sessions);
        self.serving_shard(key, None)?;
        if !(lo..=hi).contains(&ttl_ms) {
            return Err(CellError::InvalidArgument(format!("ttl {ttl_ms} ms is outside namespace {}'s bounds [{lo}, {hi}] ms", key.ns)));
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(CellError::InvalidArgument(format!("session label is {} bytes; at most {MAX_LABEL_BYTES}", label.len())));
        }
        if let Some(owner) = owner.filter(|o| o.is_empty() || o.len() > MAX_OWNER_BYTES) {
            return Err(CellError::InvalidArgument(format!("session owner is {} bytes; 1 to {MAX_OWNER_BYTES}", owner.len())));
        }
        if session.0 == 0 || self.sessions.contains_key(&session) || self.ended_sessions.iter().any(|(id, _)| *id == session) {
            // The leader picks ids at random; it retries with another on this answer.
            return Err(CellError::SessionIdInUse(session));
        }
        let live_here = self.sessions.values().filter(|s| &s.home == key).count();
        if live_here >= max_sessions as usize {
            return Err(CellError::QuotaExceeded { what: format!("sessions in shard {key}"), limit: u64::from(max_sessions) });
        }
        self.sessions.insert(
            session,
            Session {
                home: key.clone(),
                ttl_ms,
                label: label.to_owned(),
                checkpoint_ms: None,
                created_at_ms: ctx.at_ms,
                holds: Default::default(),
                waits: Default::default(),
                ended_requests: Default::default(),
            },
        );
        if let Some(owner) = owner {
            self.owners.insert(session, owner.clone());
        }
        Ok(Outcome::SessionCreated { session, ttl_ms })
    }

    /// Ends a session: it leaves every queue first, then its holds end with `reason`,
    /// then freed locks go to their next waiters. In that order a lock can never be
    /// granted to the session that is ending.
    pub(crate) fn end_session(&mut self, ctx: &mut Ctx, session: SessionId, reason: EndReason) -> Result<Outcome, CellError> {
        self.end_session_with(ctx, session, reason, |_| reason)
    }

    /// [`CellState::end_session`], each hold ending with `hold_reason(its shard)`.
    pub(crate) fn end_session_with(
        &mut self,
        ctx: &mut Ctx,
        session: SessionId,
        reason: EndReason,
        hold_reason: impl Fn(&ShardKey) -> EndReason,
    ) -> Result<Outcome, CellError> {
        let Some(sess) = self.sessions.get(&session) else {
            return Err(self.dead_session_error(session));
        };
        let waits: Vec<_> = sess.waits.iter().cloned().collect();
        let holds: Vec<_> = sess.holds.iter().cloned().collect();
        for (key, name, rid) in &waits {
            self.dequeue(ctx, key, name, session, rid, DequeueReason::SessionEnded);
        }
        for (key, name, token) in &holds {
            self.end_hold(ctx, key, name, *token, hold_reason(key));
        }
        self.sessions.remove(&session);
        self.owners.remove(&session);
        self.requests.retain(|(s, _), _| *s != session);
        self.ended_at.retain(|(s, _), _| *s != session);
        if self.ended_sessions.len() == ENDED_SESSIONS_CAP {
            self.ended_sessions.pop_front();
        }
        self.ended_sessions.push_back((session, reason));
        let mut touched: Vec<_> = waits.into_iter().map(|(k, n, _)| (k, n)).chain(holds.into_iter().map(|(k, n, _)| (k, n))).collect();
        touched.sort();
        touched.dedup();
        for (key, name) in &touched {
            self.grant_waiters(ctx, key, name);
        }
        Ok(Outcome::Done)
    }

    pub(crate) fn checkpoint(&mut self, sessions: &[(SessionId, u64)]) -> Result<Outcome, CellError> {
        let mut n = 0;
        for (id, remaining) in sessions {
            if let Some(s) = self.sessions.get_mut(id) {
                s.checkpoint_ms = Some((*remaining).min(s.ttl_ms));
                n += 1;
            }
        }
        Ok(Outcome::Checkpointed { sessions: n })
    }

    pub(crate) fn clear_checkpoint(&mut self, session: SessionId) -> Result<Outcome, CellError> {
        match self.sessions.get_mut(&session) {
            Some(s) => {
                s.checkpoint_ms = None;
                Ok(Outcome::Done)
            }
            None => Err(self.dead_session_error(session)),
        }
    }
}
