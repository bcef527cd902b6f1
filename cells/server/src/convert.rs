//! Proto <-> domain conversions for the cell's APIs. Every field from the wire is
//! validated here, so a malformed request is refused with `INVALID_ARGUMENT` before
//! anything is proposed.

use holdfast_cell_state::{DequeueReason, Event, EventKind, HolderView, WaiterView};
use holdfast_core::{
    EndReason, Epoch, ErrorCode, Intent, LockName, Mode, NamespaceConfig, NamespaceName, Posture, Quotas,
    RequestId, ShardKey, ShardName,
};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as pb;
use holdfast_raft::status;
use tonic::Status;

pub fn invalid(msg: impl std::fmt::Display) -> Status {
    status(ErrorCode::InvalidArgument, msg.to_string(), None)
}

/// The shard a request addresses, and the epoch it believes in (None: any).
pub fn shard_ref(r: Option<pb::ShardRef>) -> Result<(ShardKey, Option<Epoch>), Status> {
    let r = r.ok_or_else(|| invalid("shard is required"))?;
    let ns = NamespaceName::new(r.ns).map_err(invalid)?;
    let shard = if r.shard.is_empty() { ShardName::default_shard() } else { ShardName::new(r.shard).map_err(invalid)? };
    Ok((ShardKey::new(ns, shard), (r.epoch != 0).then_some(Epoch(r.epoch))))
}

pub fn lock_name(s: String) -> Result<LockName, Status> {
    LockName::new(s).map_err(invalid)
}

pub fn request_id(s: String) -> Result<RequestId, Status> {
    RequestId::new(s).map_err(invalid)
}

pub fn mode_from(m: i32) -> Result<Mode, Status> {
    match pb::Mode::try_from(m) {
        Ok(pb::Mode::Unspecified) | Ok(pb::Mode::Exclusive) => Ok(Mode::Exclusive),
        Ok(pb::Mode::Shared) => Ok(Mode::Shared),
        Err(_) => Err(invalid(format!("unknown mode {m}"))),
    }
}

pub fn mode_to(m: Mode) -> i32 {
    match m {
        Mode::Exclusive => pb::Mode::Exclusive as i32,
        Mode::Shared => pb::Mode::Shared as i32,
    }
}

pub fn reason_to(r: EndReason) -> i32 {
    (match r {
        EndReason::Released => pb::EndReason::Released,
        EndReason::Expired => pb::EndReason::Expired,
        EndReason::Broken => pb::EndReason::Broken,
        EndReason::MaxHold => pb::EndReason::MaxHold,
        EndReason::Moved => pb::EndReason::Moved,
    }) as i32
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
    pb::Waiter {
        session_id: w.session.0,
        mode: mode_to(w.mode),
        request_id: w.request_id.to_string(),
        queued_unix_ms: w.queued_at_unix_ms,
    }
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

pub fn intent_to(i: Intent) -> i32 {
    (match i {
        Intent::Efficiency => pb::Intent::Efficiency,
        Intent::Correctness => pb::Intent::Correctness,
        Intent::Leadership => pb::Intent::Leadership,
    }) as i32
}

pub fn posture_to(p: Posture) -> i32 {
    (match p {
        Posture::FailClosed => pb::Posture::FailClosed,
        Posture::FailOpen => pb::Posture::FailOpen,
    }) as i32
}

/// A namespace config from the wire: unset fields take the intent's defaults, then
/// the whole is validated.
pub fn namespace_from(c: apb::NamespaceConfig) -> Result<NamespaceConfig, Status> {
    let name = NamespaceName::new(c.name).map_err(invalid)?;
    let intent = match pb::Intent::try_from(c.intent) {
        Ok(pb::Intent::Efficiency) => Intent::Efficiency,
        Ok(pb::Intent::Correctness) | Ok(pb::Intent::Unspecified) => Intent::Correctness,
        Ok(pb::Intent::Leadership) => Intent::Leadership,
        Err(_) => return Err(invalid(format!("unknown intent {}", c.intent))),
    };
    let mut cfg = NamespaceConfig::with_defaults(name, c.owner, intent);
    match pb::Posture::try_from(c.posture) {
        Ok(pb::Posture::FailClosed) => cfg.posture = Posture::FailClosed,
        Ok(pb::Posture::FailOpen) => cfg.posture = Posture::FailOpen,
        Ok(pb::Posture::Unspecified) => {}
        Err(_) => return Err(invalid(format!("unknown posture {}", c.posture))),
    }
    let set = |v: u64, d: &mut u64| {
        if v != 0 {
            *d = v;
        }
    };
    set(c.ttl_min_ms, &mut cfg.ttl_min_ms);
    set(c.ttl_max_ms, &mut cfg.ttl_max_ms);
    if c.max_hold_ms != 0 {
        cfg.max_hold_ms = Some(c.max_hold_ms);
    }
    cfg.lock_delay_ms = c.lock_delay_ms;
    if let Some(q) = c.quotas {
        let d = Quotas::default();
        let pick = |v: u32, d: u32| if v == 0 { d } else { v };
        cfg.quotas = Quotas {
            max_keys: pick(q.max_keys, d.max_keys),
            max_sessions: pick(q.max_sessions, d.max_sessions),
            max_waiters_per_lock: pick(q.max_waiters_per_lock, d.max_waiters_per_lock),
            max_value_bytes: pick(q.max_value_bytes, d.max_value_bytes),
            acquires_per_second: pick(q.acquires_per_second, d.acquires_per_second),
        };
    }
    cfg.version = c.version;
    cfg.validate().map_err(invalid)?;
    Ok(cfg)
}

pub fn namespace_to(c: &NamespaceConfig) -> apb::NamespaceConfig {
    apb::NamespaceConfig {
        name: c.name.to_string(),
        owner: c.owner.clone(),
        intent: intent_to(c.intent),
        posture: posture_to(c.posture),
        ttl_min_ms: c.ttl_min_ms,
        ttl_max_ms: c.ttl_max_ms,
        max_hold_ms: c.max_hold_ms.unwrap_or(0),
        lock_delay_ms: c.lock_delay_ms,
        quotas: Some(apb::Quotas {
            max_keys: c.quotas.max_keys,
            max_sessions: c.quotas.max_sessions,
            max_waiters_per_lock: c.quotas.max_waiters_per_lock,
            max_value_bytes: c.quotas.max_value_bytes,
            acquires_per_second: c.quotas.acquires_per_second,
        }),
        version: c.version,
    }
}
