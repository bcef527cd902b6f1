//! Proto <-> domain conversions for the RegistryService. Every field from the wire is
//! validated here, so a malformed request is refused with `INVALID_ARGUMENT` before
//! anything is proposed.
//!
//! The namespace config conversion mirrors the cell's (`holdfast-cell::convert`); the
//! registry cannot depend on the cell server, and the proto crate holds no domain types.

use holdfast_core::{
    CellId, ErrorCode, Intent, NamespaceConfig, NamespaceName, NodeId, Posture, Quotas, RegionId, ShardKey, ShardName,
};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as lpb;
use holdfast_proto::registry::v1 as pb;
use holdfast_raft::status;
use holdfast_registry_state::{CellMember, CellRecord, OwnershipEvent, RegionState, ShardRecord, ShardState};
use tonic::Status;

pub fn invalid(msg: impl std::fmt::Display) -> Status {
    status(ErrorCode::InvalidArgument, msg.to_string(), None)
}

pub fn region_id(s: String) -> Result<RegionId, Status> {
    RegionId::new(s).map_err(invalid)
}

pub fn cell_id(s: String) -> Result<CellId, Status> {
    CellId::new(s).map_err(invalid)
}

pub fn ns_name(s: String) -> Result<NamespaceName, Status> {
    NamespaceName::new(s).map_err(invalid)
}

/// `(ns, shard)` from the wire; an empty shard is `default`.
pub fn shard_key(ns: String, shard: String) -> Result<ShardKey, Status> {
    let shard = if shard.is_empty() { ShardName::default_shard() } else { ShardName::new(shard).map_err(invalid)? };
    Ok(ShardKey::new(ns_name(ns)?, shard))
}

pub fn region_state_from(s: i32) -> Result<RegionState, Status> {
    match pb::RegionState::try_from(s) {
        Ok(pb::RegionState::Active) => Ok(RegionState::Active),
        Ok(pb::RegionState::Draining) => Ok(RegionState::Draining),
        Ok(pb::RegionState::Evacuated) => Ok(RegionState::Evacuated),
        Ok(pb::RegionState::Unspecified) | Err(_) => Err(invalid(format!("region state {s} is not active, draining or evacuated"))),
    }
}

pub fn region_to(region: &RegionId, state: RegionState) -> pb::Region {
    let s = match state {
        RegionState::Active => pb::RegionState::Active,
        RegionState::Draining => pb::RegionState::Draining,
        RegionState::Evacuated => pb::RegionState::Evacuated,
    };
    pb::Region { region: region.to_string(), state: s as i32 }
}

pub fn members_from(ms: Vec<pb::CellMember>) -> Vec<CellMember> {
    ms.into_iter().map(|m| CellMember { node_id: NodeId(m.node_id), client_addr: m.client_addr, raft_addr: m.raft_addr }).collect()
}

pub fn cell_to(cell: &CellId, r: &CellRecord) -> pb::Cell {
    pb::Cell {
        cell: cell.to_string(),
        region: r.region.to_string(),
        members: r
            .members
            .iter()
            .map(|m| pb::CellMember { node_id: m.node_id.0, client_addr: m.client_addr.clone(), raft_addr: m.raft_addr.clone() })
            .collect(),
    }
}

pub fn owner_to(key: &ShardKey, r: &ShardRecord) -> pb::ShardOwner {
    let (state, to_cell, planned, sealed) = match &r.state {
        ShardState::Active => (pb::ShardState::Active, String::new(), false, false),
        ShardState::Moving(m) => (pb::ShardState::Moving, m.to_cell.to_string(), m.planned, m.seal.is_some()),
    };
    pb::ShardOwner {
        ns: key.ns.to_string(),
        shard: key.shard.to_string(),
        region: r.region.to_string(),
        cell: r.cell.to_string(),
        epoch: r.epoch.0,
        state: state as i32,
        to_cell,
        planned,
        sealed,
    }
}

pub fn event_to(e: &OwnershipEvent) -> pb::OwnershipEvent {
    let o = owner_to(&e.shard, &e.record);
    pb::OwnershipEvent {
        revision: e.revision.0,
        ns: o.ns,
        shard: o.shard,
        region: o.region,
        cell: o.cell,
        epoch: o.epoch,
        state: o.state,
        to_cell: o.to_cell,
        planned: o.planned,
        sealed: o.sealed,
        at_unix_ms: e.at_unix_ms,
    }
}

fn intent_to(i: Intent) -> i32 {
    (match i {
        Intent::Efficiency => lpb::Intent::Efficiency,
        Intent::Correctness => lpb::Intent::Correctness,
        Intent::Leadership => lpb::Intent::Leadership,
    }) as i32
}

fn posture_to(p: Posture) -> i32 {
    (match p {
        Posture::FailClosed => lpb::Posture::FailClosed,
        Posture::FailOpen => lpb::Posture::FailOpen,
    }) as i32
}

/// A namespace config from the wire: unset fields take the intent's defaults. Not
/// validated here: the state machine validates, so a replica never stores a config it
/// would not accept.
pub fn namespace_from(c: Option<apb::NamespaceConfig>) -> Result<NamespaceConfig, Status> {
    let c = c.ok_or_else(|| invalid("config is required"))?;
    let name = ns_name(c.name)?;
    let intent = match lpb::Intent::try_from(c.intent) {
        Ok(lpb::Intent::Efficiency) => Intent::Efficiency,
        Ok(lpb::Intent::Correctness) | Ok(lpb::Intent::Unspecified) => Intent::Correctness,
        Ok(lpb::Intent::Leadership) => Intent::Leadership,
        Err(_) => return Err(invalid(format!("unknown intent {}", c.intent))),
    };
    let mut cfg = NamespaceConfig::with_defaults(name, c.owner, intent);
    match lpb::Posture::try_from(c.posture) {
        Ok(lpb::Posture::FailClosed) => cfg.posture = Posture::FailClosed,
        Ok(lpb::Posture::FailOpen) => cfg.posture = Posture::FailOpen,
        Ok(lpb::Posture::Unspecified) => {}
        Err(_) => return Err(invalid(format!("unknown posture {}", c.posture))),
    }
    if c.ttl_min_ms != 0 {
        cfg.ttl_min_ms = c.ttl_min_ms;
    }
    if c.ttl_max_ms != 0 {
        cfg.ttl_max_ms = c.ttl_max_ms;
    }
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
