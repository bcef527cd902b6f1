//! What applying an entry produced: a result for the proposer and the events that
//! Watch streams and that wake waiting calls.

use holdfast_core::{EndReason, Epoch, ErrorCode, FencingToken, LockName, Mode, RequestId, Revision, Seq, SessionId, ShardKey};
use serde::{Deserialize, Serialize};

/// The result of one apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub result: Result<Outcome, CellError>,
    /// Events in revision order. Empty for a refused command: a refusal changes nothing.
    pub events: Vec<Event>,
}

/// A successful outcome, one variant per kind of answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Nothing to report beyond success (close, clear checkpoint, lift delay, ...).
    Done,
    ConfigApplied {
        version: u64,
    },
    /// A config of this version or newer is already applied.
    ConfigUnchanged {
        current: u64,
    },
    Adopted {
        epoch: Epoch,
    },
    Sealed {
        highest: Option<FencingToken>,
        held_locks: Vec<LockName>,
    },
    SessionCreated {
        session: SessionId,
        ttl_ms: u64,
    },
    Checkpointed {
        sessions: usize,
    },
    /// The hold is granted (or, for a retry, still held) with this token.
    Granted {
        token: FencingToken,
    },
    /// Queued; `position` is 0-based among the waiters.
    Queued {
        position: u32,
    },
    /// A retried acquire whose hold has since ended.
    HoldEnded {
        token: FencingToken,
        reason: EndReason,
    },
    Released {
        token: FencingToken,
    },
    /// CancelWait found the request already granted: the waiter gets its token.
    AlreadyGranted {
        token: FencingToken,
    },
    /// CancelWait removed the waiter.
    WaitCancelled,
    Broken {
        floor: FencingToken,
        ended: Vec<FencingToken>,
    },
    /// Sequence numbers `from..=through` of the shard's epoch are reserved.
    Reserved {
        epoch: Epoch,
        from: Seq,
        through: Seq,
    },
    // ---- new variants go last: results written before them decode unchanged
    /// `ForgetRequests` forgot this many finished acquires.
    Forgotten {
        requests: usize,
    },
}

/// Why a command was refused. A refused command changes no state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CellError {
    #[error("namespace {0} is not served by this cell")]
    UnknownNamespace(String),
    #[error("this cell does not own shard {shard}{}", if *.sealed { " (sealed: it moved away)" } else { "" })]
    NotOwner { shard: String, sealed: bool },
    #[error("shard {shard} is at epoch {actual}, the request expected {expected}")]
    StaleEpoch { shard: String, expected: u32, actual: u32 },
    #[error("session {0} does not exist")]
    UnknownSession(SessionId),
    #[error("session {0} has ended ({1})")]
    SessionExpired(SessionId, EndReason),
    #[error("lock {name} is held{}", by_self.then_some(" by this same session").unwrap_or(""))]
    LockHeld { name: String, by_self: bool },
    #[error("token {token} is not a current holder of {name}{}", ended.map(|r| format!(": that hold ended ({r})")).unwrap_or_default())]
    NotHolder { name: String, token: FencingToken, ended: Option<EndReason> },
    #[error("quota exceeded: {what} is limited to {limit}")]
    QuotaExceeded { what: String, limit: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The leader drew a session id already in use; it draws another and retries.
    #[error("session id {0} is already in use")]
    SessionIdInUse(SessionId),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl CellError {
    /// `session` holds and waits for as many locks as one session may
    /// ([`crate::MAX_HOLDS_AND_WAITS_PER_SESSION`]).
    pub fn session_full(session: SessionId) -> CellError {
        CellError::QuotaExceeded { what: format!("holds and waits of session {session}"), limit: crate::MAX_HOLDS_AND_WAITS_PER_SESSION as u64 }
    }

    /// The stable code clients see.
    pub fn code(&self) -> ErrorCode {
        match self {
            CellError::UnknownNamespace(_) => ErrorCode::UnknownNamespace,
            CellError::NotOwner { .. } => ErrorCode::NotOwner,
            CellError::StaleEpoch { .. } => ErrorCode::StaleEpoch,
            CellError::UnknownSession(_) => ErrorCode::UnknownSession,
            CellError::SessionExpired(..) => ErrorCode::SessionExpired,
            CellError::LockHeld { .. } => ErrorCode::LockHeld,
            CellError::NotHolder { .. } => ErrorCode::NotHolder,
            CellError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            CellError::InvalidArgument(_) | CellError::SessionIdInUse(_) => ErrorCode::InvalidArgument,
            CellError::Unavailable(_) => ErrorCode::Unavailable,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }
}

/// Why a waiter left a queue without being granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DequeueReason {
    /// Its wait timeout ran out.
    Timeout,
    /// Its session closed or expired.
    SessionEnded,
    /// The shard was sealed.
    Moved,
}

/// What happened to a lock; Watch streams these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Queued { mode: Mode },
    Acquired { mode: Mode, token: FencingToken },
    Ended { token: FencingToken, reason: EndReason },
    Dequeued { reason: DequeueReason },
}

/// One event in a cell's history. Revisions are cell-wide, so a watcher of several
/// locks sees one order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub revision: Revision,
    pub at_unix_ms: u64,
    pub shard: ShardKey,
    pub name: LockName,
    pub session: SessionId,
    /// The acquire this event answers, so a waiting call can be woken.
    pub request_id: RequestId,
    pub kind: EventKind,
    pub value: Vec<u8>,
}
