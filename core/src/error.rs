//! The stable error codes of holdfast and the one place that maps them to gRPC
//! status codes and HTTP statuses. Servers, the gateway and the SDK all use this table;
//! nothing else decides what a code means on the wire.

use serde::{Deserialize, Serialize};
use std::fmt;

/// gRPC status codes by their numbers in the gRPC spec, so this crate needs no tonic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum GrpcCode {
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// Every error a client of holdfast can see. The string form is stable and is what
/// clients should match on (gRPC metadata `holdfast-code`, HTTP JSON `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorCode {
    /// This node is not the leader; the leader's client address travels in metadata.
    NotLeader,
    /// The lock is held and the caller asked not to wait.
    LockHeld,
    /// The caller's wait ran out before the lock was granted.
    Timeout,
    /// The token is not a current holder's.
    NotHolder,
    /// The session's lease ran out; its locks are gone.
    SessionExpired,
    /// No such session (never existed, or closed).
    UnknownSession,
    UnknownNamespace,
    UnknownShard,
    /// The request is malformed or out of bounds.
    InvalidArgument,
    /// A count-based limit of the namespace (keys, sessions, waiters, value size).
    QuotaExceeded,
    /// The namespace's acquire rate is exceeded (gateway).
    RateLimited,
    /// The caller's idea of the shard's epoch is not the cell's.
    StaleEpoch,
    /// The shard is being transferred; retry shortly.
    Moving,
    /// This cell does not own the shard (or its ownership lease has lapsed).
    NotOwner,
    /// No quorum, cell unreachable, or shutting down.
    Unavailable,
    /// The caller is known, and may not make this call.
    PermissionDenied,
    /// The caller could not be identified: no client certificate and no bearer
    /// token, or a token that is unknown or revoked.
    Unauthenticated,
    /// What the call creates exists already (a region, a shard placement).
    AlreadyExists,
    /// An update made from a stale read: the record changed since the caller read
    /// it (a namespace's version). Read again, then update.
    Conflict,
}

impl ErrorCode {
    /// Every code, for tests and docs.
    pub const ALL: [ErrorCode; 19] = [
        ErrorCode::NotLeader,
        ErrorCode::LockHeld,
        ErrorCode::Timeout,
        ErrorCode::NotHolder,
        ErrorCode::SessionExpired,
        ErrorCode::UnknownSession,
        ErrorCode::UnknownNamespace,
        ErrorCode::UnknownShard,
        ErrorCode::InvalidArgument,
        ErrorCode::QuotaExceeded,
        ErrorCode::RateLimited,
        ErrorCode::StaleEpoch,
        ErrorCode::Moving,
        ErrorCode::NotOwner,
        ErrorCode::Unavailable,
        ErrorCode::PermissionDenied,
        ErrorCode::Unauthenticated,
        ErrorCode::AlreadyExists,
        ErrorCode::Conflict,
    ];

    /// The stable string code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotLeader => "NOT_LEADER",
            ErrorCode::LockHeld => "LOCK_HELD",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::NotHolder => "NOT_HOLDER",
            ErrorCode::SessionExpired => "SESSION_EXPIRED",
            ErrorCode::UnknownSession => "UNKNOWN_SESSION",
            ErrorCode::UnknownNamespace => "UNKNOWN_NAMESPACE",
            ErrorCode::UnknownShard => "UNKNOWN_SHARD",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::StaleEpoch => "STALE_EPOCH",
            ErrorCode::Moving => "MOVING",
            ErrorCode::NotOwner => "NOT_OWNER",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::AlreadyExists => "ALREADY_EXISTS",
            ErrorCode::Conflict => "CONFLICT",
        }
    }

    /// Parses the stable string code.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// May the same request be sent again (same request id) and succeed?
    /// `NOT_LEADER`, `STALE_EPOCH` are retried at once after following the hint or
    /// refreshing placement; the others after a backoff.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorCode::NotLeader | ErrorCode::StaleEpoch | ErrorCode::Moving | ErrorCode::Unavailable | ErrorCode::RateLimited)
    }

    /// How long a client should wait before sending a retryable request again, when
    /// the server gives no better hint (`holdfast-retry-after-ms` metadata, the HTTP
    /// `Retry-After` header); `None` for an answer no retry changes.
    pub fn retry_after_ms(self) -> Option<u64> {
        match self {
            ErrorCode::NotLeader | ErrorCode::StaleEpoch => Some(0),
            ErrorCode::Unavailable => Some(200),
            ErrorCode::Moving => Some(500),
            ErrorCode::RateLimited => Some(1000),
            _ => None,
        }
    }

    pub fn grpc_code(self) -> GrpcCode {
        match self {
            ErrorCode::NotLeader | ErrorCode::Moving | ErrorCode::Unavailable => GrpcCode::Unavailable,
            ErrorCode::LockHeld => GrpcCode::Aborted,
            ErrorCode::Timeout => GrpcCode::DeadlineExceeded,
            ErrorCode::NotHolder | ErrorCode::SessionExpired | ErrorCode::StaleEpoch | ErrorCode::NotOwner => GrpcCode::FailedPrecondition,
            ErrorCode::UnknownSession | ErrorCode::UnknownNamespace | ErrorCode::UnknownShard => GrpcCode::NotFound,
            ErrorCode::InvalidArgument => GrpcCode::InvalidArgument,
            ErrorCode::QuotaExceeded | ErrorCode::RateLimited => GrpcCode::ResourceExhausted,
            ErrorCode::PermissionDenied => GrpcCode::PermissionDenied,
            ErrorCode::Unauthenticated => GrpcCode::Unauthenticated,
            ErrorCode::AlreadyExists => GrpcCode::AlreadyExists,
            ErrorCode::Conflict => GrpcCode::Aborted,
        }
    }

    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::NotLeader | ErrorCode::Moving | ErrorCode::Unavailable => 503,
            ErrorCode::LockHeld | ErrorCode::NotHolder | ErrorCode::StaleEpoch | ErrorCode::NotOwner => 409,
            ErrorCode::Timeout => 408,
            ErrorCode::SessionExpired => 410,
            ErrorCode::UnknownSession | ErrorCode::UnknownNamespace | ErrorCode::UnknownShard => 404,
            ErrorCode::InvalidArgument => 400,
            ErrorCode::QuotaExceeded | ErrorCode::RateLimited => 429,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::AlreadyExists | ErrorCode::Conflict => 409,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "duplicate {c}");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
        }
        assert_eq!(ErrorCode::parse("NOPE"), None);
    }

    #[test]
    fn only_transient_codes_are_retryable() {
        for c in ErrorCode::ALL {
            assert_eq!(c.retry_after_ms().is_some(), c.is_retryable(), "{c}: a retry delay exactly for retryable codes");
        }
        assert!(ErrorCode::NotLeader.is_retryable());
        assert!(!ErrorCode::NotHolder.is_retryable());
        assert!(!ErrorCode::SessionExpired.is_retryable());
        assert!(!ErrorCode::InvalidArgument.is_retryable());
    }
}
