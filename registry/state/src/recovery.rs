//! What a registry brought back from a snapshot, or from the data of a lone survivor,
//! must change before it serves: [`RegistryState::recover`].
//!
//! The state it comes back with is older than the state of the group it replaces: the
//! lost group may have committed entries after the snapshot was taken, or after the
//! survivor last heard from its leader. Among them can be moves, each of which raised a
//! shard's epoch, and cells that granted at those epochs. Tokens carry the epoch in
//! their high bits, so if the recovered registry handed out any epoch the lost group
//! could have handed out, a cell could issue a token a resource has already seen.
//!
//! So a recovery raises every shard's epoch by a gap (default
//! [`RECOVERY_EPOCH_GAP`]), larger than the number of transfers of one shard that can
//! have been committed after the copy was taken — as `etcdctl snapshot restore
//! --bump-revision` raises etcd's revision. Each shard comes back to the cell the copy
//! names as its owner, unsealed (every lock of it starts in lock-delay where the cell
//! adopts it) and not yet adopted, and a move in flight is dropped: the source keeps
//! the shard. The ownership revision jumps by [`RECOVERY_REVISION_GAP`] and the
//! history restarts after it, so a gateway that watched the lost group resumes below
//! the retained events, is told "compacted" and lists again. The recovery is audited.

use crate::outcome::{OwnershipEvent, RegistryError};
use crate::state::{clip, Ctx, Handover, RegistryState, ShardRecord, ShardState};
use holdfast_core::{Epoch, Revision};

/// How far a recovery raises every shard's epoch unless told otherwise. An epoch has
/// 24 bits (16,777,215 of them), so this leaves room for thousands of recoveries.
pub const RECOVERY_EPOCH_GAP: u32 = 1_000;

/// How far a recovery raises the ownership revision (more than the ownership events the
/// lost group can have written after the copy).
pub const RECOVERY_REVISION_GAP: u64 = 1_000_000;

/// What a recovery changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Shards whose epoch was raised (every shard).
    pub shards: usize,
    /// Moves that were in flight in the copy and were dropped (their source keeps the shard).
    pub moves_dropped: usize,
    /// The revision before and after.
    pub revision_before: Revision,
    pub revision: Revision,
    /// The largest epoch any shard had before, and has now (0 with no shard).
    pub highest_epoch_before: u32,
    pub highest_epoch: u32,
}

impl RegistryState {
    /// Raises every shard's epoch by `gap` and the revision by [`RECOVERY_REVISION_GAP`]
    /// (the module's doc says why), recording `by` and `source` in the audit log.
    /// Refused — with nothing changed — for a gap of 0, or when a shard's epoch would
    /// pass [`Epoch::MAX`].
    pub fn recover(&mut self, gap: u32, at_unix_ms: u64, by: &str, source: &str) -> Result<Recovery, RegistryError> {
        if gap == 0 {
            return Err(RegistryError::InvalidConfig("a recovery must raise every epoch by at least 1".into()));
        }
        let raised = |e: Epoch| e.0.checked_add(gap).filter(|&n| n <= Epoch::MAX.0).map(Epoch);
        if let Some((key, _)) = self.shards.iter().find(|(_, r)| raised(r.epoch).is_none()) {
            return Err(RegistryError::EpochExhausted { shard: key.to_string() });
        }
        let revision_before = self.revision;
        let highest_epoch_before = self.shards.values().map(|r| r.epoch.0).max().unwrap_or(0);
        let mut moves_dropped = 0;
        let mut ctx = Ctx { at_ms: at_unix_ms, events: Vec::new() };
        self.history.clear();
        self.revision = Revision(self.revision.0.saturating_add(RECOVERY_REVISION_GAP));
        let keys: Vec<_> = self.shards.keys().cloned().collect();
        for key in &keys {
            let old = self.shards[key].clone();
            if old.moving().is_some() {
                moves_dropped += 1;
            }
            let record = ShardRecord {
                epoch: raised(old.epoch).expect("checked above"),
                state: ShardState::Active,
                handover: Some(Handover { from_cell: old.cell.clone(), from_epoch: old.epoch, seal: None }),
                adopted: false,
                ..old
            };
            self.shards.insert(key.clone(), record);
            self.emit(&mut ctx, key);
        }
        self.keep_history(ctx.events);
        let detail = format!("from {source}: {} shards raised by {gap} epochs, {moves_dropped} moves dropped", keys.len());
        let recorded = self.access.audit(at_unix_ms, &clip(by.to_owned()), "recover", &clip(detail));
        debug_assert!(recorded.is_ok(), "clipped fields fit");
        Ok(Recovery {
            shards: keys.len(),
            moves_dropped,
            revision_before,
            revision: self.revision,
            highest_epoch_before,
            highest_epoch: self.shards.values().map(|r| r.epoch.0).max().unwrap_or(0),
        })
    }

    /// Appends `events` to the bounded history (the oldest go first).
    pub(crate) fn keep_history(&mut self, events: Vec<OwnershipEvent>) {
        for ev in events {
            if self.history.len() == crate::state::HISTORY_CAP {
                self.history.pop_front();
            }
            self.history.push_back(ev);
        }
    }
}
