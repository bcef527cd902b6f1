//! The one way a holdfast error travels over gRPC: the gRPC code of the error class,
//! the stable string code in `holdfast-code` metadata, and for `NOT_LEADER` the
//! leader's client address in `holdfast-leader`. Servers build statuses with
//! [`status`]; clients and gateways read them back with [`code_of`] and [`leader_of`].

use holdfast_core::ErrorCode;

/// Metadata key of the stable error code (`NOT_LEADER`, `LOCK_HELD`, ...).
pub const CODE_METADATA: &str = "holdfast-code";
/// Metadata key of the leader's client address on a `NOT_LEADER`.
pub const LEADER_METADATA: &str = "holdfast-leader";

/// A gRPC status for `code`, with the stable string in metadata and, for `NOT_LEADER`,
/// the leader's client address.
pub fn status(code: ErrorCode, message: String, leader_client_addr: Option<&str>) -> tonic::Status {
    let grpc = tonic::Code::from_i32(code.grpc_code() as i32);
    let mut s = tonic::Status::new(grpc, message);
    if let Ok(v) = code.as_str().parse() {
        s.metadata_mut().insert(CODE_METADATA, v);
    }
    if let Some(addr) = leader_client_addr.and_then(|a| a.parse().ok()) {
        s.metadata_mut().insert(LEADER_METADATA, addr);
    }
    s
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
