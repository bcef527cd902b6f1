//! How a holdfast error travels over gRPC, in one place: the gRPC code of the error's
//! class, the stable string code in `holdfast-code` metadata, and for `NOT_LEADER` the
//! leader's client address in `holdfast-leader`. Servers build statuses with
//! [`status`] (or [`not_leader`]); every caller reads them back with [`Answer::of`].
//!
//! The metadata keys of every other cross-process convention live here too, so no
//! crate spells a key as a literal.

use holdfast_core::ErrorCode;

/// Metadata key of the stable error code (`NOT_LEADER`, `LOCK_HELD`, ...).
pub const CODE_METADATA: &str = "holdfast-code";
/// Metadata key of the leader's client address on a `NOT_LEADER`.
pub const LEADER_METADATA: &str = "holdfast-leader";
/// Metadata key of the identity a caller acts for (the audit record of BreakLock).
pub const IDENTITY_METADATA: &str = "holdfast-identity";
/// The same, as an HTTP header of the gateway's JSON API.
pub const IDENTITY_HEADER: &str = "x-holdfast-identity";
/// W3C trace context, in gRPC metadata and HTTP headers alike.
pub const TRACEPARENT: &str = "traceparent";
/// W3C trace state, passed on with [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// Metadata key of how long, in ms, the caller should wait before retrying (a rate
/// limit knows exactly); absent, the code's default ([`ErrorCode::retry_after_ms`]).
pub const RETRY_AFTER_METADATA: &str = "holdfast-retry-after-ms";

/// `s`, telling the caller to retry after `after`.
pub fn with_retry_after(mut s: tonic::Status, after: std::time::Duration) -> tonic::Status {
    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    if let Ok(v) = ms.to_string().parse() {
        s.metadata_mut().insert(RETRY_AFTER_METADATA, v);
    }
    s
}

/// How long the caller of a failed call should wait before retrying it: the server's
/// hint, else the code's default; `None` when no retry changes the answer.
pub fn retry_after_of(s: &tonic::Status) -> Option<u64> {
    let code = code_of(s)?;
    if !code.is_retryable() {
        return None;
    }
    s.metadata().get(RETRY_AFTER_METADATA).and_then(|v| v.to_str().ok()?.parse().ok()).or(code.retry_after_ms())
}

/// A gRPC status for `code`, with the stable string in metadata.
pub fn status(code: ErrorCode, message: impl Into<String>) -> tonic::Status {
    let grpc = tonic::Code::from_i32(code.grpc_code() as i32);
    let mut s = tonic::Status::new(grpc, message.into());
    s.metadata_mut().insert(CODE_METADATA, tonic::metadata::MetadataValue::from_static(code.as_str()));
    s
}

/// `NOT_LEADER`, with the leader's client address when this node knows it.
pub fn not_leader(message: impl Into<String>, leader_client_addr: Option<&str>) -> tonic::Status {
    let mut s = status(ErrorCode::NotLeader, message);
    if let Some(addr) = leader_client_addr.filter(|a| !a.is_empty()).and_then(|a| a.parse().ok()) {
        s.metadata_mut().insert(LEADER_METADATA, addr);
    }
    s
}

/// What a failed call's status says, as a caller must read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A holdfast server answered with a stable code: the group's answer. `leader` is
    /// the hint of a `NOT_LEADER`.
    Coded { code: ErrorCode, leader: Option<String> },
    /// No holdfast code, and a code that means the call never reached a server that
    /// could answer it (refused, reset, timed out, shutting down): try elsewhere.
    Transport,
    /// No holdfast code, and a code no retry changes (unimplemented, a message too
    /// large, a malformed reply): final.
    Failed,
}

impl Answer {
    pub fn of(s: &tonic::Status) -> Answer {
        match code_of(s) {
            Some(code) => Answer::Coded { code, leader: leader_of(s) },
            None if is_transient(s.code()) => Answer::Transport,
            None => Answer::Failed,
        }
    }
}

/// gRPC codes that, without a holdfast code, mean "the call did not get an answer".
pub fn is_transient(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded | tonic::Code::Internal | tonic::Code::Aborted
    )
}

/// The stable code a status carries; `None` for a status no holdfast server made
/// (a transport failure, a proxy's error).
pub fn code_of(s: &tonic::Status) -> Option<ErrorCode> {
    s.metadata().get(CODE_METADATA).and_then(|v| v.to_str().ok()).and_then(ErrorCode::parse)
}

/// The leader hint of a `NOT_LEADER` status.
pub fn leader_of(s: &tonic::Status) -> Option<String> {
    s.metadata().get(LEADER_METADATA).and_then(|v| v.to_str().ok()).filter(|a| !a.is_empty()).map(str::to_owned)
}

/// The status without its leader hint: what a proxy (the gateway) passes on, since the
/// hint names a node its own clients are not meant to reach.
pub fn without_hint(mut s: tonic::Status) -> tonic::Status {
    s.metadata_mut().remove(LEADER_METADATA);
    s
}

/// `CODE: message`, the one-line form of a status for people (the CLI, logs).
pub fn one_line(s: &tonic::Status) -> String {
    match code_of(s) {
        Some(c) => format!("{c}: {}", s.message()),
        None => format!("{:?}: {}", s.code(), s.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coded_status_round_trips_with_its_hint() {
        let s = not_leader("not me", Some("127.0.0.1:7002"));
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(Answer::of(&s), Answer::Coded { code: ErrorCode::NotLeader, leader: Some("127.0.0.1:7002".into()) });
        assert_eq!(Answer::of(&without_hint(s)), Answer::Coded { code: ErrorCode::NotLeader, leader: None });
        for c in ErrorCode::ALL {
            assert_eq!(code_of(&status(c, "x")), Some(c));
            assert_eq!(status(c, "x").code() as i32, c.grpc_code() as i32);
        }
    }

    #[test]
    fn uncoded_statuses_are_transport_only_when_transient() {
        assert_eq!(Answer::of(&tonic::Status::unavailable("connection refused")), Answer::Transport);
        assert_eq!(Answer::of(&tonic::Status::unknown("h2 reset")), Answer::Transport);
        assert_eq!(Answer::of(&tonic::Status::unimplemented("no such service")), Answer::Failed);
        assert_eq!(one_line(&status(ErrorCode::LockHeld, "held")), "LOCK_HELD: held");
    }
}
