//! Who may do what: the roles a principal can be given and the grants that give them.
//! The registry stores grants (replicated, versioned); gateways enforce them; the
//! rules of who needs which role for which call are in docs/security.md.

use crate::names::NamespaceName;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest principal name (after `user:` or `token:`), bytes.
pub const MAX_PRINCIPAL_NAME_BYTES: usize = 64;

/// What a principal may do. In a namespace each role includes the ones before it:
/// `reader` ⊂ `holder` ⊂ `admin`. `operator` is cluster-wide and includes them all.
/// (`node` is not a role one grants: it is what a node certificate proves, checked at
/// every node's own ports.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Describe, list, check tokens, watch, look up owners and the namespace.
    Reader,
    /// Sessions, acquire, release: on its own sessions only.
    Holder,
    /// The namespace's settings, break-lock.
    Admin,
    /// Regions, cells, namespaces, placement, moves, evacuations, access, audit.
    Operator,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Reader, Role::Holder, Role::Admin, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Holder => "holder",
            Role::Admin => "admin",
            Role::Operator => "operator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| format!("role {s:?} is not one of: reader, holder, admin, operator"))
    }
}

/// Is `name` a valid principal name: 1..=64 bytes of `a-z 0-9 . _ -`?
pub fn valid_principal_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PRINCIPAL_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

/// A role given to a principal — `user:alice` (a client certificate) or `token:ci-bot`
/// (a bearer token) — in one namespace or, for `operator`, the whole cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub principal: String,
    pub role: Role,
    /// `None` exactly for `operator`.
    pub ns: Option<NamespaceName>,
}

impl Grant {
    /// Checks the shape: `user:<name>` or `token:<name>`, a namespace for every role but
    /// `operator`, none for it.
    pub fn validate(&self) -> Result<(), String> {
        let ok = matches!(self.principal.split_once(':'), Some(("user" | "token", name)) if valid_principal_name(name));
        if !ok {
            return Err(format!(
                "principal {:?}: user:<name> or token:<name>, names of a-z 0-9 . _ -, at most {MAX_PRINCIPAL_NAME_BYTES} bytes",
                self.principal
            ));
        }
        match (self.role, &self.ns) {
            (Role::Operator, Some(ns)) => Err(format!("operator is cluster-wide: drop the namespace {ns}")),
            (Role::Operator, None) | (_, Some(_)) => Ok(()),
            (r, None) => Err(format!("{r} is a role in a namespace: name one")),
        }
    }

    /// Does this grant cover `role` in `ns` (`None`: a cluster-wide call)?
    pub fn covers(&self, role: Role, ns: Option<&NamespaceName>) -> bool {
        self.role == Role::Operator || (self.role >= role && ns.is_some() && self.ns.as_ref() == ns)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.principal, self.role)?;
        if let Some(ns) = &self.ns {
            write!(f, " in {ns}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(p: &str, role: Role, ns: Option<&str>) -> Grant {
        Grant { principal: p.into(), role, ns: ns.map(|n| NamespaceName::new(n).unwrap()) }
    }

    #[test]
    fn roles_nest_within_a_namespace_and_stay_in_it() {
        let pay = NamespaceName::new("pay").unwrap();
        let web = NamespaceName::new("web").unwrap();
        let holder = grant("user:alice", Role::Holder, Some("pay"));
        assert!(holder.covers(Role::Reader, Some(&pay)) && holder.covers(Role::Holder, Some(&pay)));
        assert!(!holder.covers(Role::Admin, Some(&pay)));
        assert!(!holder.covers(Role::Reader, Some(&web)), "no cross-namespace access");
        assert!(!holder.covers(Role::Reader, None), "a namespace role covers no cluster-wide call");
        let admin = grant("user:alice", Role::Admin, Some("pay"));
        assert!(!admin.covers(Role::Operator, None) && !admin.covers(Role::Operator, Some(&pay)), "admin is not operator, even in its namespace");
        let op = grant("user:ops", Role::Operator, None);
        assert!(op.covers(Role::Admin, Some(&web)) && op.covers(Role::Operator, None));
    }

    #[test]
    fn grants_are_checked_for_shape() {
        assert!(grant("user:alice", Role::Reader, Some("pay")).validate().is_ok());
        assert!(grant("token:ci-bot", Role::Operator, None).validate().is_ok());
        assert!(grant("user:x", Role::Operator, Some("pay")).validate().is_err());
        assert!(grant("user:x", Role::Reader, None).validate().is_err());
        for bad in ["mallory", "group:x", "user:", "user:Alice", &format!("user:{}", "a".repeat(65))] {
            assert!(grant(bad, Role::Reader, Some("pay")).validate().is_err(), "{bad}");
        }
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert!("root".parse::<Role>().is_err());
    }
}
