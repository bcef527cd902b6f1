//! The leader's volatile lock table: how an efficiency namespace is served from memory
//! (docs/semantics.md, "Efficiency namespaces: locks in the leader's memory").
//!
//! A lock of an efficiency namespace costs no Raft write per acquire or release: the
//! cell leader applies those commands to a second `CellState`, built from the
//! replicated one when it was elected ([`CellState::volatile`]) and lost when it stops
//! leading. Everything else about the namespace stays replicated: its config, its
//! shards and epochs, and every session (the leader applies the replicated commands
//! that create and end them, seal and adopt shards and change configs to both tables,
//! so a session that expires ends its volatile holds too).
//!
//! Tokens must still never go back, across leaders and epochs. So the volatile table
//! grants only sequence numbers the log has set aside for it: `ReserveTokens` advances
//! the replicated shard's `seq` by a block in one committed entry, and the volatile
//! shard grants up to that block's end (its `ceiling`) and no further. Blocks are
//! disjoint and grow in log order, and a new leader's first block comes after every
//! block committed before its election, so every token a later leader grants is larger
//! than every token an earlier one did. One Raft write buys [`RESERVE_BLOCK`] grants.

use crate::outcome::{CellError, Outcome};
use crate::state::{CellState, RequestRecord, Session, Shard};
use holdfast_core::{Epoch, Intent, NamespaceName, RequestId, Seq, SessionId, ShardKey};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Sequence numbers one `ReserveTokens` sets aside. A leader wastes at most one block
/// when it stops leading: 2^20 of the 2^40 of an epoch.
pub const RESERVE_BLOCK: u64 = 1 << 20;
/// The leader reserves the next block once fewer than this many are left. Larger than
/// the most grants one command can make (a release granting every shared waiter of a
/// lock: at most `MAX_WAITERS_PER_LOCK_CEILING`, 100,000), so no apply runs dry midway.
pub const RESERVE_LOW_WATER: u64 = 1 << 19;

impl CellState {
    /// Whether the locks of `ns` live in the leader's memory (an efficiency namespace).
    pub fn served_from_memory(&self, ns: &NamespaceName) -> bool {
        self.configs.get(ns).is_some_and(|c| c.intent == Intent::Efficiency)
    }

    /// A new leader's volatile table, from the replicated state it was elected with:
    /// the same configs, shards (at the same epoch and seq) and sessions, and no locks
    /// and no requests. Nothing is granted in a shard until a reservation is taken.
    pub fn volatile(&self) -> CellState {
        let shards = self
            .shards
            .iter()
            .map(|(key, s)| {
                let mut shard = Shard::new(s.epoch);
                shard.seq = s.seq;
                shard.ceiling = Some(s.seq);
                shard.sealed = s.sealed.clone();
                shard.audit = s.audit.clone();
                (key.clone(), shard)
            })
            .collect();
        let sessions = self
            .sessions
            .iter()
            .map(|(id, s)| (*id, Session { holds: BTreeSet::new(), waits: BTreeSet::new(), ended_requests: VecDeque::new(), ..s.clone() }))
            .collect();
        CellState {
            configs: self.configs.clone(),
            shards,
            sessions,
            ended_sessions: self.ended_sessions.clone(),
            requests: BTreeMap::new(),
            revision: self.revision,
            history: VecDeque::new(),
            planted_token_reuse: self.planted_token_reuse,
            owners: self.owners.clone(),
            volatile: true,
            // No lock of it is delayed or waited on yet.
            delays: BTreeMap::new(),
            queued_at: BTreeMap::new(),
            // A volatile table forgets by count (`ENDED_REQUESTS_PER_SESSION`).
            ended_at: BTreeMap::new(),
        }
    }

    /// Applies `ReserveTokens` to the replicated table.
    pub(crate) fn reserve_tokens(&mut self, key: &ShardKey, epoch: Epoch, count: u64) -> Result<Outcome, CellError> {
        if self.volatile {
            return Err(CellError::InvalidArgument("tokens are reserved in the replicated table, not in a leader's memory".into()));
        }
        if count == 0 || count > RESERVE_BLOCK {
            return Err(CellError::InvalidArgument(format!("a reservation is 1 to {RESERVE_BLOCK} tokens, not {count}")));
        }
        self.serving_shard(key, Some(epoch))?;
        let shard = self.shards.get_mut(key).expect("checked above");
        let through = shard.seq.0.saturating_add(count).min(Seq::MAX.0);
        if through == shard.seq.0 {
            return Err(CellError::Unavailable(format!("shard {key} has used every token of epoch {}; waiting for an epoch bump", epoch.0)));
        }
        let from = Seq(shard.seq.0 + 1);
        shard.seq = Seq(through);
        Ok(Outcome::Reserved { epoch, from, through: Seq(through) })
    }

    /// A volatile table takes a committed reservation: it grants from `from` up to
    /// `through`. A reservation of another epoch (the shard moved or was bumped since)
    /// is not taken. Returns whether it was.
    pub fn take_reservation(&mut self, key: &ShardKey, epoch: Epoch, from: Seq, through: Seq) -> bool {
        debug_assert!(self.volatile, "only a volatile table takes reservations");
        let Some(shard) = self.shards.get_mut(key) else { return false };
        if shard.epoch != epoch || shard.sealed.is_some() || from.0 == 0 || through < from {
            return false;
        }
        // Tokens below `from` that this table did not grant are skipped, never reused.
        shard.seq = Seq(shard.seq.0.max(from.0 - 1));
        shard.ceiling = Some(shard.ceiling.map_or(through, |c| c.max(through)));
        true
    }

    /// In a volatile table, the epoch and how many reserved tokens are left in a shard
    /// it serves; `None` for a shard it does not serve (unknown or sealed).
    pub fn headroom(&self, key: &ShardKey) -> Option<(Epoch, u64)> {
        let shard = self.shards.get(key).filter(|s| s.sealed.is_none())?;
        Some((shard.epoch, shard.ceiling.map_or(0, |c| c.0.saturating_sub(shard.seq.0))))
    }

    /// The shard in which `(session, request_id)` waits in a queue of this table.
    pub fn waiting_shard(&self, session: SessionId, request_id: &RequestId) -> Option<&ShardKey> {
        match self.requests.get(&(session, request_id.clone())) {
            Some(RequestRecord::Waiting { shard, .. }) => Some(shard),
            _ => None,
        }
    }
}
