//! Reads of the registry. The server calls these after a read-index barrier, so they
//! are linearizable; the leader's lease bookkeeping uses [`RegistryState::shards_of_cell`].

use crate::outcome::OwnershipEvent;
use crate::state::{CellRecord, Handover, RegionState, RegistryState, ShardRecord, ShardState};
use holdfast_core::{CellId, Epoch, NamespaceConfig, NamespaceName, RegionId, Revision, ShardKey};

/// A shard as its owning cell must serve it (one item of an ownership renewal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedShard {
    pub shard: ShardKey,
    pub epoch: Epoch,
    /// A planned move away is in progress: grant nothing new, seal, report the seal.
    pub draining: bool,
    /// How this cell got the shard (for lock-delay on adoption); `None` if it never moved.
    pub handover: Option<Handover>,
    /// The cell reported serving this epoch (`Adopted`).
    pub adopted: bool,
}

/// Why [`RegistryState::events_after`] cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    #[error("revision {requested} is compacted; the oldest retained event is {oldest}")]
    Compacted { requested: Revision, oldest: Revision },
    #[error("revision {requested} is ahead of the registry's {current}")]
    Ahead { requested: Revision, current: Revision },
}

impl RegistryState {
    /// Role grants, token hashes and the audit log.
    pub fn access(&self) -> &crate::access::Access {
        &self.access
    }

    /// The revision of the latest ownership event (0 before the first).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    pub fn region(&self, region: &RegionId) -> Option<RegionState> {
        self.regions.get(region).copied()
    }

    pub fn regions(&self) -> impl Iterator<Item = (&RegionId, RegionState)> {
        self.regions.iter().map(|(r, s)| (r, *s))
    }

    pub fn cell(&self, cell: &CellId) -> Option<&CellRecord> {
        self.cells.get(cell)
    }

    pub fn cells(&self) -> impl Iterator<Item = (&CellId, &CellRecord)> {
        self.cells.iter()
    }

    pub fn namespace(&self, name: &NamespaceName) -> Option<&NamespaceConfig> {
        self.namespaces.get(name)
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &NamespaceConfig> {
        self.namespaces.values()
    }

    /// Every shard, in key order.
    pub fn list_shards(&self) -> impl Iterator<Item = (&ShardKey, &ShardRecord)> {
        self.shards.iter()
    }

    /// Alias of [`RegistryState::shard`] under the API's name.
    pub fn get_owner(&self, key: &ShardKey) -> Result<&ShardRecord, crate::RegistryError> {
        self.shard(key)
    }

    /// The shards `cell` may serve under its ownership lease: those it owns, marked
    /// `draining` during a planned move away. A shard in an unplanned move away is not
    /// listed: its source's lease on it must run out, so renewals stop covering it.
    /// Whether the owning cell has reported serving `shard` at its current epoch.
    pub fn is_adopted(&self, shard: &ShardKey) -> bool {
        self.shards.get(shard).is_some_and(|r| r.adopted)
    }

    pub fn shards_of_cell(&self, cell: &CellId) -> Vec<OwnedShard> {
        self.shards
            .iter()
            .filter(|(_, r)| &r.cell == cell)
            .filter_map(|(k, r)| {
                let draining = match &r.state {
                    ShardState::Active => false,
                    ShardState::Moving(m) if m.planned => true,
                    ShardState::Moving(_) => return None,
                };
                Some(OwnedShard { shard: k.clone(), epoch: r.epoch, draining, handover: r.handover.clone(), adopted: r.adopted })
            })
            .collect()
    }

    /// Events with a revision above `after`, oldest first. `after` = 0 asks for every
    /// retained event. Fails if some of the asked-for events were dropped from the
    /// bounded history, or if `after` is in the future.
    pub fn events_after(&self, after: Revision) -> Result<Vec<OwnershipEvent>, HistoryError> {
        if after > self.revision {
            return Err(HistoryError::Ahead { requested: after, current: self.revision });
        }
        if let Some(oldest) = self.history.front() {
            if after.0 + 1 < oldest.revision.0 {
                return Err(HistoryError::Compacted { requested: after, oldest: oldest.revision });
            }
        }
        let skip = self.history.partition_point(|e| e.revision <= after);
        Ok(self.history.iter().skip(skip).cloned().collect())
    }
}
