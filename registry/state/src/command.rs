//! The entries of the registry's Raft log. Every change of placement or configuration
//! is one of these.
//!
//! Time enters only as data: `at_unix_ms` is the leader's wall clock, for display and
//! audit. The one time-based decision of the registry — an unplanned move may complete
//! because the source cell's ownership lease has run out — is made by the leader on its
//! monotonic clock and arrives here as an explicit `CompleteMove`.

use crate::access::TokenRecord;
use crate::failover::FailoverPolicy;
use crate::state::RegionState;
use holdfast_core::Grant;
use holdfast_core::{CellId, Epoch, FencingToken, LockName, NamespaceConfig, NamespaceName, NodeId, RegionId, ShardKey};
use serde::{Deserialize, Serialize};

/// One log entry: a command plus the leader's wall clock when it proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Leader's wall clock (Unix ms). Shown to humans; never compared for a decision.
    pub at_unix_ms: u64,
    pub cmd: Command,
}

impl Entry {
    pub fn new(at_unix_ms: u64, cmd: Command) -> Entry {
        Entry { at_unix_ms, cmd }
    }
}

/// One node of a cell, as clients and peers reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellMember {
    pub node_id: NodeId,
    /// host:port of the node's LockService.
    pub client_addr: String,
    /// host:port of the node's Raft service.
    pub raft_addr: String,
}

/// What an entry asks the registry to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    // ---- topology
    /// A new region, `Active`. A region that exists already is refused.
    CreateRegion {
        region: RegionId,
    },
    /// `Active`, `Draining` (no new placements or moves into it) or `Evacuated` (only
    /// once it owns no shard).
    SetRegionState {
        region: RegionId,
        state: RegionState,
    },
    /// A new cell in a region, or new members for a known cell (same region).
    RegisterCell {
        cell: CellId,
        region: RegionId,
        members: Vec<CellMember>,
    },

    // ---- namespaces
    /// A new namespace. Its version becomes 1 whatever the config says.
    CreateNamespace {
        config: NamespaceConfig,
    },
    /// Replaces a namespace's config if its current version is `expected_version`;
    /// the version becomes `expected_version + 1`.
    UpdateNamespace {
        config: NamespaceConfig,
        expected_version: u64,
    },

    // ---- placement and transfers
    /// First placement of a shard on a cell, at epoch 1.
    PlaceShard {
        shard: ShardKey,
        cell: CellId,
    },
    /// `Active(A, e)` → `Moving(A → to_cell, e)`. A planned move waits for the source's
    /// seal; an unplanned one for the source's ownership lease to run out.
    BeginMove {
        shard: ShardKey,
        to_cell: CellId,
        planned: bool,
    },
    /// The source cell sealed the shard at `epoch`: its holds ended with `MOVED`, and
    /// `highest` is the largest token it issued (`None`: it issued none).
    Sealed {
        shard: ShardKey,
        epoch: Epoch,
        highest: Option<FencingToken>,
        held_locks: Vec<LockName>,
    },
    /// `Moving(A → B, e)` → `Active(B, e + 1)`. A planned move must be sealed first; for
    /// an unplanned one the leader proposes this once A's lease is known to have run out.
    CompleteMove {
        shard: ShardKey,
        epoch: Epoch,
    },
    /// `Moving(A → B, e)` → `Active(A, e)`, or `Active(A, e + 1)` when A already sealed
    /// (a sealed cell can only get the shard back at a new epoch).
    AbortMove {
        shard: ShardKey,
        epoch: Epoch,
    },
    /// The owning cell reported serving the shard at `epoch` (once per epoch).
    Adopted {
        shard: ShardKey,
        epoch: Epoch,
    },
    /// The owning cell no longer serves an epoch it had adopted (its data was lost or
    /// restored from an old copy, or it sealed the shard): `Active(same cell, epoch + 1)`
    /// with an unsealed handover, so it re-adopts with every lock in lock-delay and
    /// every token larger than any it issued before.
    Restarted {
        shard: ShardKey,
        epoch: Epoch,
    },

    // ---- access and audit (new variants go last: older entries decode unchanged)
    /// `by` asked for `cmd`: applied as it is and, when it succeeds, recorded in the
    /// audit log in the same entry.
    Audited {
        by: String,
        cmd: Box<Command>,
    },
    /// A role for a principal.
    Grant {
        grant: Grant,
    },
    Revoke {
        grant: Grant,
    },
    /// A bearer token (its hash).
    CreateToken {
        token: TokenRecord,
    },
    /// The token and every grant to it.
    RevokeToken {
        name: String,
    },
    /// An action taken elsewhere (a break-lock at a cell), recorded.
    Audit {
        by: String,
        action: String,
        detail: String,
    },
    /// Forgets a cell that owns no shard and is no move's target (new variants go
    /// last: entries are encoded by variant index).
    RetireCell {
        cell: CellId,
    },
    /// Opts a namespace in to automatic failover (`Some`), or out (`None`):
    /// `failover.rs`.
    SetAutoFailover {
        ns: NamespaceName,
        policy: Option<FailoverPolicy>,
    },
}

impl Command {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::CreateRegion { .. } => "create_region",
            Command::SetRegionState { .. } => "set_region_state",
            Command::RegisterCell { .. } => "register_cell",
            Command::CreateNamespace { .. } => "create_namespace",
            Command::UpdateNamespace { .. } => "update_namespace",
            Command::PlaceShard { .. } => "place_shard",
            Command::BeginMove { .. } => "begin_move",
            Command::Sealed { .. } => "sealed",
            Command::CompleteMove { .. } => "complete_move",
            Command::AbortMove { .. } => "abort_move",
            Command::Adopted { .. } => "adopted",
            Command::Restarted { .. } => "restarted",
            Command::Audited { cmd, .. } => cmd.kind(),
            Command::Grant { .. } => "grant",
            Command::Revoke { .. } => "revoke",
            Command::CreateToken { .. } => "create_token",
            Command::RevokeToken { .. } => "revoke_token",
            Command::Audit { .. } => "audit",
            Command::RetireCell { .. } => "retire_cell",
            Command::SetAutoFailover { .. } => "set_auto_failover",
        }
    }
}
