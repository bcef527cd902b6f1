//! A namespace's settings. The registry stores them (versioned); each cell commits the
//! version it serves with `ApplyConfig`, so every replica enforces the same numbers.

use crate::names::{NamespaceName, MAX_VALUE_BYTES};
use serde::{Deserialize, Serialize};

/// What a lock in this namespace protects, which decides the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Intent {
    /// Duplicate work is harmless; the lock only saves effort.
    Efficiency,
    /// Two writers corrupt data; resources must check tokens.
    Correctness,
    /// One long-lived owner (leader election).
    Leadership,
}

/// What the gateway does when the namespace's cell is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Posture {
    /// No lock, no work: answer `UNAVAILABLE`.
    FailClosed,
    /// Run unlocked and count it: answer an explicit unfenced grant.
    FailOpen,
}

/// Limits counted in the cell's state machine (so every replica agrees) plus the
/// acquire rate, which the gateway enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Locks that may exist at once in one shard (a lock exists while it has holders
    /// or waiters). Seed envelope: 10,000.
    pub max_keys: u32,
    /// Live sessions at once in one shard.
    pub max_sessions: u32,
    /// Waiters queued on one lock.
    pub max_waiters_per_lock: u32,
    /// Bytes of a holder's value; at most 1 KiB.
    pub max_value_bytes: u32,
    /// Acquires per second across the namespace, enforced by each gateway. Seed
    /// envelope: 200.
    pub acquires_per_second: u32,
}

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas { max_keys: 10_000, max_sessions: 10_000, max_waiters_per_lock: 1_000, max_value_bytes: MAX_VALUE_BYTES as u32, acquires_per_second: 200 }
    }
}

/// A namespace's settings. All durations are milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceConfig {
    pub name: NamespaceName,
    /// The owning team, for audit and for the status page.
    pub owner: String,
    pub intent: Intent,
    pub posture: Posture,
    /// Smallest session TTL a client may ask for.
    pub ttl_min_ms: u64,
    /// Largest session TTL a client may ask for.
    pub ttl_max_ms: u64,
    /// A hold is ended with `MAX_HOLD` after this long; `None` means no limit.
    pub max_hold_ms: Option<u64>,
    /// After a hold ends without a release, the lock is not granted again for this long.
    pub lock_delay_ms: u64,
    pub quotas: Quotas,
    /// Assigned by the registry; a cell only ever moves to a higher version.
    pub version: u64,
}

/// Bounds that no namespace may step outside.
pub mod bounds {
    /// A TTL shorter than this leaves no room for renewal at TTL/3 over a WAN.
    pub const TTL_FLOOR_MS: u64 = 500;
    /// A day: longer sessions are a leaked-lock generator.
    pub const TTL_CEILING_MS: u64 = 24 * 3600 * 1000;
    /// Longest lock-delay: beyond this a broken lock is effectively lost.
    pub const LOCK_DELAY_CEILING_MS: u64 = 5 * 60 * 1000;
    /// The largest quotas a namespace may set: a cell holds every lock, session and
    /// waiter in memory, so no setting may ask it for more than it can keep.
    pub const MAX_KEYS_CEILING: u32 = 1_000_000;
    pub const MAX_SESSIONS_CEILING: u32 = 1_000_000;
    pub const MAX_WAITERS_PER_LOCK_CEILING: u32 = 100_000;
    pub const ACQUIRES_PER_SECOND_CEILING: u32 = 1_000_000;
    /// Longest owner (team) name, bytes.
    pub const OWNER_MAX_BYTES: usize = 128;
}

/// A namespace config that does not hold together. Maps to `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("ttl bounds are inverted: ttl_min_ms {min} > ttl_max_ms {max}")]
    InvertedTtl { min: u64, max: u64 },
    #[error("{field} is {value} ms; it must be between {lo} and {hi} ms")]
    OutOfRange { field: &'static str, value: u64, lo: u64, hi: u64 },
    #[error("max_hold_ms {max_hold} is shorter than ttl_min_ms {ttl_min}: every hold would be cut")]
    MaxHoldTooShort { max_hold: u64, ttl_min: u64 },
    #[error("quota {field} must be at least 1")]
    ZeroQuota { field: &'static str },
    #[error("quota {field} is {value}; at most {max}")]
    QuotaTooLarge { field: &'static str, value: u32, max: u32 },
    #[error("max_value_bytes {0} exceeds the hard cap of {MAX_VALUE_BYTES}")]
    ValueCapTooLarge(u32),
    #[error("a correctness namespace must be fail-closed: running unlocked corrupts data")]
    CorrectnessFailOpen,
    #[error("owner must not be empty")]
    NoOwner,
    #[error("owner is {0} bytes; at most {max}", max = bounds::OWNER_MAX_BYTES)]
    OwnerTooLong(usize),
}

impl NamespaceConfig {
    /// The defaults for an intent: what an experienced etcd/Consul user would expect.
    /// `docs/semantics.md` lists them.
    pub fn with_defaults(name: NamespaceName, owner: impl Into<String>, intent: Intent) -> NamespaceConfig {
        let (posture, lock_delay_ms) = match intent {
            Intent::Efficiency => (Posture::FailOpen, 0),
            Intent::Correctness | Intent::Leadership => (Posture::FailClosed, 5_000),
        };
        NamespaceConfig {
            name,
            owner: owner.into(),
            intent,
            posture,
            ttl_min_ms: 1_000,
            ttl_max_ms: 300_000,
            max_hold_ms: None,
            lock_delay_ms,
            quotas: Quotas::default(),
            version: 0,
        }
    }

    /// Checks every field and the relations between them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use bounds::*;
        if self.owner.trim().is_empty() {
            return Err(ConfigError::NoOwner);
        }
        if self.owner.len() > OWNER_MAX_BYTES {
            return Err(ConfigError::OwnerTooLong(self.owner.len()));
        }
        for (field, value) in [("ttl_min_ms", self.ttl_min_ms), ("ttl_max_ms", self.ttl_max_ms)] {
            if !(TTL_FLOOR_MS..=TTL_CEILING_MS).contains(&value) {
                return Err(ConfigError::OutOfRange { field, value, lo: TTL_FLOOR_MS, hi: TTL_CEILING_MS });
            }
        }
        if self.ttl_min_ms > self.ttl_max_ms {
            return Err(ConfigError::InvertedTtl { min: self.ttl_min_ms, max: self.ttl_max_ms });
        }
        if let Some(max_hold) = self.max_hold_ms {
            if max_hold < self.ttl_min_ms {
                return Err(ConfigError::MaxHoldTooShort { max_hold, ttl_min: self.ttl_min_ms });
            }
        }
        if self.lock_delay_ms > LOCK_DELAY_CEILING_MS {
            return Err(ConfigError::OutOfRange { field: "lock_delay_ms", value: self.lock_delay_ms, lo: 0, hi: LOCK_DELAY_CEILING_MS });
        }
        let q = &self.quotas;
        for (field, v) in [
            ("max_keys", q.max_keys),
            ("max_sessions", q.max_sessions),
            ("max_waiters_per_lock", q.max_waiters_per_lock),
            ("max_value_bytes", q.max_value_bytes),
            ("acquires_per_second", q.acquires_per_second),
        ] {
            if v == 0 {
                return Err(ConfigError::ZeroQuota { field });
            }
        }
        for (field, value, max) in [
            ("max_keys", q.max_keys, MAX_KEYS_CEILING),
            ("max_sessions", q.max_sessions, MAX_SESSIONS_CEILING),
            ("max_waiters_per_lock", q.max_waiters_per_lock, MAX_WAITERS_PER_LOCK_CEILING),
            ("acquires_per_second", q.acquires_per_second, ACQUIRES_PER_SECOND_CEILING),
        ] {
            if value > max {
                return Err(ConfigError::QuotaTooLarge { field, value, max });
            }
        }
        if q.max_value_bytes as usize > MAX_VALUE_BYTES {
            return Err(ConfigError::ValueCapTooLarge(q.max_value_bytes));
        }
        if self.intent == Intent::Correctness && self.posture == Posture::FailOpen {
            return Err(ConfigError::CorrectnessFailOpen);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> NamespaceConfig {
        NamespaceConfig::with_defaults(NamespaceName::new("payments").unwrap(), "team-pay", Intent::Correctness)
    }

    #[test]
    fn defaults_validate() {
        for intent in [Intent::Efficiency, Intent::Correctness, Intent::Leadership] {
            let c = NamespaceConfig::with_defaults(NamespaceName::new("x").unwrap(), "o", intent);
            assert_eq!(c.validate(), Ok(()), "{intent:?}");
        }
    }

    #[test]
    fn inverted_ttl() {
        let mut c = ns();
        c.ttl_min_ms = 10_000;
        c.ttl_max_ms = 5_000;
        assert_eq!(c.validate(), Err(ConfigError::InvertedTtl { min: 10_000, max: 5_000 }));
    }

    #[test]
    fn each_rule_bites() {
        let mut c = ns();
        c.ttl_min_ms = 10;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { field: "ttl_min_ms", .. })));
        let mut c = ns();
        c.max_hold_ms = Some(500);
        assert!(matches!(c.validate(), Err(ConfigError::MaxHoldTooShort { .. })));
        let mut c = ns();
        c.quotas.max_keys = 0;
        assert_eq!(c.validate(), Err(ConfigError::ZeroQuota { field: "max_keys" }));
        let mut c = ns();
        c.quotas.max_value_bytes = 4096;
        assert_eq!(c.validate(), Err(ConfigError::ValueCapTooLarge(4096)));
        let mut c = ns();
        c.quotas.max_waiters_per_lock = u32::MAX;
        assert_eq!(c.validate(), Err(ConfigError::QuotaTooLarge { field: "max_waiters_per_lock", value: u32::MAX, max: 100_000 }));
        let mut c = ns();
        c.owner = "t".repeat(129);
        assert_eq!(c.validate(), Err(ConfigError::OwnerTooLong(129)));
        let mut c = ns();
        c.posture = Posture::FailOpen;
        assert_eq!(c.validate(), Err(ConfigError::CorrectnessFailOpen));
        let mut c = ns();
        c.owner = " ".into();
        assert_eq!(c.validate(), Err(ConfigError::NoOwner));
        let mut c = ns();
        c.lock_delay_ms = 3_600_000;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { field: "lock_delay_ms", .. })));
    }
}
