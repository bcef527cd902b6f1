//! The registry's data and the one entry point that changes it: [`RegistryState::apply`].
//! Topology and namespace commands live here; placement and transfers in `transfers.rs`.
//!
//! Invariants kept here (and checked by the property tests):
//! - every shard has exactly one owning cell, which exists, and its home region is
//!   that cell's region;
//! - a shard's epoch never decreases, and it increases by one on every completed
//!   transfer (and on an abort after the source sealed);
//! - every ownership event takes the next revision;
//! - a refused command changes nothing (every check happens before the first write);
//! - an `Evacuated` region owns no shard.

use crate::access::{Access, MAX_FIELD};
use crate::command::{CellMember, Command, Entry};
use crate::outcome::{Applied, Outcome, OwnershipEvent, RegistryError};
use holdfast_core::{CellId, Epoch, FencingToken, LockName, NamespaceConfig, NamespaceName, RegionId, Revision, ShardKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// Ownership events kept for `WatchOwnership` to resume from. Older revisions answer
/// "compacted".
pub const HISTORY_CAP: usize = 10_000;

/// A region's lifecycle. Evacuation is `Active → Draining → Evacuated`, and
/// `Evacuated → Active` rolls it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RegionState {
    /// Takes placements and incoming moves.
    Active,
    /// Being emptied: no new placement or move goes into it; its shards move out.
    Draining,
    /// Empty and out of service: nothing is placed or moved into it.
    Evacuated,
}

impl RegionState {
    pub fn as_str(self) -> &'static str {
        match self {
            RegionState::Active => "active",
            RegionState::Draining => "draining",
            RegionState::Evacuated => "evacuated",
        }
    }
}

impl fmt::Display for RegionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cell: one Raft group in one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRecord {
    pub region: RegionId,
    pub members: Vec<CellMember>,
}

/// What a source cell reported when it sealed a shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealReport {
    /// The largest token it issued at the sealed epoch; `None` if it issued none.
    pub highest: Option<FencingToken>,
    /// Locks that had holders when it sealed: the target starts them in lock-delay.
    pub held_locks: Vec<LockName>,
}

/// A transfer in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub to_cell: CellId,
    /// Planned (drain, seal, then bump) or unplanned (wait out the source's lease).
    pub planned: bool,
    /// The source's seal, once reported.
    pub seal: Option<SealReport>,
}

/// Whether a shard is being served or is changing hands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardState {
    Active,
    Moving(Move),
}

/// How the current owner got the shard: what the cell that adopts it must know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    pub from_cell: CellId,
    /// The epoch the previous owner served.
    pub from_epoch: Epoch,
    /// The previous owner's seal; `None` for an unplanned move, where any lock may
    /// still have had a holder (the adopting cell treats every lock as delayed).
    pub seal: Option<SealReport>,
}

/// Where a shard lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// The home region: always the owning cell's region.
    pub region: RegionId,
    pub cell: CellId,
    /// Bumped on every transfer; tokens carry it in their high bits.
    pub epoch: Epoch,
    pub state: ShardState,
    /// `None` for a shard that has never moved.
    pub handover: Option<Handover>,
    /// The owning cell has reported serving this epoch. From then on, a renewal from
    /// that cell that does not report it means the cell lost the shard's data (or
    /// sealed it): it gets the shard back only at the next epoch ([`Command::Restarted`]).
    pub adopted: bool,
}

impl ShardRecord {
    pub fn moving(&self) -> Option<&Move> {
        match &self.state {
            ShardState::Moving(m) => Some(m),
            ShardState::Active => None,
        }
    }
}

/// The whole replicated state of the registry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RegistryState {
    pub(crate) regions: BTreeMap<RegionId, RegionState>,
    pub(crate) cells: BTreeMap<CellId, CellRecord>,
    pub(crate) namespaces: BTreeMap<NamespaceName, NamespaceConfig>,
    pub(crate) shards: BTreeMap<ShardKey, ShardRecord>,
    pub(crate) revision: Revision,
    pub(crate) history: VecDeque<OwnershipEvent>,
    /// Who may do what, and the audit log. Outside the serde of this struct: a
    /// snapshot carries it next to the rest (format version 2), so version 1
    /// snapshots, written before it existed, still load (with none).
    #[serde(skip)]
    pub(crate) access: Access,
    /// Namespaces opted in to automatic failover. Outside the serde of this struct too:
    /// a snapshot carries it after the access state (format version 3).
    #[serde(skip)]
    pub(crate) auto_failover: BTreeMap<NamespaceName, crate::failover::FailoverPolicy>,
}

/// The per-apply context: the entry's timestamp and the events produced so far.
pub(crate) struct Ctx {
    pub(crate) at_ms: u64,
    pub(crate) events: Vec<OwnershipEvent>,
}

impl RegistryState {
    pub fn new() -> RegistryState {
        RegistryState::default()
    }

    /// Applies one committed entry. Deterministic: the same state and entry give the
    /// same result and the same next state on every replica.
    pub fn apply(&mut self, entry: &Entry) -> Applied {
        let mut ctx = Ctx { at_ms: entry.at_unix_ms, events: Vec::new() };
        let result = match &entry.cmd {
            Command::CreateRegion { region } => self.create_region(region),
            Command::SetRegionState { region, state } => self.set_region_state(region, *state),
            Command::RegisterCell { cell, region, members } => self.register_cell(cell, region, members),
            Command::RetireCell { cell } => self.retire_cell(cell),
            Command::CreateNamespace { config } => self.create_namespace(config),
            Command::UpdateNamespace { config, expected_version } => self.update_namespace(config, *expected_version),
            Command::PlaceShard { shard, cell } => self.place_shard(&mut ctx, shard, cell),
            Command::BeginMove { shard, to_cell, planned } => self.begin_move(&mut ctx, shard, to_cell, *planned),
            Command::Sealed { shard, epoch, highest, held_locks } => self.sealed(&mut ctx, shard, *epoch, *highest, held_locks),
            Command::CompleteMove { shard, epoch } => self.complete_move(&mut ctx, shard, *epoch),
            Command::AbortMove { shard, epoch } => self.abort_move(&mut ctx, shard, *epoch),
            Command::Adopted { shard, epoch } => self.adopted(shard, *epoch),
            Command::Restarted { shard, epoch } => self.restarted(&mut ctx, shard, *epoch),
            Command::Audited { by, cmd } => {
                let inner = self.apply(&Entry::new(entry.at_unix_ms, (**cmd).clone()));
                if inner.result.is_ok() {
                    // Both bounded here: an apply must never fail on what it records.
                    let recorded = self.access.audit(entry.at_unix_ms, &clip(by.clone()), cmd.kind(), &describe(cmd));
                    debug_assert!(recorded.is_ok(), "clipped fields fit");
                }
                // The inner apply already kept its events in the history.
                return inner;
            }
            Command::Grant { grant } => self.access.grant(grant).map(|version| Outcome::Access { version }).map_err(RegistryError::Access),
            Command::Revoke { grant } => self.access.revoke(grant).map(|version| Outcome::Access { version }).map_err(RegistryError::Access),
            Command::CreateToken { token } => self.access.create_token(token).map(|version| Outcome::Access { version }).map_err(RegistryError::Access),
            Command::RevokeToken { name } => self.access.revoke_token(name).map(|version| Outcome::Access { version }).map_err(RegistryError::Access),
            Command::SetAutoFailover { ns, policy } => self.set_auto_failover(ns, policy),
            Command::Audit { by, action, detail } => {
                self.access.audit(entry.at_unix_ms, by, action, detail).map(|seq| Outcome::Audited { seq }).map_err(RegistryError::Access)
            }
        };
        debug_assert!(result.is_ok() || ctx.events.is_empty(), "a refused command emitted events");
        self.keep_history(ctx.events.clone());
        Applied { result, events: ctx.events }
    }

    /// Records an ownership event for `shard`'s current record with the next revision.
    pub(crate) fn emit(&mut self, ctx: &mut Ctx, shard: &ShardKey) {
        let record = self.shards.get(shard).expect("emit after the record is written").clone();
        self.revision = Revision(self.revision.0 + 1);
        ctx.events.push(OwnershipEvent { revision: self.revision, at_unix_ms: ctx.at_ms, shard: shard.clone(), record });
    }

    /// The region, checked to take new placements and incoming moves.
    pub(crate) fn active_region(&self, region: &RegionId, why: &str) -> Result<(), RegistryError> {
        match self.regions.get(region) {
            None => Err(RegistryError::UnknownRegion(region.to_string())),
            Some(RegionState::Active) => Ok(()),
            Some(state) => Err(RegistryError::RegionNotActive { region: region.to_string(), state: *state, why: why.to_owned() }),
        }
    }

    pub(crate) fn known_cell(&self, cell: &CellId) -> Result<&CellRecord, RegistryError> {
        self.cells.get(cell).ok_or_else(|| RegistryError::UnknownCell(cell.to_string()))
    }

    // ---- topology

    fn create_region(&mut self, region: &RegionId) -> Result<Outcome, RegistryError> {
        if self.regions.contains_key(region) {
            return Err(RegistryError::AlreadyExists { kind: "region".into(), name: region.to_string() });
        }
        self.regions.insert(region.clone(), RegionState::Active);
        Ok(Outcome::Region { region: region.clone(), state: RegionState::Active })
    }

    fn set_region_state(&mut self, region: &RegionId, state: RegionState) -> Result<Outcome, RegistryError> {
        if !self.regions.contains_key(region) {
            return Err(RegistryError::UnknownRegion(region.to_string()));
        }
        if state == RegionState::Evacuated {
            // Shards homed there, and shards on their way there (completing such a
            // move would home a shard in an evacuated region).
            let moving_in = |s: &ShardRecord| s.moving().and_then(|m| self.cells.get(&m.to_cell)).is_some_and(|c| &c.region == region);
            let owned = self.shards.values().filter(|s| &s.region == region || moving_in(s)).count();
            if owned > 0 {
                return Err(RegistryError::RegionNotEmpty { region: region.to_string(), shards: owned });
            }
        }
        self.regions.insert(region.clone(), state);
        Ok(Outcome::Region { region: region.clone(), state })
    }

    fn register_cell(&mut self, cell: &CellId, region: &RegionId, members: &[CellMember]) -> Result<Outcome, RegistryError> {
        let unique: BTreeSet<_> = members.iter().map(|m| m.node_id).collect();
        let addrs_ok = members.iter().all(|m| !m.client_addr.is_empty() && !m.raft_addr.is_empty());
        if members.is_empty() || unique.len() != members.len() || !addrs_ok {
            return Err(RegistryError::BadMembers);
        }
        match self.cells.get(cell) {
            Some(existing) if &existing.region != region => {
                return Err(RegistryError::CellRegionMismatch { cell: cell.to_string(), region: existing.region.to_string(), requested: region.to_string() })
            }
            // New members for a known cell: allowed in any region state, so a draining
            // region's cells stay reachable while their shards move out.
            Some(_) => {
                if !self.regions.contains_key(region) {
                    return Err(RegistryError::UnknownRegion(region.to_string()));
                }
            }
            None => self.active_region(region, "no new cell is registered in it")?,
        }
        let record = CellRecord { region: region.clone(), members: members.to_vec() };
        self.cells.insert(cell.clone(), record.clone());
        Ok(Outcome::Cell { cell: cell.clone(), record })
    }

    fn retire_cell(&mut self, cell: &CellId) -> Result<Outcome, RegistryError> {
        self.known_cell(cell)?;
        let involved = self.shards.values().filter(|s| &s.cell == cell || s.moving().is_some_and(|m| &m.to_cell == cell)).count();
        if involved > 0 {
            return Err(RegistryError::CellNotEmpty { cell: cell.to_string(), shards: involved });
        }
        let record = self.cells.remove(cell).expect("known above");
        Ok(Outcome::Retired { cell: cell.clone(), record })
    }

    // ---- namespaces

    fn create_namespace(&mut self, config: &NamespaceConfig) -> Result<Outcome, RegistryError> {
        if self.namespaces.contains_key(&config.name) {
            return Err(RegistryError::AlreadyExists { kind: "namespace".into(), name: config.name.to_string() });
        }
        config.validate().map_err(|e| RegistryError::InvalidConfig(e.to_string()))?;
        let stored = NamespaceConfig { version: 1, ..config.clone() };
        self.namespaces.insert(stored.name.clone(), stored.clone());
        Ok(Outcome::Namespace { config: stored })
    }

    fn update_namespace(&mut self, config: &NamespaceConfig, expected: u64) -> Result<Outcome, RegistryError> {
        let current = self.namespaces.get(&config.name).ok_or_else(|| RegistryError::UnknownNamespace(config.name.to_string()))?;
        if current.version != expected {
            return Err(RegistryError::VersionConflict { ns: config.name.to_string(), expected, current: current.version });
        }
        config.validate().map_err(|e| RegistryError::InvalidConfig(e.to_string()))?;
        // An efficiency namespace's locks live in its cells leaders' memory, the others'
        // in their logs (docs/semantics.md): a namespace that changed intent would have
        // holders in both at once. And an efficiency lock that starts guarding data is
        // the mistake docs/design.md warns of: that is a new, reviewed namespace.
        if config.intent != current.intent {
            return Err(RegistryError::InvalidConfig(format!(
                "the intent of namespace {} is {}; it cannot change to {} (create a new namespace)",
                config.name, current.intent, config.intent
            )));
        }
        let stored = NamespaceConfig { version: expected + 1, ..config.clone() };
        self.namespaces.insert(stored.name.clone(), stored.clone());
        Ok(Outcome::Namespace { config: stored })
    }
}

/// What an audited command did, in one bounded line for the audit log.
fn describe(cmd: &Command) -> String {
    let s = match cmd {
        Command::Audited { cmd, .. } => return describe(cmd),
        Command::Grant { grant } | Command::Revoke { grant } => grant.to_string(),
        Command::CreateToken { token } => format!("token {}", token.name),
        other => format!("{other:?}"),
    };
    clip(s)
}

/// `s`, cut to [`MAX_FIELD`] bytes (on a character boundary, marked with `...`).
pub(crate) fn clip(mut s: String) -> String {
    if s.len() > MAX_FIELD {
        let mut cut = MAX_FIELD - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
