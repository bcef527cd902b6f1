//! Proto <-> domain conversions for the cell's APIs. Every field from the wire is
//! validated here, so a malformed request is refused with `INVALID_ARGUMENT` before
//! anything is proposed. The conversions of `holdfast-core`'s types are
//! `holdfast_proto::convert`'s; the ones here are of the lock table's views.

use holdfast_cell_state::{DequeueReason, Event, EventKind, HolderView, WaiterView};
use holdfast_core::{EndReason, Epoch, ErrorCode, LockName, Mode, NamespaceConfig, RequestId, ShardKey};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::convert as wire;
pub use holdfast_proto::convert::{intent_to, mode_to, namespace_to, posture_to, reason_to};
use holdfast_proto::lock::v1 as pb;
use holdfast_rpc::status::status;
use tonic::Status;

pub fn invalid(msg: impl std::fmt::Display) -> Status {
    status(ErrorCode::InvalidArgument, msg.to_string())
}

/// The shard a request addresses, and the epoch it believes in (None: any).
pub fn shard_ref(r: Option<pb::ShardRef>) -> Result<(ShardKey, Option<Epoch>), Status> {
    let r = r.ok_or_else(|| invalid("shard is required"))?;
    let key = wire::shard_key(r.ns, r.shard).map_err(invalid)?;
    Ok((key, (r.epoch != 0).then_some(Epoch(r.epoch))))
}

pub fn lock_name(s: String) -> Result<LockName, Status> {
    LockName::new(s).map_err(invalid)
}

pub fn request_id(s: String) -> Result<RequestId, Status> {
    RequestId::new(s).map_err(invalid)
}

pub fn mode_from(m: i32) -> Result<Mode, Status> {
    wire::mode_from(m).map_err(invalid)
}

pub fn holder(h: &HolderView, now_ms: u64) -> pb::Holder {
    pb::Holder {
        session_id: h.session.0,
        token: h.token.0,
        value: h.value.clone(),
        mode: mode_to(h.mode),
        held_for_ms: now_ms.saturating_sub(h.granted_at_unix_ms),
        granted_unix_ms: h.granted_at_unix_ms,
    }
}

pub fn waiter(w: &WaiterView) -> pb::Waiter {
    pb::Waiter { session_id: w.session.0, mode: mode_to(w.mode), request_id: w.request_id.to_string(), queued_unix_ms: w.queued_at_unix_ms }
}

pub fn event(e: &Event) -> pb::LockEvent {
    let (kind, token, reason) = match &e.kind {
        EventKind::Queued { .. } => (pb::EventKind::Queued, 0, pb::EndReason::Unspecified as i32),
        EventKind::Acquired { token, .. } => (pb::EventKind::Acquired, token.0, pb::EndReason::Unspecified as i32),
        EventKind::Ended { token, reason } => (pb::EventKind::Ended, token.0, reason_to(*reason)),
        EventKind::Dequeued { reason } => (
            pb::EventKind::Dequeued,
            0,
            match reason {
                DequeueReason::Moved => reason_to(EndReason::Moved),
                DequeueReason::SessionEnded => reason_to(EndReason::Expired),
                DequeueReason::Timeout => pb::EndReason::Unspecified as i32,
            },
        ),
    };
    pb::LockEvent {
        revision: e.revision.0,
        name: e.name.to_string(),
        kind: kind as i32,
        session_id: e.session.0,
        token,
        reason,
        value: e.value.clone(),
        at_unix_ms: e.at_unix_ms,
    }
}

/// A namespace config from the wire, validated before anything is proposed.
pub fn namespace_from(c: apb::NamespaceConfig) -> Result<NamespaceConfig, Status> {
    let cfg = wire::namespace_from(c).map_err(invalid)?;
    cfg.validate().map_err(invalid)?;
    Ok(cfg)
}
