//! Who may do what, replicated: role grants, bearer tokens (stored as hashes), and the
//! durable audit log of every administrative action. Part of the registry's state, so
//! every voter agrees on them and they survive restarts; gateways fetch and enforce
//! them (docs/security.md).

use holdfast_core::{valid_principal_name, Grant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Audit records kept; older ones are dropped (their count is kept, so a reader sees
/// where the log starts).
pub const AUDIT_CAP: usize = 100_000;
/// Longest principal, token name, action or detail, bytes.
pub const MAX_FIELD: usize = 1024;
/// Most grants, and most tokens, the registry keeps.
pub const MAX_GRANTS: usize = 10_000;

/// A bearer token: its name and the SHA-256 of its secret (hex). The secret itself is
/// shown once, to whoever created it, and stored nowhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub name: String,
    pub sha256: String,
    pub created_at_unix_ms: u64,
    pub created_by: String,
}

/// One administrative action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// 1, 2, 3, ...: never reused.
    pub seq: u64,
    /// The registry leader's wall clock, for people.
    pub at_unix_ms: u64,
    /// Who: `user:alice`, `token:ci-bot`, `node:gateway-east`.
    pub by: String,
    /// What: `create_namespace`, `move_shard`, `break_lock`, `grant`, ...
    pub action: String,
    /// On what, and why.
    pub detail: String,
}

/// The access part of the registry's state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Access {
    pub(crate) grants: BTreeSet<Grant>,
    pub(crate) tokens: BTreeMap<String, TokenRecord>,
    /// Bumped by every grant, revoke and token change: gateways compare it.
    pub(crate) version: u64,
    pub(crate) audit: VecDeque<AuditRecord>,
    pub(crate) next_seq: u64,
}

fn bounded(what: &str, v: &str) -> Result<(), String> {
    if v.len() > MAX_FIELD {
        return Err(format!("{what} is {} bytes; at most {MAX_FIELD}", v.len()));
    }
    Ok(())
}

impl Access {
    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter()
    }

    pub fn tokens(&self) -> impl Iterator<Item = &TokenRecord> {
        self.tokens.values()
    }

    pub(crate) fn grant(&mut self, g: &Grant) -> Result<u64, String> {
        g.validate()?;
        if !self.grants.contains(g) && self.grants.len() >= MAX_GRANTS {
            return Err(format!("the registry keeps at most {MAX_GRANTS} grants"));
        }
        if self.grants.insert(g.clone()) {
            self.version += 1;
        }
        Ok(self.version)
    }

    pub(crate) fn revoke(&mut self, g: &Grant) -> Result<u64, String> {
        if self.grants.remove(g) {
            self.version += 1;
            Ok(self.version)
        } else {
            Err(format!("no such grant: {g}"))
        }
    }

    pub(crate) fn create_token(&mut self, t: &TokenRecord) -> Result<u64, String> {
        if !valid_principal_name(&t.name) {
            return Err(format!("token name {:?}: a-z 0-9 . _ -, at most 64 bytes", t.name));
        }
        bounded("created_by", &t.created_by)?;
        if t.sha256.len() != 64 || !t.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("a token's hash is 64 hex digits (SHA-256)".into());
        }
        if self.tokens.contains_key(&t.name) {
            return Err(format!("token {} exists: revoke it first", t.name));
        }
        if self.tokens.len() >= MAX_GRANTS {
            return Err(format!("the registry keeps at most {MAX_GRANTS} tokens"));
        }
        self.tokens.insert(t.name.clone(), t.clone());
        self.version += 1;
        Ok(self.version)
    }

    /// Revokes the token and every grant to it.
    pub(crate) fn revoke_token(&mut self, name: &str) -> Result<u64, String> {
        if self.tokens.remove(name).is_none() {
            return Err(format!("no token {name}"));
        }
        let principal = format!("token:{name}");
        self.grants.retain(|g| g.principal != principal);
        self.version += 1;
        Ok(self.version)
    }

    pub(crate) fn audit(&mut self, at_unix_ms: u64, by: &str, action: &str, detail: &str) -> Result<u64, String> {
        bounded("by", by)?;
        bounded("action", action)?;
        bounded("detail", detail)?;
        self.next_seq += 1;
        if self.audit.len() == AUDIT_CAP {
            self.audit.pop_front();
        }
        self.audit.push_back(AuditRecord { seq: self.next_seq, at_unix_ms, by: by.to_owned(), action: action.to_owned(), detail: detail.to_owned() });
        Ok(self.next_seq)
    }

    /// Up to `limit` records after `after_seq`, oldest first.
    pub fn audit_after(&self, after_seq: u64, limit: usize) -> Vec<AuditRecord> {
        let start = self.audit.partition_point(|r| r.seq <= after_seq);
        self.audit.range(start..).take(limit).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_core::Role;

    fn ns(n: &str) -> Option<holdfast_core::NamespaceName> {
        Some(holdfast_core::NamespaceName::new(n).unwrap())
    }

    #[test]
    fn grants_are_validated_bounded_and_versioned() {
        let mut a = Access::default();
        let g = Grant { principal: "user:alice".into(), role: Role::Holder, ns: ns("pay") };
        let v1 = a.grant(&g).unwrap();
        assert_eq!(a.grant(&g).unwrap(), v1, "granting twice changes nothing");
        assert!(a.grant(&Grant { principal: "mallory".into(), role: Role::Reader, ns: ns("pay") }).is_err());
        assert!(a.revoke(&Grant { role: Role::Admin, ..g.clone() }).is_err(), "only what was granted is revoked");
        assert!(a.revoke(&g).unwrap() > v1);
        assert_eq!(a.grants().count(), 0);
    }

    #[test]
    fn revoking_a_token_takes_its_grants_and_bumps_the_version() {
        let mut a = Access::default();
        let t = TokenRecord { name: "ci".into(), sha256: "ab".repeat(32), created_at_unix_ms: 1, created_by: "user:root".into() };
        let v1 = a.create_token(&t).unwrap();
        a.grant(&Grant { principal: "token:ci".into(), role: Role::Reader, ns: ns("pay") }).unwrap();
        assert!(a.create_token(&t).is_err(), "a name is used once");
        let v2 = a.revoke_token("ci").unwrap();
        assert!(v2 > v1 + 1);
        assert_eq!(a.grants().count(), 0, "the token's grants went with it");
        assert!(a.create_token(&TokenRecord { sha256: "zz".into(), ..t }).is_err());
    }

    #[test]
    fn the_audit_log_is_ordered_bounded_in_fields_and_paged() {
        let mut a = Access::default();
        for i in 0..5 {
            assert_eq!(a.audit(i, "user:root", "create_namespace", &format!("ns-{i}")).unwrap(), i + 1);
        }
        assert!(a.audit(9, "user:root", "x", &"d".repeat(MAX_FIELD + 1)).is_err());
        let page = a.audit_after(2, 2);
        assert_eq!(page.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4]);
    }

    #[test]
    fn the_audit_log_keeps_the_newest_records_and_never_reuses_a_number() {
        let mut a = Access::default();
        for i in 0..AUDIT_CAP as u64 + 3 {
            a.audit(i, "user:root", "place_shard", "pay/default").unwrap();
        }
        assert_eq!(a.audit.len(), AUDIT_CAP);
        let oldest = a.audit_after(0, 1);
        assert_eq!(oldest[0].seq, 4, "the three oldest went first");
        assert_eq!(a.audit_after(AUDIT_CAP as u64 + 2, 10).iter().map(|r| r.seq).collect::<Vec<_>>(), vec![AUDIT_CAP as u64 + 3]);
    }
}
