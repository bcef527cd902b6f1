//! Lock commands: acquire (with the FIFO queue and idempotent retries), release,
//! the leader's timers (wait timeout, max hold, lock-delay) and BreakLock.

use crate::outcome::{CellError, DequeueReason, EventKind, Outcome};
use crate::sessions::{MAX_HOLDS_AND_WAITS_PER_SESSION, MAX_OWNER_BYTES};

/// Longest reason a break-lock may give (it is audited).
pub const MAX_REASON_BYTES: usize = 512;
use crate::state::{compatible, next_token, BreakRecord, CellState, Ctx, RequestRecord, Waiter, AUDIT_CAP};
use holdfast_core::{validate_value, EndReason, Epoch, FencingToken, LockName, Mode, RequestId, Revision, SessionId, ShardKey};

pub(crate) struct AcquireArgs<'a> {
    pub(crate) shard: &'a ShardKey,
    pub(crate) epoch: Option<Epoch>,
    pub(crate) name: &'a LockName,
    pub(crate) session: SessionId,
    pub(crate) mode: Mode,
    pub(crate) request_id: &'a RequestId,
    pub(crate) value: &'a [u8],
    pub(crate) wait: bool,
}

impl CellState {
    pub(crate) fn acquire(&mut self, ctx: &mut Ctx, a: AcquireArgs<'_>) -> Result<Outcome, CellError> {
        let config = self.config(&a.shard.ns)?;
        let max_keys = config.quotas.max_keys;
        let max_waiters = config.quotas.max_waiters_per_lock;
        let max_value = config.quotas.max_value_bytes;
        let shard = self.serving_shard(a.shard, a.epoch)?;
        if !self.sessions.contains_key(&a.session) {
            return Err(self.dead_session_error(a.session));
        }

        // A retry gets the original outcome; it never grants twice.
        if let Some(rec) = self.requests.get(&(a.session, a.request_id.clone())) {
            let (rshard, rname) = match rec {
                RequestRecord::Holding { shard, name, .. } | RequestRecord::Waiting { shard, name } | RequestRecord::Ended { shard, name, .. } => (shard, name),
            };
            if rshard != a.shard || rname != a.name {
                return Err(CellError::InvalidArgument(format!("request id {} was already used for lock {rname} in {rshard}", a.request_id)));
            }
            return Ok(match rec {
                RequestRecord::Holding { token, .. } => Outcome::Granted { token: *token },
                RequestRecord::Waiting { .. } => {
                    let position = shard
                        .locks
                        .get(a.name)
                        .and_then(|l| l.waiters.iter().position(|w| w.session == a.session && &w.request_id == a.request_id))
                        .expect("a waiting record has its waiter");
                    Outcome::Queued { position: position as u32 }
                }
                RequestRecord::Ended { token, reason, .. } => Outcome::HoldEnded { token: *token, reason: *reason },
            });
        }

        let sess = &self.sessions[&a.session];
        if sess.holds.len() + sess.waits.len() >= MAX_HOLDS_AND_WAITS_PER_SESSION {
            return Err(CellError::session_full(a.session));
        }
        validate_value(a.value).map_err(|e| CellError::InvalidArgument(e.to_string()))?;
        if a.value.len() > max_value as usize {
            return Err(CellError::QuotaExceeded { what: "value bytes".into(), limit: u64::from(max_value) });
        }
        let lock = shard.locks.get(a.name);
        if let Some(lock) = lock {
            let holds = lock.holders.values().any(|h| h.session == a.session);
            let waits = lock.waiters.iter().any(|w| w.session == a.session);
            if holds || waits {
                // Re-entry would deadlock a waiter behind itself; say so plainly.
                return Err(CellError::LockHeld { name: a.name.to_string(), by_self: true });
            }
        } else if shard.locks.len() >= max_keys as usize {
            return Err(CellError::QuotaExceeded { what: format!("locks in shard {}", a.shard), limit: u64::from(max_keys) });
        }

        let free = lock.is_none_or(|l| !l.delayed && l.waiters.is_empty() && compatible(l, a.mode));
        if free {
            if next_token(shard).is_none() {
                if shard.ceiling.is_some() {
                    return Err(CellError::Unavailable(format!("the leader has no tokens of shard {} reserved yet; retry", a.shard)));
                }
                return Err(CellError::Unavailable(format!("shard {} has used every token of epoch {}; waiting for an epoch bump", a.shard, shard.epoch)));
            }
            let token = self.grant(ctx, a.shard, a.name, a.session, a.mode, a.request_id, a.value.to_vec());
            return Ok(Outcome::Granted { token });
        }
        if !a.wait {
            return Err(CellError::LockHeld { name: a.name.to_string(), by_self: false });
        }
        let waiting = lock.map_or(0, |l| l.waiters.len());
        if waiting >= max_waiters as usize {
            return Err(CellError::QuotaExceeded { what: format!("waiters on {}", a.name), limit: u64::from(max_waiters) });
        }

        let shard = self.shards.get_mut(a.shard).expect("checked above");
        let lock = shard.locks.entry(a.name.clone()).or_default();
        lock.waiters.push_back(Waiter { session: a.session, mode: a.mode, request_id: a.request_id.clone(), value: a.value.to_vec(), queued_at_ms: ctx.at_ms });
        let position = (lock.waiters.len() - 1) as u32;
        let sess = self.sessions.get_mut(&a.session).expect("checked above");
        sess.waits.insert((a.shard.clone(), a.name.clone(), a.request_id.clone()));
        self.requests.insert((a.session, a.request_id.clone()), RequestRecord::Waiting { shard: a.shard.clone(), name: a.name.clone() });
        self.emit(ctx, a.shard, a.name, a.session, a.request_id, EventKind::Queued { mode: a.mode }, a.value);
        self.queued_at.insert((a.session, a.request_id.clone()), self.revision);
        Ok(Outcome::Queued { position })
    }

    pub(crate) fn release(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, token: FencingToken, by: Option<SessionId>) -> Result<Outcome, CellError> {
        let Some(shard) = self.shards.get(key) else {
            return Err(CellError::NotOwner { shard: key.to_string(), sealed: false });
        };
        let held = shard.locks.get(name).is_some_and(|l| l.holders.contains_key(&token));
        let holder = shard.locks.get(name).and_then(|l| l.holders.get(&token)).map(|h| h.session);
        if let (Some(holder), Some(by)) = (holder, by) {
            if holder != by {
                return Err(CellError::NotHolder { name: name.to_string(), token, ended: None });
            }
        }
        if !held {
            return match shard.ended.get(&token) {
                // Repeating a release is OK.
                Some((n, EndReason::Released)) if n == name => Ok(Outcome::Released { token }),
                Some((n, reason)) if n == name => Err(CellError::NotHolder { name: name.to_string(), token, ended: Some(*reason) }),
                _ => Err(CellError::NotHolder { name: name.to_string(), token, ended: None }),
            };
        }
        self.end_hold(ctx, key, name, token, EndReason::Released);
        self.grant_waiters(ctx, key, name);
        Ok(Outcome::Released { token })
    }

    /// A wait timed out: the one queued at revision `queued`, or (`None`, an entry of
    /// an older leader) whichever wait the request is in. A timeout of another wait of
    /// the same request id (one that ended before a retry queued it again) changes
    /// nothing.
    pub(crate) fn cancel_wait(&mut self, ctx: &mut Ctx, session: SessionId, request_id: &RequestId, queued: Option<Revision>) -> Result<Outcome, CellError> {
        let key = (session, request_id.clone());
        match self.requests.get(&key).cloned() {
            Some(RequestRecord::Waiting { .. }) if queued.is_some_and(|q| self.queued_at.get(&key).is_some_and(|at| *at != q)) => Ok(Outcome::Done),
            Some(RequestRecord::Waiting { shard, name }) => {
                self.dequeue(ctx, &shard, &name, session, request_id, DequeueReason::Timeout);
                // The waiter may have been the one blocking those behind it.
                self.grant_waiters(ctx, &shard, &name);
                Ok(Outcome::WaitCancelled)
            }
            // The grant won the race: the waiting call gets its token after all.
            Some(RequestRecord::Holding { token, .. }) => Ok(Outcome::AlreadyGranted { token }),
            Some(RequestRecord::Ended { token, reason, .. }) => Ok(Outcome::HoldEnded { token, reason }),
            None if !self.sessions.contains_key(&session) => Err(self.dead_session_error(session)),
            None => Ok(Outcome::WaitCancelled),
        }
    }

    /// Max hold: the leader's timer for this hold ran out. A hold that already ended
    /// is left alone.
    pub(crate) fn end_hold_cmd(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, token: FencingToken) -> Result<Outcome, CellError> {
        let held = self.shards.get(key).and_then(|s| s.locks.get(name)).is_some_and(|l| l.holders.contains_key(&token));
        if held {
            self.end_hold(ctx, key, name, token, EndReason::MaxHold);
            self.grant_waiters(ctx, key, name);
        }
        Ok(Outcome::Done)
    }

    /// Ends the lock's delay: the one `begun` names (the hold whose end began it, or
    /// its epoch's floor for an adoption's), or (`None`, an entry of an older leader)
    /// whichever runs. A lift of another delay changes nothing. A delay this replica
    /// has no record of (restored from an older snapshot) is ended by any lift.
    pub(crate) fn lift_lock_delay(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, begun: Option<FencingToken>) -> Result<Outcome, CellError> {
        // A leader's volatile table gets each lift once, from the leader itself, never
        // a late copy from the log, so it needs no names.
        let begun = begun.filter(|_| !self.volatile);
        let recorded = self.delay_begun(key, name);
        let this_one = begun.is_none_or(|b| recorded.is_none_or(|r| r == b));
        if self.lock_delayed(key, name) && this_one {
            if let Some(lock) = self.shards.get_mut(key).and_then(|s| s.locks.get_mut(name)) {
                lock.delayed = false;
            }
            self.delays.remove(&(key.clone(), name.clone()));
            self.grant_waiters(ctx, key, name);
        }
        Ok(Outcome::Done)
    }

    pub(crate) fn break_lock(&mut self, ctx: &mut Ctx, key: &ShardKey, name: &LockName, by: &str, reason: &str) -> Result<Outcome, CellError> {
        if by.trim().is_empty() {
            return Err(CellError::InvalidArgument("break-lock needs the caller's identity".into()));
        }
        if reason.trim().is_empty() {
            return Err(CellError::InvalidArgument("break-lock needs a reason; it is audited".into()));
        }
        if by.len() > MAX_OWNER_BYTES || reason.len() > MAX_REASON_BYTES {
            return Err(CellError::InvalidArgument(format!("break-lock: identity at most {MAX_OWNER_BYTES} bytes, reason at most {MAX_REASON_BYTES}")));
        }
        let shard = self.serving_shard(key, None)?;
        let holders: Vec<(SessionId, FencingToken)> =
            shard.locks.get(name).map(|l| l.holders.iter().map(|(t, h)| (h.session, *t)).collect()).unwrap_or_default();
        for (_, token) in &holders {
            self.end_hold(ctx, key, name, *token, EndReason::Broken);
        }
        let shard = self.shards.get_mut(key).expect("checked above");
        let floor = shard.floor();
        if shard.audit.len() == AUDIT_CAP {
            shard.audit.pop_front();
        }
        shard.audit.push_back(BreakRecord {
            name: name.clone(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            ended: holders.clone(),
            new_floor: floor,
            at_unix_ms: ctx.at_ms,
        });
        self.grant_waiters(ctx, key, name);
        Ok(Outcome::Broken { floor, ended: holders.into_iter().map(|(_, t)| t).collect() })
    }
}

#[cfg(test)]
mod tests {
    use crate::{CellState, Command, Entry, Outcome};
    use holdfast_core::{Epoch, ErrorCode, Intent, LockName, Mode, NamespaceConfig, NamespaceName, RequestId, Seq, SessionId, ShardKey, ShardName};

    /// A shard whose seq is used up refuses new grants with UNAVAILABLE (it needs an
    /// epoch bump from the registry) and keeps waiters queued instead of wrapping.
    #[test]
    fn exhausted_seq_refuses_instead_of_wrapping() {
        let ns = NamespaceName::new("pay").unwrap();
        let key = ShardKey::new(ns.clone(), ShardName::default_shard());
        let mut st = CellState::new();
        let mut cfg = NamespaceConfig::with_defaults(ns, "o", Intent::Correctness);
        cfg.lock_delay_ms = 0;
        let at = |cmd| Entry::new(1, cmd);
        st.apply(&at(Command::ApplyConfig { config: cfg })).result.unwrap();
        st.apply(&at(Command::AdoptShard { shard: key.clone(), epoch: Epoch(3), delayed_locks: vec![] })).result.unwrap();
        st.apply(&at(Command::CreateSession { shard: key.clone(), session: SessionId(1), ttl_ms: 3_000, label: String::new() })).result.unwrap();
        st.apply(&at(Command::CreateSession { shard: key.clone(), session: SessionId(2), ttl_ms: 3_000, label: String::new() })).result.unwrap();
        st.shards.get_mut(&key).unwrap().seq = Seq(Seq::MAX.0 - 1);
        let acquire = |s: u64| Command::Acquire {
            shard: key.clone(),
            epoch: None,
            name: LockName::new("l").unwrap(),
            session: SessionId(s),
            mode: Mode::Shared,
            request_id: RequestId::new("r").unwrap(),
            value: vec![],
            wait: true,
        };
        let Ok(Outcome::Granted { token }) = st.apply(&at(acquire(1))).result else { panic!() };
        assert_eq!((token.epoch(), token.seq()), (Epoch(3), Seq::MAX));
        let before = st.clone();
        let err = st.apply(&at(acquire(2))).result.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unavailable);
        assert_eq!(before, st);
    }
}
