//! The SDK's errors, and the one place a gRPC status becomes one of them.

use holdfast_core::{ErrorCode, NameError, SessionId};
use std::fmt;

/// Why a session is lost. Once lost, a session stays lost: the worker must stop
/// every effectful step under its locks, and a new session is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// No renewal was confirmed within the safe window (2/3 of the TTL, counted from
    /// when the last confirmed renewal was sent): the cell was unreachable or slow.
    /// The cell may not have expired the session yet; it will, unless a renewal that
    /// the SDK no longer sends arrives.
    RenewTimedOut,
    /// The worker stopped calling [`crate::Session::progress`] within its progress
    /// timeout, so the SDK stopped renewing and let the lease run out.
    NoProgress,
    /// The cell answered that the session expired or does not exist.
    Expired,
    /// The cell refused a renewal with a code that no retry can change.
    Refused(ErrorCode),
    /// The session's shard left its cell (a transfer): its locks ended with `MOVED`.
    /// A [`crate::SessionKeeper`] creates a new session in the shard's new cell.
    Moved,
    /// The caller closed the session ([`crate::Session::close`]).
    Closed,
    /// One hold, not the session: an administrator broke the lock (BreakLock).
    Broken,
    /// One hold: the namespace's max hold time was reached.
    MaxHold,
    /// One hold ended at the cell some other way the SDK did not see happen: released
    /// with its token from elsewhere, or ended while no watch was open.
    Ended,
}

impl LossReason {
    /// Did the session end without the caller asking? Counted in
    /// `lock_lease_expired_while_held_total` when a lock was held.
    pub fn is_unplanned(self) -> bool {
        !matches!(self, LossReason::Closed)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::RenewTimedOut => f.write_str("no renewal confirmed within 2/3 of the TTL"),
            LossReason::NoProgress => f.write_str("the worker stopped reporting progress"),
            LossReason::Expired => f.write_str("the cell expired the session"),
            LossReason::Refused(c) => write!(f, "the cell refused a renewal: {c}"),
            LossReason::Moved => f.write_str("the session's shard moved to another cell"),
            LossReason::Closed => f.write_str("closed by the caller"),
            LossReason::Broken => f.write_str("an administrator broke the lock"),
            LossReason::MaxHold => f.write_str("the namespace's max hold time was reached"),
            LossReason::Ended => f.write_str("the hold ended at the cell"),
        }
    }
}

/// Everything an SDK call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The cell answered with a stable error code (`LOCK_HELD`, `TIMEOUT`, ...).
    /// Retryable codes only reach the caller once the retry budget is spent.
    #[error("{code}: {message}")]
    Refused { code: ErrorCode, message: String },

    /// No stable code: the call failed on the way (connection refused or reset, a
    /// per-attempt timeout, a node shutting down). For a write the outcome is
    /// **unknown**: the SDK retries Acquire with the same request id, so a retry
    /// learns the real outcome.
    #[error("transport error ({grpc:?}): {message}")]
    Transport { grpc: tonic::Code, message: String },

    /// The request was refused before it was sent (a bad name, value or option).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The session is lost; nothing can be acquired or renewed through it.
    #[error("session {session} is lost: {reason}")]
    SessionLost { session: SessionId, reason: LossReason },

    /// This hold ended at the cell while its session lives on (a break, the max hold
    /// time): the worker must stop acting under it.
    #[error("the hold of {lock} with token {token} ended: {reason}")]
    HoldEnded { lock: String, token: u64, reason: LossReason },
}

impl Error {
    /// The stable code, if the cell gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Refused { code, .. } => Some(*code),
            Error::InvalidArgument(_) => Some(ErrorCode::InvalidArgument),
            _ => None,
        }
    }

    /// May the same request (same request id) be sent again and succeed?
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Refused { code, .. } => code.is_retryable(),
            Error::Transport { grpc, .. } => holdfast_rpc::status::is_transient(*grpc),
            Error::InvalidArgument(_) | Error::SessionLost { .. } | Error::HoldEnded { .. } => false,
        }
    }
}

impl From<NameError> for Error {
    fn from(e: NameError) -> Error {
        Error::InvalidArgument(e.to_string())
    }
}

impl From<holdfast_rpc::CallError> for Error {
    /// The one mapping of a failed call to an SDK error: a stable code is the cell's
    /// answer; anything else means the call never got one.
    fn from(e: holdfast_rpc::CallError) -> Error {
        match e {
            holdfast_rpc::CallError::Refused { code, status } => Error::Refused { code, message: status.message().to_owned() },
            holdfast_rpc::CallError::Failed(s) => Error::Transport { grpc: s.code(), message: s.message().to_owned() },
            holdfast_rpc::CallError::Unreachable(message) => Error::Transport { grpc: tonic::Code::Unavailable, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_rpc::status::status;
    use holdfast_rpc::CallError;

    #[test]
    fn a_coded_answer_is_the_cells_and_judged_by_its_code() {
        let e = Error::from(CallError::Refused { code: ErrorCode::NotLeader, status: status(ErrorCode::NotLeader, "not me") });
        assert_eq!(e.code(), Some(ErrorCode::NotLeader));
        assert!(e.is_retryable());
        let held = Error::from(CallError::Refused { code: ErrorCode::LockHeld, status: status(ErrorCode::LockHeld, "held") });
        assert!(!held.is_retryable(), "a coded answer is judged by its code");
    }

    #[test]
    fn no_answer_is_transport_and_retryable_only_when_transient() {
        assert!(Error::from(CallError::Unreachable("connection refused".into())).is_retryable());
        assert!(!Error::from(CallError::Failed(tonic::Status::unimplemented("no such service"))).is_retryable());
    }
}
