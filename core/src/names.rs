//! Validated names. A value of one of these types has passed its checks, so code
//! further in never re-validates and never sees a 20 KB lock name.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Namespaces, shards, regions and cells: short identifiers.
pub const MAX_SHORT_NAME_BYTES: usize = 63;
/// Lock names may be paths (`payouts/batch-7`), so they are longer.
pub const MAX_LOCK_NAME_BYTES: usize = 512;
/// A client's idempotency key for Acquire.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// A holder's payload (address, identity): docs/design.md ("API") says at most 1 KiB.
pub const MAX_VALUE_BYTES: usize = 1024;

/// Why a name was refused. Maps to `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{kind} must not be empty")]
    Empty { kind: &'static str },
    #[error("{kind} is {len} bytes; at most {max} are allowed")]
    TooLong { kind: &'static str, len: usize, max: usize },
    #[error("{kind} {shown:?} has a character that is not allowed ({rule})")]
    BadChar { kind: &'static str, shown: String, rule: &'static str },
}

const SHORT_RULE: &str = "lowercase letters, digits, '-', '_' and '.'; starting with a letter or digit";

fn check_short(kind: &'static str, s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if s.len() > MAX_SHORT_NAME_BYTES {
        return Err(NameError::TooLong { kind, len: s.len(), max: MAX_SHORT_NAME_BYTES });
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.');
    let first_ok = s.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !first_ok || !s.chars().all(ok_char) {
        return Err(NameError::BadChar { kind, shown: preview(s), rule: SHORT_RULE });
    }
    Ok(())
}

fn preview(s: &str) -> String {
    s.chars().take(40).collect()
}

macro_rules! short_name {
    ($(#[$doc:meta])* $ty:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $ty(String);

        impl $ty {
            /// Validates and wraps `s`.
            pub fn new(s: impl Into<String>) -> Result<Self, NameError> {
                let s = s.into();
                check_short($kind, &s)?;
                Ok(Self(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $ty {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, NameError> {
                Self::new(s)
            }
        }

        impl From<$ty> for String {
            fn from(v: $ty) -> String {
                v.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

short_name!(
    /// A tenant of holdfast (`payments`, `search-indexer`).
    NamespaceName,
    "namespace"
);
short_name!(
    /// A shard of a namespace; a namespace with one shard calls it `default`.
    ShardName,
    "shard"
);
short_name!(
    /// A failure domain (`us-east`, `eu-west`, `ap-south`).
    RegionId,
    "region"
);
short_name!(
    /// One Raft group inside a region (`us-east-1`).
    CellId,
    "cell"
);

impl ShardName {
    /// The shard of a single-shard namespace.
    pub fn default_shard() -> ShardName {
        ShardName("default".to_owned())
    }
}

/// The unit of placement: `(namespace, shard)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardKey {
    pub ns: NamespaceName,
    pub shard: ShardName,
}

impl ShardKey {
    pub fn new(ns: NamespaceName, shard: ShardName) -> ShardKey {
        ShardKey { ns, shard }
    }
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ns, self.shard)
    }
}

/// A lock's name inside a shard: any UTF-8 without control characters, up to
/// [`MAX_LOCK_NAME_BYTES`]. `/` is allowed so names can form paths for List.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LockName(String);

impl LockName {
    pub fn new(s: impl Into<String>) -> Result<LockName, NameError> {
        let s = s.into();
        check_bytes("lock name", &s, MAX_LOCK_NAME_BYTES)?;
        Ok(LockName(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn check_bytes(kind: &'static str, s: &str, max: usize) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if s.len() > max {
        return Err(NameError::TooLong { kind, len: s.len(), max });
    }
    if s.chars().any(char::is_control) {
        return Err(NameError::BadChar { kind, shown: preview(s), rule: "no control characters" });
    }
    Ok(())
}

impl TryFrom<String> for LockName {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, NameError> {
        Self::new(s)
    }
}

impl From<LockName> for String {
    fn from(v: LockName) -> String {
        v.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A client's idempotency key for Acquire: a retry with the same session and
/// request id gets the original outcome.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestId(String);

impl RequestId {
    pub fn new(s: impl Into<String>) -> Result<RequestId, NameError> {
        let s = s.into();
        check_bytes("request id", &s, MAX_REQUEST_ID_BYTES)?;
        Ok(RequestId(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RequestId {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, NameError> {
        Self::new(s)
    }
}

impl From<RequestId> for String {
    fn from(v: RequestId) -> String {
        v.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a holder's value against the hard cap of [`MAX_VALUE_BYTES`]. A namespace
/// may set a lower cap; the state machine enforces that one.
pub fn validate_value(v: &[u8]) -> Result<(), NameError> {
    if v.len() > MAX_VALUE_BYTES {
        return Err(NameError::TooLong { kind: "value", len: v.len(), max: MAX_VALUE_BYTES });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert!(NamespaceName::new("payments").is_ok());
        assert!(NamespaceName::new("a.b-c_d9").is_ok());
        assert!(matches!(NamespaceName::new(""), Err(NameError::Empty { .. })));
        assert!(matches!(NamespaceName::new("Payments"), Err(NameError::BadChar { .. })));
        assert!(matches!(NamespaceName::new("-x"), Err(NameError::BadChar { .. })));
        assert!(matches!(NamespaceName::new("x".repeat(64)), Err(NameError::TooLong { .. })));
    }

    #[test]
    fn lock_names() {
        assert!(LockName::new("payouts/batch-7").is_ok());
        let huge = "n".repeat(20 * 1024);
        assert!(matches!(LockName::new(huge), Err(NameError::TooLong { len: 20480, .. })));
        assert!(matches!(LockName::new("a\nb"), Err(NameError::BadChar { .. })));
    }

    #[test]
    fn serde_validates() {
        let bad: Result<NamespaceName, _> = serde_json::from_str("\"UPPER\"");
        assert!(bad.is_err());
        let good: NamespaceName = serde_json::from_str("\"lower\"").unwrap();
        assert_eq!(good.as_str(), "lower");
    }
}
