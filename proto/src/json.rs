//! The JSON shapes of holdfast's answers, as typed serde structs: what the gateway's
//! HTTP API returns and what `holdfast ... -o json` prints are these same types, built
//! by the same conversions, so the two cannot drift.
//!
//! Conventions (docs/api.md): tokens and other 64-bit values that may exceed 2^53 are
//! JSON strings (a JavaScript number would round them); enum words are the ones of
//! `holdfast-core` (`exclusive`, `fail-closed`, `leadership`); durations are `*_ms`.

use crate::admin::v1 as apb;
use crate::convert::{intent_from, mode_from, namespace_from, posture_from, Invalid};
use crate::lock::v1 as pb;
use crate::registry::v1 as rpb;
use holdfast_core::{ErrorCode, Intent, Mode, NamespaceConfig, Posture};
use serde::{Deserialize, Serialize};

/// A session id as people read it: `0x` and 16 hex digits.
pub fn session_hex(id: u64) -> String {
    format!("{id:#018x}")
}

/// An error answer: the stable code, what happened, whether the same request may be
/// sent again, and after how long (also the `Retry-After` header, in seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default)]
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// The limits of a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotasView {
    pub max_keys: u32,
    pub max_sessions: u32,
    pub max_waiters_per_lock: u32,
    pub max_value_bytes: u32,
    pub acquires_per_second: u32,
}

/// A namespace's automatic failover (docs/registry.md, "Automatic failover").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AutoFailoverView {
    pub ns: String,
    pub enabled: bool,
    /// The region its shards go to first; `null`: any active region.
    pub fallback_region: Option<String>,
}

impl AutoFailoverView {
    pub fn new(ns: &str, a: Option<&rpb::AutoFailover>) -> AutoFailoverView {
        AutoFailoverView {
            ns: ns.to_owned(),
            enabled: a.is_some_and(|a| a.enabled),
            fallback_region: a.map(|a| a.fallback_region.clone()).filter(|r| !r.is_empty()),
        }
    }
}

/// A namespace's stored configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceView {
    pub name: String,
    pub owner: String,
    pub intent: Intent,
    pub posture: Posture,
    pub ttl_min_ms: u64,
    pub ttl_max_ms: u64,
    /// `null`: no limit.
    pub max_hold_ms: Option<u64>,
    pub lock_delay_ms: u64,
    pub quotas: QuotasView,
    pub version: u64,
}

impl From<&NamespaceConfig> for NamespaceView {
    fn from(c: &NamespaceConfig) -> NamespaceView {
        let q = &c.quotas;
        NamespaceView {
            name: c.name.to_string(),
            owner: c.owner.clone(),
            intent: c.intent,
            posture: c.posture,
            ttl_min_ms: c.ttl_min_ms,
            ttl_max_ms: c.ttl_max_ms,
            max_hold_ms: c.max_hold_ms,
            lock_delay_ms: c.lock_delay_ms,
            quotas: QuotasView {
                max_keys: q.max_keys,
                max_sessions: q.max_sessions,
                max_waiters_per_lock: q.max_waiters_per_lock,
                max_value_bytes: q.max_value_bytes,
                acquires_per_second: q.acquires_per_second,
            },
            version: c.version,
        }
    }
}

impl TryFrom<&apb::NamespaceConfig> for NamespaceView {
    type Error = Invalid;

    fn try_from(c: &apb::NamespaceConfig) -> Result<NamespaceView, Invalid> {
        Ok(NamespaceView::from(&namespace_from(c.clone())?))
    }
}

/// A namespace to create: the body of `POST /v1/namespaces`, and what `holdfast ns
/// create` sends. Unset fields take the intent's defaults (docs/semantics.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceSpec {
    pub name: String,
    pub owner: String,
    /// Default `correctness`.
    #[serde(default)]
    pub intent: Option<Intent>,
    /// Default by intent.
    #[serde(default)]
    pub posture: Option<Posture>,
    #[serde(default)]
    pub ttl_min_ms: Option<u64>,
    #[serde(default)]
    pub ttl_max_ms: Option<u64>,
    #[serde(default)]
    pub max_hold_ms: Option<u64>,
    #[serde(default)]
    pub lock_delay_ms: Option<u64>,
    #[serde(default)]
    pub acquires_per_second: Option<u32>,
    #[serde(default)]
    pub max_keys: Option<u32>,
    #[serde(default)]
    pub max_sessions: Option<u32>,
    #[serde(default)]
    pub max_waiters_per_lock: Option<u32>,
    #[serde(default)]
    pub max_value_bytes: Option<u32>,
}

impl NamespaceSpec {
    /// The wire config (0 is "unset" there: the receiver fills the intent's defaults).
    pub fn to_pb(&self) -> apb::NamespaceConfig {
        let intent = self.intent.unwrap_or(Intent::Correctness);
        let quotas = [self.acquires_per_second, self.max_keys, self.max_sessions, self.max_waiters_per_lock, self.max_value_bytes]
            .iter()
            .any(Option::is_some)
            .then(|| apb::Quotas {
                max_keys: self.max_keys.unwrap_or(0),
                max_sessions: self.max_sessions.unwrap_or(0),
                max_waiters_per_lock: self.max_waiters_per_lock.unwrap_or(0),
                max_value_bytes: self.max_value_bytes.unwrap_or(0),
                acquires_per_second: self.acquires_per_second.unwrap_or(0),
            });
        apb::NamespaceConfig {
            name: self.name.clone(),
            owner: self.owner.clone(),
            intent: crate::convert::intent_to(intent),
            posture: self.posture.map_or(pb::Posture::Unspecified as i32, crate::convert::posture_to),
            ttl_min_ms: self.ttl_min_ms.unwrap_or(0),
            ttl_max_ms: self.ttl_max_ms.unwrap_or(0),
            max_hold_ms: self.max_hold_ms.unwrap_or(0),
            lock_delay_ms: self.lock_delay_ms,
            quotas,
            version: 0,
        }
    }
}

/// A shard's placement state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OwnerState {
    Active,
    Moving,
}

/// Where a shard lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OwnerView {
    pub ns: String,
    pub shard: String,
    pub region: String,
    pub cell: String,
    pub epoch: u32,
    pub state: OwnerState,
    /// While moving: where to.
    pub to_cell: Option<String>,
    /// While moving: planned (drain and seal) or not (wait out the source's lease).
    pub planned: Option<bool>,
}

impl From<&rpb::ShardOwner> for OwnerView {
    fn from(o: &rpb::ShardOwner) -> OwnerView {
        let moving = o.state == rpb::ShardState::Moving as i32;
        OwnerView {
            ns: o.ns.clone(),
            shard: o.shard.clone(),
            region: o.region.clone(),
            cell: o.cell.clone(),
            epoch: o.epoch,
            state: if moving { OwnerState::Moving } else { OwnerState::Active },
            to_cell: moving.then(|| o.to_cell.clone()),
            planned: moving.then_some(o.planned),
        }
    }
}

/// A granted acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantView {
    /// The fencing token, decimal.
    pub token: String,
    pub ttl_remaining_ms: u64,
    pub epoch: u32,
    /// `true` only for a fail-open namespace whose cell could not be reached: token
    /// `"0"`, no lock is held.
    pub unfenced: bool,
}

impl From<&pb::AcquireResponse> for GrantView {
    fn from(r: &pb::AcquireResponse) -> GrantView {
        GrantView { token: r.token.to_string(), ttl_remaining_ms: r.ttl_remaining_ms, epoch: r.epoch, unfenced: r.unfenced }
    }
}

/// Whether a token is a current holder's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckView {
    pub current: bool,
    /// `CURRENT` or `STALE`.
    pub status: String,
}

impl From<&pb::CheckTokenResponse> for CheckView {
    fn from(r: &pb::CheckTokenResponse) -> CheckView {
        let current = r.status == pb::TokenStatus::Current as i32;
        CheckView { current, status: if current { "CURRENT" } else { "STALE" }.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HolderView {
    pub session: String,
    pub token: String,
    pub mode: Mode,
    /// The holder's payload, UTF-8 (lossy).
    pub value: String,
    pub held_for_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaiterView {
    pub session: String,
    pub mode: Mode,
    pub request_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BreakView {
    /// The token of the hold it ended ("0" if none was held).
    pub token: String,
    pub by: String,
    pub reason: String,
    pub new_floor: String,
    pub at_unix_ms: u64,
}

/// One lock: its holders, its queue, its token floor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockView {
    pub name: String,
    pub holders: Vec<HolderView>,
    pub waiters: Vec<WaiterView>,
    /// Every token granted from now on is larger than this.
    pub token_floor: String,
    pub intent: Intent,
    pub posture: Posture,
    pub epoch: u32,
    pub lock_delayed: bool,
    pub last_break: Option<BreakView>,
    pub revision: u64,
}

fn mode_word(m: i32) -> Mode {
    mode_from(m).unwrap_or(Mode::Exclusive)
}

impl LockView {
    /// `session` writes a session id the way the surface names sessions (the HTTP
    /// handle `ns:shard:hex`, or [`session_hex`]).
    pub fn from_pb(d: &pb::DescribeResponse, session: impl Fn(u64) -> String) -> LockView {
        LockView {
            name: d.name.clone(),
            holders: d
                .holders
                .iter()
                .map(|h| HolderView {
                    session: session(h.session_id),
                    token: h.token.to_string(),
                    mode: mode_word(h.mode),
                    value: String::from_utf8_lossy(&h.value).into_owned(),
                    held_for_ms: h.held_for_ms,
                })
                .collect(),
            waiters: d
                .waiters
                .iter()
                .map(|w| WaiterView { session: session(w.session_id), mode: mode_word(w.mode), request_id: w.request_id.clone() })
                .collect(),
            token_floor: d.token_floor.to_string(),
            intent: intent_from(d.intent).unwrap_or(Intent::Correctness),
            posture: posture_from(d.posture).ok().flatten().unwrap_or(Posture::FailClosed),
            epoch: d.epoch,
            lock_delayed: d.lock_delayed,
            last_break: d.last_break.as_ref().map(|b| BreakView {
                token: b.token.to_string(),
                by: b.by.clone(),
                reason: b.reason.clone(),
                new_floor: b.new_floor.to_string(),
                at_unix_ms: b.at_unix_ms,
            }),
            revision: d.revision,
        }
    }
}

/// One lock of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockSummaryView {
    pub name: String,
    /// The holders' tokens, decimal.
    pub holders: Vec<String>,
    pub waiters: u32,
}

impl From<&pb::LockSummary> for LockSummaryView {
    fn from(l: &pb::LockSummary) -> LockSummaryView {
        LockSummaryView { name: l.name.clone(), holders: l.holders.iter().map(|h| h.token.to_string()).collect(), waiters: l.waiters }
    }
}

/// A session of a shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfoView {
    pub session: String,
    pub ttl_ms: u64,
    pub label: String,
    pub holds: u32,
    pub waits: u32,
    /// The identity the session is bound to (`user:alice`); empty on an `--insecure` cell.
    pub owner: String,
}

impl SessionInfoView {
    pub fn from_pb(s: &pb::SessionInfo, session: impl Fn(u64) -> String) -> SessionInfoView {
        SessionInfoView {
            session: session(s.session_id),
            ttl_ms: s.ttl_ms,
            label: s.client_label.clone(),
            holds: s.holds,
            waits: s.waits,
            owner: s.owner.clone(),
        }
    }
}

/// One event of a lock's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventView {
    pub revision: u64,
    /// `queued`, `acquired`, `ended`, `dequeued`.
    pub event: String,
    /// How a hold ended (`released`, `expired`, `broken`, `max_hold`, `moved`).
    pub reason: Option<String>,
    pub session: String,
    pub token: String,
    pub value: String,
    pub at_unix_ms: u64,
}

impl EventView {
    pub fn from_pb(e: &pb::LockEvent, session: impl Fn(u64) -> String) -> EventView {
        let kind = pb::EventKind::try_from(e.kind).map_or("unknown".to_owned(), |k| k.as_str_name().to_lowercase());
        let reason = pb::EndReason::try_from(e.reason).ok().filter(|r| *r != pb::EndReason::Unspecified).map(|r| r.as_str_name().to_lowercase());
        EventView {
            revision: e.revision,
            event: kind,
            reason,
            session: session(e.session_id),
            token: e.token.to_string(),
            value: String::from_utf8_lossy(&e.value).into_owned(),
            at_unix_ms: e.at_unix_ms,
        }
    }
}

/// One change of a shard's placement (`WatchOwnership`, the HTTP ownership stream):
/// the owner record after it, with its revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OwnershipEventView {
    /// Registry-wide, one higher for each event: resume after it.
    pub revision: u64,
    #[serde(flatten)]
    pub owner: OwnerView,
    /// While moving: the source has sealed the shard.
    pub sealed: bool,
    /// The registry leader's wall clock at the change, for display only.
    pub at_unix_ms: u64,
}

impl From<&rpb::OwnershipEvent> for OwnershipEventView {
    fn from(e: &rpb::OwnershipEvent) -> OwnershipEventView {
        OwnershipEventView { revision: e.revision, owner: OwnerView::from(&crate::convert::owner_after(e)), sealed: e.sealed, at_unix_ms: e.at_unix_ms }
    }
}

/// A break's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokenView {
    pub lock: String,
    pub new_floor: String,
    pub by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leadership_namespace_keeps_its_intent_through_every_shape() {
        let spec: NamespaceSpec = serde_json::from_str(r#"{"name":"elect","owner":"team","intent":"leadership"}"#).unwrap();
        let wire = spec.to_pb();
        let view = NamespaceView::try_from(&wire).unwrap();
        assert_eq!(view.intent, Intent::Leadership);
        assert_eq!(view.posture, Posture::FailClosed);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["intent"], "leadership");
        assert_eq!(json["posture"], "fail-closed");
        assert!(serde_json::from_str::<NamespaceSpec>(r#"{"name":"x","owner":"y","intent":"Leadership"}"#).is_err());
        assert!(serde_json::from_str::<NamespaceSpec>(r#"{"name":"x","owner":"y","bogus":1}"#).is_err());
    }

    #[test]
    fn owners_say_where_they_move() {
        let o = rpb::ShardOwner {
            ns: "a".into(),
            shard: "default".into(),
            region: "east".into(),
            cell: "east-1".into(),
            epoch: 3,
            state: rpb::ShardState::Moving as i32,
            to_cell: "west-1".into(),
            planned: true,
            sealed: false,
        };
        let v = serde_json::to_value(OwnerView::from(&o)).unwrap();
        assert_eq!(v["state"], "moving");
        assert_eq!(v["to_cell"], "west-1");
        let active = OwnerView::from(&rpb::ShardOwner { state: rpb::ShardState::Active as i32, ..o });
        assert_eq!(active.to_cell, None);
    }
}
