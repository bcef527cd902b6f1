//! Which lock a token belongs to.

use holdfast_core::{LockName, NameError, NamespaceName, ShardKey, ShardName};
use std::fmt;
use std::str::FromStr;

/// A lock, named across all of holdfast: namespace, shard and lock name.
///
/// The shard is part of it because tokens are only comparable within a shard: a
/// token is `epoch << 40 | seq` of the shard that granted it. Two locks called
/// `settle` in two namespaces have unrelated tokens and so each gets its own fence.
///
/// Written `ns/shard/name` (`payments/default/settle:2026-10-01`). Namespace and
/// shard names cannot contain `/`, so the first two `/` split it unambiguously and
/// the name may contain more.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockId {
    shard: ShardKey,
    name: LockName,
}

impl LockId {
    pub fn new(shard: ShardKey, name: LockName) -> LockId {
        LockId { shard, name }
    }

    /// Parses `ns/shard/name`, validating each part.
    pub fn parse(s: &str) -> Result<LockId, NameError> {
        let mut parts = s.splitn(3, '/');
        let ns = NamespaceName::new(parts.next().unwrap_or_default())?;
        let shard = ShardName::new(parts.next().unwrap_or_default())?;
        let name = LockName::new(parts.next().unwrap_or_default())?;
        Ok(LockId::new(ShardKey::new(ns, shard), name))
    }

    pub fn shard(&self) -> &ShardKey {
        &self.shard
    }

    pub fn name(&self) -> &LockName {
        &self.name
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.shard.ns, self.shard.shard, self.name)
    }
}

impl FromStr for LockId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<LockId, NameError> {
        LockId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        let id = LockId::parse("payments/default/payouts/batch-7").unwrap();
        assert_eq!(id.shard().ns.as_str(), "payments");
        assert_eq!(id.shard().shard.as_str(), "default");
        assert_eq!(id.name().as_str(), "payouts/batch-7");
        assert_eq!(id.to_string(), "payments/default/payouts/batch-7");
        assert_eq!(id.to_string().parse::<LockId>().unwrap(), id);
    }

    #[test]
    fn missing_or_bad_parts_are_refused() {
        assert!(matches!(LockId::parse("payments"), Err(NameError::Empty { kind: "shard" })));
        assert!(matches!(LockId::parse("payments/default"), Err(NameError::Empty { kind: "lock name" })));
        assert!(matches!(LockId::parse("Pay/default/x"), Err(NameError::BadChar { .. })));
    }
}
