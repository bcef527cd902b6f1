//! Placement and transfers: the commands that change which cell owns a shard and at
//! which epoch. Each checks everything before its first write, so a refusal changes
//! nothing, and each change emits one ownership event.

use crate::outcome::{Outcome, RegistryError};
use crate::state::{Ctx, Handover, Move, RegistryState, SealReport, ShardRecord, ShardState};
use holdfast_core::{CellId, Epoch, FencingToken, LockName, ShardKey};

impl RegistryState {
    /// The shard's record, or why there is none (its namespace or the shard is unknown).
    pub fn shard(&self, key: &ShardKey) -> Result<&ShardRecord, RegistryError> {
        if !self.namespaces.contains_key(&key.ns) {
            return Err(RegistryError::UnknownNamespace(key.ns.to_string()));
        }
        self.shards.get(key).ok_or_else(|| RegistryError::UnknownShard(key.to_string()))
    }

    /// The shard's record, checked to be at `epoch`.
    fn shard_at(&self, key: &ShardKey, epoch: Epoch) -> Result<&ShardRecord, RegistryError> {
        let record = self.shard(key)?;
        if record.epoch != epoch {
            return Err(RegistryError::StaleEpoch { shard: key.to_string(), expected: epoch.0, actual: record.epoch.0 });
        }
        Ok(record)
    }

    fn finish(&mut self, ctx: &mut Ctx, key: &ShardKey, record: ShardRecord) -> Result<Outcome, RegistryError> {
        self.shards.insert(key.clone(), record.clone());
        self.emit(ctx, key);
        Ok(Outcome::Shard { shard: key.clone(), record })
    }

    pub(crate) fn place_shard(&mut self, ctx: &mut Ctx, key: &ShardKey, cell: &CellId) -> Result<Outcome, RegistryError> {
        if !self.namespaces.contains_key(&key.ns) {
            return Err(RegistryError::UnknownNamespace(key.ns.to_string()));
        }
        if self.shards.contains_key(key) {
            return Err(RegistryError::AlreadyExists { kind: "shard".into(), name: key.to_string() });
        }
        let region = self.known_cell(cell)?.region.clone();
        self.active_region(&region, "nothing is placed in it")?;
        let record = ShardRecord { region, cell: cell.clone(), epoch: Epoch(1), state: ShardState::Active, handover: None, adopted: false };
        self.finish(ctx, key, record)
    }

    pub(crate) fn begin_move(&mut self, ctx: &mut Ctx, key: &ShardKey, to: &CellId, planned: bool) -> Result<Outcome, RegistryError> {
        let record = self.shard(key)?;
        if let Some(m) = record.moving() {
            return Err(RegistryError::AlreadyMoving { shard: key.to_string(), to_cell: m.to_cell.to_string() });
        }
        let target_region = self.known_cell(to)?.region.clone();
        if &record.cell == to {
            return Err(RegistryError::SameCell { shard: key.to_string(), cell: to.to_string() });
        }
        self.active_region(&target_region, "no shard moves into it")?;
        if record.epoch.next().is_none() {
            return Err(RegistryError::EpochExhausted { shard: key.to_string() });
        }
        let record = ShardRecord { state: ShardState::Moving(Move { to_cell: to.clone(), planned, seal: None }), ..record.clone() };
        self.finish(ctx, key, record)
    }

    /// A seal report. On a moving shard it records the seal (a repeat with the same
    /// report is a no-op, so a retried report is safe). On an active shard at the same
    /// epoch it is an epoch bump in place: the owner sealed (its seq ran out, or a
    /// planned move was aborted after it sealed) and can serve again only at `epoch + 1`.
    pub(crate) fn sealed(
        &mut self,
        ctx: &mut Ctx,
        key: &ShardKey,
        epoch: Epoch,
        highest: Option<FencingToken>,
        held_locks: &[LockName],
    ) -> Result<Outcome, RegistryError> {
        let record = self.shard_at(key, epoch)?;
        let report = SealReport { highest, held_locks: held_locks.to_vec() };
        match &record.state {
            ShardState::Moving(m) => match &m.seal {
                Some(recorded) if recorded.highest == highest => Ok(Outcome::Shard { shard: key.clone(), record: record.clone() }),
                Some(recorded) => {
                    Err(RegistryError::SealMismatch { shard: key.to_string(), recorded: recorded.highest.map(|t| t.0), reported: highest.map(|t| t.0) })
                }
                None => {
                    let m = Move { seal: Some(report), ..m.clone() };
                    let record = ShardRecord { state: ShardState::Moving(m), ..record.clone() };
                    self.finish(ctx, key, record)
                }
            },
            ShardState::Active => {
                let next = record.epoch.next().ok_or_else(|| RegistryError::EpochExhausted { shard: key.to_string() })?;
                let handover = Handover { from_cell: record.cell.clone(), from_epoch: epoch, seal: Some(report) };
                let record = ShardRecord { epoch: next, handover: Some(handover), adopted: false, ..record.clone() };
                self.finish(ctx, key, record)
            }
        }
    }

    pub(crate) fn complete_move(&mut self, ctx: &mut Ctx, key: &ShardKey, epoch: Epoch) -> Result<Outcome, RegistryError> {
        let record = self.shard_at(key, epoch)?;
        let m = record.moving().ok_or_else(|| RegistryError::NotMoving { shard: key.to_string() })?;
        if m.planned && m.seal.is_none() {
            return Err(RegistryError::AwaitingSeal { shard: key.to_string() });
        }
        let next = epoch.next().expect("BeginMove checked there is a next epoch");
        let region = self.known_cell(&m.to_cell)?.region.clone();
        let record = ShardRecord {
            region,
            cell: m.to_cell.clone(),
            epoch: next,
            state: ShardState::Active,
            handover: Some(Handover { from_cell: record.cell.clone(), from_epoch: epoch, seal: m.seal.clone() }),
            adopted: false,
        };
        self.finish(ctx, key, record)
    }

    pub(crate) fn abort_move(&mut self, ctx: &mut Ctx, key: &ShardKey, epoch: Epoch) -> Result<Outcome, RegistryError> {
        let record = self.shard_at(key, epoch)?;
        let m = record.moving().ok_or_else(|| RegistryError::NotMoving { shard: key.to_string() })?;
        let record = match &m.seal {
            // Not sealed: the source never stopped owning the shard at this epoch.
            None => ShardRecord { state: ShardState::Active, ..record.clone() },
            // Sealed: the source's cell refuses to adopt the same epoch again.
            Some(seal) => ShardRecord {
                epoch: epoch.next().expect("BeginMove checked there is a next epoch"),
                state: ShardState::Active,
                handover: Some(Handover { from_cell: record.cell.clone(), from_epoch: epoch, seal: Some(seal.clone()) }),
                adopted: false,
                ..record.clone()
            },
        };
        self.finish(ctx, key, record)
    }

    /// The owner serves `epoch`: remembered, so a later renewal without it is noticed.
    /// No ownership changes, so no event. A stale or repeated report changes nothing.
    pub(crate) fn adopted(&mut self, key: &ShardKey, epoch: Epoch) -> Result<Outcome, RegistryError> {
        let record = self.shard_at(key, epoch)?;
        if record.moving().is_none() && !record.adopted {
            let record = ShardRecord { adopted: true, ..record.clone() };
            self.shards.insert(key.clone(), record);
        }
        Ok(Outcome::Shard { shard: key.clone(), record: self.shards[key].clone() })
    }

    /// The owner lost an adopted epoch: it gets the shard back only as a transfer to
    /// itself at the next epoch, unsealed (nobody reported its holders).
    pub(crate) fn restarted(&mut self, ctx: &mut Ctx, key: &ShardKey, epoch: Epoch) -> Result<Outcome, RegistryError> {
        let record = self.shard_at(key, epoch)?;
        if record.moving().is_some() {
            return Err(RegistryError::AlreadyMoving { shard: key.to_string(), to_cell: record.moving().map(|m| m.to_cell.to_string()).unwrap_or_default() });
        }
        if !record.adopted {
            return Err(RegistryError::NotAdopted { shard: key.to_string(), epoch: epoch.0 });
        }
        let next = epoch.next().ok_or_else(|| RegistryError::EpochExhausted { shard: key.to_string() })?;
        let record = ShardRecord {
            epoch: next,
            handover: Some(Handover { from_cell: record.cell.clone(), from_epoch: epoch, seal: None }),
            adopted: false,
            ..record.clone()
        };
        self.finish(ctx, key, record)
    }
}
