//! Proto <-> domain conversions for the RegistryService. Every field from the wire is
//! validated here, so a malformed request is refused with `INVALID_ARGUMENT` before
//! anything is proposed.
//! The conversions of `holdfast-core`'s types (namespace config, shard keys) are
//! `holdfast_proto::convert`'s, shared with the cell; the ones here are of the
//! registry's records.

use holdfast_core::Grant;
use holdfast_core::{CellId, ErrorCode, NamespaceConfig, NamespaceName, NodeId, RegionId, ShardKey};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::convert as wire;
pub use holdfast_proto::convert::namespace_to;
use holdfast_proto::registry::v1 as pb;
use holdfast_registry_state::{AuditRecord, CellMember, CellRecord, FailoverPolicy, OwnershipEvent, RegionState, ShardRecord, ShardState, TokenRecord};
use holdfast_rpc::status::status;
use tonic::Status;

pub fn invalid(msg: impl std::fmt::Display) -> Status {
    status(ErrorCode::InvalidArgument, msg.to_string())
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
    wire::shard_key(ns, shard).map_err(invalid)
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

/// A namespace config from the wire: unset fields take the intent's defaults. Not
/// validated here: the state machine validates, so a replica never stores a config it
/// would not accept.
pub fn namespace_from(c: Option<apb::NamespaceConfig>) -> Result<NamespaceConfig, Status> {
    wire::namespace_from(c.ok_or_else(|| invalid("config is required"))?).map_err(invalid)
}

pub fn grant_from(g: Option<pb::RoleGrant>) -> Result<Grant, Status> {
    wire::grant_from(g.ok_or_else(|| invalid("grant is required"))?).map_err(invalid)
}

pub fn token_to(t: &TokenRecord) -> pb::TokenInfo {
    pb::TokenInfo { name: t.name.clone(), sha256: t.sha256.clone(), created_unix_ms: t.created_at_unix_ms, created_by: t.created_by.clone() }
}

pub fn audit_to(r: &AuditRecord) -> pb::AuditRecord {
    pb::AuditRecord { seq: r.seq, at_unix_ms: r.at_unix_ms, by: r.by.clone(), action: r.action.clone(), detail: r.detail.clone() }
}

/// A namespace's automatic failover on the wire (`None`: off).
pub fn auto_failover_to(policy: Option<&FailoverPolicy>) -> pb::AutoFailover {
    pb::AutoFailover { enabled: policy.is_some(), fallback_region: policy.and_then(|p| p.fallback.as_ref()).map(ToString::to_string).unwrap_or_default() }
}

/// The policy a request asks for: `None` turns it off.
pub fn auto_failover_from(a: Option<pb::AutoFailover>) -> Result<Option<FailoverPolicy>, Status> {
    let a = a.ok_or_else(|| invalid("auto_failover is required"))?;
    match (a.enabled, a.fallback_region.is_empty()) {
        (false, true) => Ok(None),
        (false, false) => Err(invalid("a fallback region needs automatic failover enabled")),
        (true, true) => Ok(Some(FailoverPolicy { fallback: None })),
        (true, false) => Ok(Some(FailoverPolicy { fallback: Some(region_id(a.fallback_region)?) })),
    }
}
