//! What applying an entry produced: a result for the proposer and the ownership events
//! that `WatchOwnership` streams.

use crate::state::{CellRecord, RegionState, ShardRecord};
use holdfast_core::{CellId, Epoch, ErrorCode, NamespaceConfig, NamespaceName, RegionId, Revision, ShardKey};
use serde::{Deserialize, Serialize};

/// The result of one apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub result: Result<Outcome, RegistryError>,
    /// Ownership events in revision order. Empty for a refused command: a refusal
    /// changes nothing.
    pub events: Vec<OwnershipEvent>,
}

/// A successful outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Region {
        region: RegionId,
        state: RegionState,
    },
    Cell {
        cell: CellId,
        record: CellRecord,
    },
    /// The namespace's config as stored, with its new version.
    Namespace {
        config: NamespaceConfig,
    },
    /// The shard's record after the command.
    Shard {
        shard: ShardKey,
        record: ShardRecord,
    },
    /// Access changed; its new version.
    Access {
        version: u64,
    },
    /// An audit record was appended.
    Audited {
        seq: u64,
    },
    /// A cell was forgotten; its record as it was.
    Retired {
        cell: CellId,
        record: CellRecord,
    },
    /// A namespace's automatic failover as it now is (`None`: off).
    AutoFailover {
        ns: NamespaceName,
        policy: Option<crate::failover::FailoverPolicy>,
    },
}

/// Why a command was refused. A refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown region {0}")]
    UnknownRegion(String),
    #[error("unknown cell {0}")]
    UnknownCell(String),
    #[error("unknown namespace {0}")]
    UnknownNamespace(String),
    #[error("unknown shard {0}")]
    UnknownShard(String),
    #[error("{kind} {name} already exists")]
    AlreadyExists { kind: String, name: String },
    #[error("invalid namespace config: {0}")]
    InvalidConfig(String),
    #[error("namespace {ns} is at version {current}, the update expected version {expected}; re-read it and retry")]
    VersionConflict { ns: String, expected: u64, current: u64 },
    #[error("cell {cell} is in region {region}; it cannot be re-registered in {requested}")]
    CellRegionMismatch { cell: String, region: String, requested: String },
    #[error("a cell needs at least one member, with node ids unique within it and non-empty addresses")]
    BadMembers,
    #[error("region {region} is {state}: {why}")]
    RegionNotActive { region: String, state: RegionState, why: String },
    #[error("region {region} still owns {shards} shard(s); move them before marking it evacuated")]
    RegionNotEmpty { region: String, shards: usize },
    #[error("shard {shard} is already on cell {cell}")]
    SameCell { shard: String, cell: String },
    #[error("shard {shard} is already moving to cell {to_cell}; complete or abort that move first")]
    AlreadyMoving { shard: String, to_cell: String },
    #[error("shard {shard} is not moving")]
    NotMoving { shard: String },
    #[error("shard {shard} is in a planned move and its source has not reported its seal yet")]
    AwaitingSeal { shard: String },
    #[error("shard {shard} is at epoch {actual}, the request named epoch {expected}")]
    StaleEpoch { shard: String, expected: u32, actual: u32 },
    #[error("shard {shard} was sealed with highest token {recorded:?}; a second report says {reported:?}")]
    SealMismatch { shard: String, recorded: Option<u64>, reported: Option<u64> },
    #[error("shard {shard} has used every epoch; it cannot move again")]
    EpochExhausted { shard: String },
    #[error("shard {shard} was never reported adopted at epoch {epoch}")]
    NotAdopted { shard: String, epoch: u32 },
    /// A committed entry this build cannot decode (written by a newer release).
    #[error("unavailable: {0}")]
    Undecodable(String),
    /// A grant, revoke, token or audit record that does not hold together.
    #[error("{0}")]
    Access(String),
    #[error("cell {cell} still owns or is receiving {shards} shard(s); move them before retiring it")]
    CellNotEmpty { cell: String, shards: usize },
}

impl RegistryError {
    /// The stable code clients see.
    pub fn code(&self) -> ErrorCode {
        match self {
            RegistryError::UnknownNamespace(_) => ErrorCode::UnknownNamespace,
            RegistryError::UnknownShard(_) => ErrorCode::UnknownShard,
            RegistryError::AlreadyMoving { .. } | RegistryError::AwaitingSeal { .. } => ErrorCode::Moving,
            RegistryError::StaleEpoch { .. } => ErrorCode::StaleEpoch,
            RegistryError::Undecodable(_) => ErrorCode::Unavailable,
            RegistryError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            RegistryError::VersionConflict { .. } => ErrorCode::Conflict,
            RegistryError::UnknownRegion(_)
            | RegistryError::UnknownCell(_)
            | RegistryError::InvalidConfig(_)
            | RegistryError::CellRegionMismatch { .. }
            | RegistryError::BadMembers
            | RegistryError::RegionNotActive { .. }
            | RegistryError::RegionNotEmpty { .. }
            | RegistryError::SameCell { .. }
            | RegistryError::NotMoving { .. }
            | RegistryError::SealMismatch { .. }
            | RegistryError::EpochExhausted { .. }
            | RegistryError::NotAdopted { .. }
            | RegistryError::CellNotEmpty { .. }
            | RegistryError::Access(_) => ErrorCode::InvalidArgument,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }
}

/// One change of a shard's placement or transfer state. Revisions are registry-wide
/// and increase by one per event, so a watcher sees one order and can resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipEvent {
    pub revision: Revision,
    pub at_unix_ms: u64,
    pub shard: ShardKey,
    /// The shard's record after the change: home region, cell, epoch, state.
    pub record: ShardRecord,
}

impl OwnershipEvent {
    pub fn region(&self) -> &RegionId {
        &self.record.region
    }

    pub fn cell(&self) -> &CellId {
        &self.record.cell
    }

    pub fn epoch(&self) -> Epoch {
        self.record.epoch
    }
}
