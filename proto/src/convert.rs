//! Wire <-> domain conversions for the vocabulary of `holdfast-core` that more than
//! one API carries: shard keys, lock modes, end reasons, intents, postures, the
//! namespace configuration, roles and grants. Servers and clients use these, so every API reads and
//! writes them the same way.
//!
//! What does not live here: conversions of a state crate's types (lock views, events,
//! ownership records) — those stay with the server that owns the state — and the gRPC
//! status a refusal becomes (the servers map [`Invalid`] to `INVALID_ARGUMENT`).

use crate::admin::v1 as apb;
use crate::lock::v1 as lpb;
use crate::registry::v1 as rpb;
use holdfast_core::{EndReason, Grant, Intent, Mode, NameError, NamespaceConfig, NamespaceName, Posture, Quotas, Role, ShardKey, ShardName};

/// A wire value that is not a valid domain value; the caller answers `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<NameError> for Invalid {
    fn from(e: NameError) -> Self {
        Invalid(e.to_string())
    }
}

/// `(ns, shard)` from the wire; an empty shard is `default`.
pub fn shard_key(ns: String, shard: String) -> Result<ShardKey, Invalid> {
    let ns = NamespaceName::new(ns)?;
    let shard = if shard.is_empty() { ShardName::default_shard() } else { ShardName::new(shard)? };
    Ok(ShardKey::new(ns, shard))
}

/// The owner record an ownership event leaves behind.
pub fn owner_after(e: &rpb::OwnershipEvent) -> rpb::ShardOwner {
    rpb::ShardOwner {
        ns: e.ns.clone(),
        shard: e.shard.clone(),
        region: e.region.clone(),
        cell: e.cell.clone(),
        epoch: e.epoch,
        state: e.state,
        to_cell: e.to_cell.clone(),
        planned: e.planned,
        sealed: e.sealed,
    }
}

/// Unset is exclusive.
pub fn mode_from(m: i32) -> Result<Mode, Invalid> {
    match lpb::Mode::try_from(m) {
        Ok(lpb::Mode::Unspecified) | Ok(lpb::Mode::Exclusive) => Ok(Mode::Exclusive),
        Ok(lpb::Mode::Shared) => Ok(Mode::Shared),
        Err(_) => Err(Invalid(format!("unknown mode {m}"))),
    }
}

pub fn mode_to(m: Mode) -> i32 {
    (match m {
        Mode::Exclusive => lpb::Mode::Exclusive,
        Mode::Shared => lpb::Mode::Shared,
    }) as i32
}

pub fn reason_to(r: EndReason) -> i32 {
    (match r {
        EndReason::Released => lpb::EndReason::Released,
        EndReason::Expired => lpb::EndReason::Expired,
        EndReason::Broken => lpb::EndReason::Broken,
        EndReason::MaxHold => lpb::EndReason::MaxHold,
        EndReason::Moved => lpb::EndReason::Moved,
    }) as i32
}

/// A role; unset is refused (a grant must say what it gives).
pub fn role_from(r: i32) -> Result<Role, Invalid> {
    match rpb::Role::try_from(r) {
        Ok(rpb::Role::Reader) => Ok(Role::Reader),
        Ok(rpb::Role::Holder) => Ok(Role::Holder),
        Ok(rpb::Role::Admin) => Ok(Role::Admin),
        Ok(rpb::Role::Operator) => Ok(Role::Operator),
        _ => Err(Invalid(format!("role {r}: reader, holder, admin or operator"))),
    }
}

pub fn role_to(r: Role) -> i32 {
    (match r {
        Role::Reader => rpb::Role::Reader,
        Role::Holder => rpb::Role::Holder,
        Role::Admin => rpb::Role::Admin,
        Role::Operator => rpb::Role::Operator,
    }) as i32
}

/// A grant, checked for shape ([`Grant::validate`]); an empty `ns` is none.
pub fn grant_from(g: rpb::RoleGrant) -> Result<Grant, Invalid> {
    let ns = if g.ns.is_empty() { None } else { Some(NamespaceName::new(g.ns)?) };
    let grant = Grant { principal: g.principal, role: role_from(g.role)?, ns };
    grant.validate().map_err(Invalid)?;
    Ok(grant)
}

pub fn grant_to(g: &Grant) -> rpb::RoleGrant {
    rpb::RoleGrant { principal: g.principal.clone(), role: role_to(g.role), ns: g.ns.as_ref().map_or(String::new(), |n| n.to_string()) }
}

/// Unset is correctness, the safe default.
pub fn intent_from(i: i32) -> Result<Intent, Invalid> {
    match lpb::Intent::try_from(i) {
        Ok(lpb::Intent::Efficiency) => Ok(Intent::Efficiency),
        Ok(lpb::Intent::Correctness) | Ok(lpb::Intent::Unspecified) => Ok(Intent::Correctness),
        Ok(lpb::Intent::Leadership) => Ok(Intent::Leadership),
        Err(_) => Err(Invalid(format!("unknown intent {i}"))),
    }
}

pub fn intent_to(i: Intent) -> i32 {
    (match i {
        Intent::Efficiency => lpb::Intent::Efficiency,
        Intent::Correctness => lpb::Intent::Correctness,
        Intent::Leadership => lpb::Intent::Leadership,
    }) as i32
}

/// `None` when unset: the intent's default applies.
pub fn posture_from(p: i32) -> Result<Option<Posture>, Invalid> {
    match lpb::Posture::try_from(p) {
        Ok(lpb::Posture::FailClosed) => Ok(Some(Posture::FailClosed)),
        Ok(lpb::Posture::FailOpen) => Ok(Some(Posture::FailOpen)),
        Ok(lpb::Posture::Unspecified) => Ok(None),
        Err(_) => Err(Invalid(format!("unknown posture {p}"))),
    }
}

pub fn posture_to(p: Posture) -> i32 {
    (match p {
        Posture::FailClosed => lpb::Posture::FailClosed,
        Posture::FailOpen => lpb::Posture::FailOpen,
    }) as i32
}

/// A namespace config from the wire: unset (zero) fields take the intent's defaults.
/// Not validated as a whole here: the caller runs [`NamespaceConfig::validate`] where
/// it decides (the cell before proposing, the registry inside its state machine).
pub fn namespace_from(c: apb::NamespaceConfig) -> Result<NamespaceConfig, Invalid> {
    let name = NamespaceName::new(c.name)?;
    let mut cfg = NamespaceConfig::with_defaults(name, c.owner, intent_from(c.intent)?);
    if let Some(p) = posture_from(c.posture)? {
        cfg.posture = p;
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
    if let Some(d) = c.lock_delay_ms {
        cfg.lock_delay_ms = d;
    }
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
        lock_delay_ms: Some(c.lock_delay_ms),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_config_survives_the_wire() {
        let name = NamespaceName::new("orders".to_owned()).unwrap();
        let mut cfg = NamespaceConfig::with_defaults(name, "team".to_owned(), Intent::Leadership);
        cfg.max_hold_ms = Some(60_000);
        cfg.version = 3;
        assert_eq!(namespace_from(namespace_to(&cfg)).unwrap(), cfg);
    }

    #[test]
    fn unset_fields_take_defaults_and_unknown_enums_are_refused() {
        let wire = apb::NamespaceConfig { name: "orders".into(), ..Default::default() };
        let cfg = namespace_from(wire.clone()).unwrap();
        assert_eq!(cfg.intent, Intent::Correctness);
        assert_eq!(cfg.max_hold_ms, None);
        // An unset lock-delay is the intent's default, as docs/semantics.md and the CLI
        // help say; an explicit 0 is kept.
        assert_eq!(cfg.lock_delay_ms, 5_000);
        let efficiency = apb::NamespaceConfig { intent: intent_to(Intent::Efficiency), ..wire.clone() };
        assert_eq!(namespace_from(efficiency).unwrap().lock_delay_ms, 0);
        assert_eq!(namespace_from(apb::NamespaceConfig { lock_delay_ms: Some(0), ..wire.clone() }).unwrap().lock_delay_ms, 0);
        assert_eq!(namespace_from(apb::NamespaceConfig { lock_delay_ms: Some(750), ..wire.clone() }).unwrap().lock_delay_ms, 750);
        // From the JSON of the HTTP API and the command line: unset stays unset on the wire.
        let spec: crate::json::NamespaceSpec = serde_json::from_str(r#"{"name":"orders","owner":"team"}"#).unwrap();
        assert_eq!(namespace_from(spec.to_pb()).unwrap().lock_delay_ms, 5_000);
        assert!(namespace_from(apb::NamespaceConfig { intent: 99, ..wire.clone() }).unwrap_err().0.contains("intent 99"));
        assert!(namespace_from(apb::NamespaceConfig { posture: 99, ..wire }).unwrap_err().0.contains("posture 99"));
        assert!(mode_from(99).is_err());
        assert_eq!(shard_key("orders".into(), String::new()).unwrap().shard, ShardName::default_shard());
    }
}
