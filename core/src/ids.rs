//! Numeric ids. Each is its own type so that one can never be passed for another.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A client session in one cell. Assigned by the cell's state machine from a counter
/// in the replicated state, so every replica agrees and ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

/// Most sessions one KeepAlive message renews: its `session_id` and the batch in
/// `more` (proto/holdfast/lock/v1/lock.proto).
pub const MAX_RENEWAL_BATCH: usize = 1_024;

/// A position in a cell's event history; every state change that a Watch can see
/// gets the next revision. Never goes back, never repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Revision(pub u64);

/// A Raft node of a cell or of the registry. Never reused within a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{:x}", self.0)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}
