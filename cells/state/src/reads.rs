//! Reads of the lock table. The cell server calls these after a read-index barrier,
//! so they are linearizable; the leader's timers use the iterators at the bottom.

use crate::outcome::{CellError, Event};
use crate::state::{BreakRecord, CellState, Lock, Shard};
use holdfast_core::{Epoch, FencingToken, LockName, Mode, NamespaceConfig, NamespaceName, RequestId, Revision, Seq, SessionId, ShardKey};
use std::collections::BTreeMap;

/// What [`CellState::namespace_stats`] reports for one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceStats {
    pub keys: u64,
    pub oldest_grant_unix_ms: Option<u64>,
    pub waiting: Vec<(LockName, u64)>,
}

impl NamespaceStats {
    /// Adds the stats of another table of the same namespace: the cell leader reports
    /// its log's table and its volatile table (efficiency locks) as one.
    pub fn merge(&mut self, other: NamespaceStats) {
        self.keys += other.keys;
        self.oldest_grant_unix_ms = match (self.oldest_grant_unix_ms, other.oldest_grant_unix_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.waiting.extend(other.waiting);
    }
}

/// One holder as Describe shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderView {
    pub session: SessionId,
    pub token: FencingToken,
    pub mode: Mode,
    pub value: Vec<u8>,
    pub request_id: RequestId,
    /// Leader wall clock at the grant, for display (`held_for` is computed by the
    /// server from its own clock at read time).
    pub granted_at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterView {
    pub session: SessionId,
    pub mode: Mode,
    pub request_id: RequestId,
    pub queued_at_unix_ms: u64,
}

/// Describe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockView {
    pub name: LockName,
    pub holders: Vec<HolderView>,
    /// In queue order.
    pub waiters: Vec<WaiterView>,
    /// Every token granted from now on is larger than this.
    pub token_floor: FencingToken,
    pub epoch: Epoch,
    pub delayed: bool,
    pub last_break: Option<BreakRecord>,
    pub revision: Revision,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub session: SessionId,
    pub home: ShardKey,
    pub ttl_ms: u64,
    pub checkpoint_ms: Option<u64>,
    pub label: String,
    pub holds: usize,
    pub waits: usize,
    pub created_at_unix_ms: u64,
    /// The identity the session is bound to, if it was created by an authenticated one.
    pub owner: Option<String>,
}

/// A shard as this cell serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    pub key: ShardKey,
    pub epoch: Epoch,
    pub seq: Seq,
    pub sealed: bool,
    pub keys: usize,
}

/// A Watch asked for revisions this cell no longer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("revision {requested} is compacted; the oldest kept is {oldest}")]
pub struct Compacted {
    pub requested: Revision,
    pub oldest: Revision,
}

impl CellState {
    pub fn revision(&self) -> Revision {
        self.revision
    }

    pub fn namespace(&self, ns: &NamespaceName) -> Option<&NamespaceConfig> {
        self.configs.get(ns)
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &NamespaceConfig> {
        self.configs.values()
    }

    pub fn shards(&self) -> impl Iterator<Item = ShardView> + '_ {
        self.shards.iter().map(|(key, s)| ShardView { key: key.clone(), epoch: s.epoch, seq: s.seq, sealed: s.sealed.is_some(), keys: s.locks.len() })
    }

    /// Live sessions per shard they were created in (one pass over the sessions: for
    /// the admin status, not for the renewal loop that lists shards every second).
    pub fn sessions_per_shard(&self) -> std::collections::HashMap<&ShardKey, usize> {
        let mut n = std::collections::HashMap::new();
        for s in self.sessions.values() {
            *n.entry(&s.home).or_default() += 1;
        }
        n
    }

    pub fn describe(&self, key: &ShardKey, name: &LockName) -> Result<LockView, CellError> {
        self.config(&key.ns)?;
        let shard = self.serving_shard(key, None)?;
        let empty = Lock::default();
        let lock = shard.locks.get(name).unwrap_or(&empty);
        let last_break = shard.audit.iter().rev().find(|b| &b.name == name).cloned();
        Ok(lock_view(name, lock, shard, self.revision, last_break))
    }

    /// The epoch this cell serves `key` at, unless the shard is unknown or sealed.
    pub fn served_epoch(&self, key: &ShardKey) -> Option<Epoch> {
        self.shards.get(key).filter(|s| s.sealed.is_none()).map(|s| s.epoch)
    }

    /// The epoch of this cell's copy of `key`, sealed or not.
    pub fn shard_epoch(&self, key: &ShardKey) -> Option<Epoch> {
        self.shards.get(key).map(|s| s.epoch)
    }

    /// Is the lock in lock-delay? (Cheap: the leader's clock asks after every release.)
    pub fn lock_delayed(&self, key: &ShardKey, name: &LockName) -> bool {
        self.shards.get(key).and_then(|s| s.locks.get(name)).is_some_and(|l| l.delayed)
    }

    /// How the lock's running lock-delay began, as a lift names it
    /// ([`crate::Command::EndLockDelayAt`]): the token of the hold whose end began it,
    /// or its epoch's floor token for an adoption's. `None` when the lock is in no
    /// delay, or in one this replica has no record of (restored from an older
    /// snapshot; any lift ends it).
    pub fn delay_begun(&self, key: &ShardKey, name: &LockName) -> Option<FencingToken> {
        self.delays.get(&(key.clone(), name.clone())).copied().filter(|_| self.lock_delayed(key, name))
    }

    /// The revision at which a waiting request was queued, as a timeout names it
    /// ([`crate::Command::EndWait`]). `None` when it waits in no queue, or in one this
    /// replica has no record of (restored from an older snapshot).
    pub fn queued_at(&self, session: SessionId, request_id: &RequestId) -> Option<Revision> {
        self.queued_at.get(&(session, request_id.clone())).copied()
    }

    /// Locks whose name starts with `prefix`, in name order, at most `limit`; the
    /// bool says whether more were left out.
    pub fn list(&self, key: &ShardKey, prefix: &str, limit: usize) -> Result<(Vec<LockView>, bool), CellError> {
        self.config(&key.ns)?;
        let shard = self.serving_shard(key, None)?;
        let mut out = Vec::new();
        let mut truncated = false;
        for (name, lock) in shard.locks.range(..).filter(|(n, _)| n.as_str().starts_with(prefix)) {
            if out.len() == limit {
                truncated = true;
                break;
            }
            out.push(lock_view(name, lock, shard, self.revision, None));
        }
        Ok((out, truncated))
    }

    /// Sessions created in this shard.
    pub fn list_sessions(&self, key: &ShardKey) -> Vec<SessionView> {
        self.sessions.iter().filter(|(_, s)| &s.home == key).map(|(id, _)| self.session(*id).expect("listed")).collect()
    }

    /// The live sessions homed in `shard`.
    pub fn sessions_homed_in(&self, shard: &ShardKey) -> Vec<SessionId> {
        self.sessions.iter().filter(|(_, s)| &s.home == shard).map(|(id, _)| *id).collect()
    }

    pub fn session(&self, id: SessionId) -> Option<SessionView> {
        self.sessions.get(&id).map(|s| SessionView {
            session: id,
            home: s.home.clone(),
            ttl_ms: s.ttl_ms,
            checkpoint_ms: s.checkpoint_ms,
            label: s.label.clone(),
            holds: s.holds.len(),
            waits: s.waits.len(),
            created_at_unix_ms: s.created_at_ms,
            owner: self.owners.get(&id).cloned(),
        })
    }

    /// Would an acquire with `request_id` on `session` be refused for the session's cap
    /// on holds and waits ([`CellError::session_full`])? A retry of a request the cell
    /// already knows is never refused for it. The cell leader asks before proposing, so
    /// a session at its cap does not write a Raft entry per refused attempt; the state
    /// machine checks again when it applies.
    pub fn over_session_cap(&self, session: SessionId, request_id: &RequestId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.holds.len() + s.waits.len() >= crate::sessions::MAX_HOLDS_AND_WAITS_PER_SESSION)
            && !self.requests.contains_key(&(session, request_id.clone()))
    }

    /// The session holding `token` on the lock, if that hold is current.
    pub fn holder_session(&self, key: &ShardKey, name: &LockName, token: FencingToken) -> Option<SessionId> {
        self.shards.get(key)?.locks.get(name)?.holders.get(&token).map(|h| h.session)
    }

    /// Every live session: (id, ttl, checkpointed remaining TTL). A new leader starts
    /// each countdown from `checkpoint.unwrap_or(ttl)`.
    pub fn session_countdowns(&self) -> impl Iterator<Item = (SessionId, u64, Option<u64>)> + '_ {
        self.sessions.iter().map(|(id, s)| (*id, s.ttl_ms, s.checkpoint_ms))
    }

    /// Is `token` a current holder of the lock? (CheckToken: CURRENT vs STALE.)
    pub fn check_token(&self, key: &ShardKey, name: &LockName, token: FencingToken) -> Result<bool, CellError> {
        let shard = self.serving_shard(key, None)?;
        Ok(shard.locks.get(name).is_some_and(|l| l.holders.contains_key(&token)))
    }

    /// Every hold: for the leader's max-hold timers.
    pub fn holds(&self) -> impl Iterator<Item = (&ShardKey, &LockName, FencingToken, SessionId)> + '_ {
        self.shards.iter().flat_map(|(key, s)| s.locks.iter().flat_map(move |(name, l)| l.holders.iter().map(move |(t, h)| (key, name, *t, h.session))))
    }

    /// Per-namespace gauges for metrics: locks held or queued for, the earliest grant
    /// time of any current hold (leader wall clock, display only), and the locks that
    /// have waiters with how many.
    pub fn namespace_stats(&self) -> BTreeMap<NamespaceName, NamespaceStats> {
        let mut out: BTreeMap<NamespaceName, NamespaceStats> = BTreeMap::new();
        for (key, shard) in &self.shards {
            let st = out.entry(key.ns.clone()).or_default();
            st.keys += shard.locks.len() as u64;
            for (name, lock) in &shard.locks {
                for h in lock.holders.values() {
                    st.oldest_grant_unix_ms = Some(st.oldest_grant_unix_ms.map_or(h.granted_at_ms, |o| o.min(h.granted_at_ms)));
                }
                if !lock.waiters.is_empty() {
                    st.waiting.push((name.clone(), lock.waiters.len() as u64));
                }
            }
        }
        out
    }

    /// Every lock in lock-delay, with how its delay began if recorded
    /// ([`CellState::delay_begun`]): for the leader's lock-delay timers.
    pub fn delayed_locks(&self) -> impl Iterator<Item = (&ShardKey, &LockName, Option<FencingToken>)> + '_ {
        self.shards.iter().flat_map(move |(key, s)| s.locks.iter().filter(|(_, l)| l.delayed).map(move |(name, _)| (key, name, self.delay_begun(key, name))))
    }

    /// Every queued request: for the leader's wait timers.
    pub fn waiters(&self) -> impl Iterator<Item = (&ShardKey, &LockName, SessionId, &RequestId)> + '_ {
        self.shards.iter().flat_map(|(key, s)| s.locks.iter().flat_map(move |(name, l)| l.waiters.iter().map(move |w| (key, name, w.session, &w.request_id))))
    }

    /// Events with a revision greater than `after`, in order, optionally only those
    /// of one lock. Fails if the history no longer reaches back that far.
    pub fn events_after(&self, after: Revision, filter: Option<(&ShardKey, &LockName)>) -> Result<Vec<Event>, Compacted> {
        if let Some(first) = self.history.front() {
            if after.0 + 1 < first.revision.0 {
                return Err(Compacted { requested: after, oldest: first.revision });
            }
        } else if after < self.revision {
            return Err(Compacted { requested: after, oldest: Revision(self.revision.0 + 1) });
        }
        let start = self.history.partition_point(|e| e.revision <= after);
        Ok(self.history.range(start..).filter(|e| filter.is_none_or(|(k, n)| &e.shard == k && &e.name == n)).cloned().collect())
    }
}

fn lock_view(name: &LockName, lock: &Lock, shard: &Shard, revision: Revision, last_break: Option<BreakRecord>) -> LockView {
    LockView {
        name: name.clone(),
        holders: holders(lock),
        waiters: lock
            .waiters
            .iter()
            .map(|w| WaiterView { session: w.session, mode: w.mode, request_id: w.request_id.clone(), queued_at_unix_ms: w.queued_at_ms })
            .collect(),
        token_floor: shard.floor(),
        epoch: shard.epoch,
        delayed: lock.delayed,
        last_break,
        revision,
    }
}

fn holders(lock: &Lock) -> Vec<HolderView> {
    lock.holders
        .iter()
        .map(|(t, h)| HolderView {
            session: h.session,
            token: *t,
            mode: h.mode,
            value: h.value.clone(),
            request_id: h.request_id.clone(),
            granted_at_unix_ms: h.granted_at_ms,
        })
        .collect()
}
