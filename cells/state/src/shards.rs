//! Placement commands: which namespaces and shards this cell serves, at which epoch.
//! The registry decides; the cell leader commits what it learned so every replica
//! agrees on what it serves.

use crate::outcome::{CellError, DequeueReason, Outcome};
use crate::state::{CellState, Ctx, SealReport, Shard};
use holdfast_core::{EndReason, Epoch, FencingToken, LockName, NamespaceConfig, Seq, SessionId, ShardKey};

impl CellState {
    pub(crate) fn apply_config(&mut self, config: &NamespaceConfig) -> Result<Outcome, CellError> {
        config.validate().map_err(|e| CellError::InvalidArgument(e.to_string()))?;
        if let Some(current) = self.configs.get(&config.name) {
            if current.version >= config.version {
                return Ok(Outcome::ConfigUnchanged { current: current.version });
            }
            // Which table holds the namespace's locks follows its intent (`volatile.rs`):
            // fixed at creation, as the registry enforces too.
            if current.intent != config.intent {
                return Err(CellError::InvalidArgument(format!(
                    "the intent of namespace {} is {}; it cannot change to {}",
                    config.name, current.intent, config.intent
                )));
            }
        }
        self.configs.insert(config.name.clone(), config.clone());
        Ok(Outcome::ConfigApplied { version: config.version })
    }

    pub(crate) fn adopt_shard(&mut self, ctx: &mut Ctx, key: &ShardKey, epoch: Epoch, delayed: &[LockName]) -> Result<Outcome, CellError> {
        self.config(&key.ns)?;
        if let Some(existing) = self.shards.get(key) {
            if existing.epoch >= epoch {
                return Err(CellError::StaleEpoch { shard: key.to_string(), expected: epoch.0, actual: existing.epoch.0 });
            }
            if existing.sealed.is_none() {
                // An epoch bump in place (the seq ran out): seal first, so every hold
                // of the old epoch ends with MOVED and its holders are told.
                let old = existing.epoch;
                self.seal_shard(ctx, key, old)?;
            }
        }
        let mut shard = Shard::new(epoch);
        if self.volatile {
            // Nothing granted until the log reserves this epoch's tokens for it.
            shard.ceiling = Some(Seq(0));
        }
        for name in delayed {
            shard.locks.entry(name.clone()).or_default().delayed = true;
        }
        // The old epoch's locks, delays and all, are gone with it.
        self.delays.retain(|(k, _), _| k != key);
        self.shards.insert(key.clone(), shard);
        for name in delayed {
            self.delays.insert((key.clone(), name.clone()), FencingToken::floor_of(epoch));
        }
        Ok(Outcome::Adopted { epoch })
    }

    pub(crate) fn seal_shard(&mut self, ctx: &mut Ctx, key: &ShardKey, epoch: Epoch) -> Result<Outcome, CellError> {
        let Some(shard) = self.shards.get(key) else {
            return Err(CellError::NotOwner { shard: key.to_string(), sealed: false });
        };
        if shard.epoch != epoch {
            return Err(CellError::StaleEpoch { shard: key.to_string(), expected: epoch.0, actual: shard.epoch.0 });
        }
        if let Some(report) = &shard.sealed {
            return Ok(Outcome::Sealed { highest: report.highest, held_locks: report.held_locks.clone() });
        }
        let mut held_locks = Vec::new();
        let mut holds = Vec::new();
        let mut waits = Vec::new();
        for (name, lock) in &shard.locks {
            if !lock.holders.is_empty() {
                held_locks.push(name.clone());
            }
            holds.extend(lock.holders.keys().map(|t| (name.clone(), *t)));
            waits.extend(lock.waiters.iter().map(|w| (name.clone(), w.session, w.request_id.clone())));
        }
        for (name, session, rid) in &waits {
            self.dequeue(ctx, key, name, *session, rid, DequeueReason::Moved);
        }
        for (name, token) in &holds {
            self.end_hold(ctx, key, name, *token, EndReason::Moved);
        }
        // The sessions that live in this shard go with it (issue #42): left alive, a move
        // back here within their TTL would revive them, and a holder whose hold ended
        // with the seal would have its renewals confirmed again, never told. Their
        // holds in other shards of this cell end as expired: their holders learn it at
        // their next renewal, and the lock-delay covers the meantime.
        let homed: Vec<SessionId> = self.sessions.iter().filter(|(_, s)| &s.home == key).map(|(id, _)| *id).collect();
        for session in homed {
            self.end_session_with(ctx, session, EndReason::Moved, |k| if k == key { EndReason::Moved } else { EndReason::Expired })?;
        }
        let shard = self.shards.get_mut(key).expect("checked above");
        shard.locks.clear();
        let highest = shard.highest();
        shard.sealed = Some(SealReport { highest, held_locks: held_locks.clone() });
        Ok(Outcome::Sealed { highest, held_locks })
    }
}
