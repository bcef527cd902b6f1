//! Who may call what through this gateway: the caller is authenticated (a client
//! certificate, or a bearer token checked against the registry's hashes) and its
//! roles checked against the registry's grants, once per call, before anything is
//! routed. The grants and token hashes are a copy, asked for again every
//! [`REFRESH`]. While the registry cannot be reached, the gateway serves on its last
//! copy (Consul's `down_policy = extend-cache`): a region keeps serving with the
//! registry away, and a revocation reaches it once the registry is back. A copy older
//! than [`EXTEND_CACHE`] refuses every caller but nodes and `root`: after that long,
//! access fails closed. The table of which call needs which role is in
//! docs/security.md; [`Need`] is how each call states it.
//!
//! A gateway started `--insecure` authenticates nobody and lets every call through.

use holdfast_core::{ErrorCode, Grant, NamespaceName, Role};
use holdfast_proto::convert::grant_from;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::status::status;
use holdfast_rpc::{Budget, CallContext, Identity, Upstream};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;
use tracing::{debug, info, warn};

/// How often the grants and token hashes are asked for again. While the registry
/// answers, a revoked token or role stops working within this plus one registry round
/// trip.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How long the gateway serves on its last copy while the registry cannot be reached:
/// as long as the cells' default ownership lease, so a region rides out a registry
/// outage as long as its cells do (a deployment that configures a longer lease rides
/// out no more than this through its gateways). Older than this, the copy is not
/// trusted: callers other than nodes and `root` are refused with `UNAVAILABLE` until the
/// registry answers.
pub const EXTEND_CACHE: Duration = holdfast_core::DEFAULT_OWNERSHIP_LEASE;

/// What a call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// At least `role` in the namespace.
    In(Role, NamespaceName),
    /// `operator`: the cluster's regions, cells, placement, namespaces and access.
    Operator,
    /// Nothing a person may do through a gateway (the calls cells make to the
    /// registry directly).
    NodesOnly,
}

impl Need {
    /// `role` in the namespace named `ns` (checked as a name: a bad one is
    /// `INVALID_ARGUMENT`, not a refusal).
    pub fn ns(role: Role, ns: &str) -> Result<Need, Status> {
        let ns = NamespaceName::new(ns).map_err(|e| status(ErrorCode::InvalidArgument, format!("namespace {ns:?}: {e}")))?;
        Ok(Need::In(role, ns))
    }

    /// `role` in `ns`, or `operator` when `ns` is empty (a call about every
    /// namespace: a listing, a watch).
    pub fn ns_or_operator(role: Role, ns: &str) -> Result<Need, Status> {
        if ns.is_empty() {
            Ok(Need::Operator)
        } else {
            Need::ns(role, ns)
        }
    }

    fn covered_by(&self, g: &Grant) -> bool {
        match self {
            Need::In(role, ns) => g.covers(*role, Some(ns)),
            Need::Operator => g.covers(Role::Operator, None),
            Need::NodesOnly => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Need::In(role, ns) => format!("{role} in namespace {ns}"),
            Need::Operator => "operator".into(),
            Need::NodesOnly => "a node certificate".into(),
        }
    }
}

/// The registry's grants and token hashes, as last fetched.
#[derive(Debug)]
struct Copy {
    version: u64,
    /// Principal → its grants: a call looks up its caller's, not every grant.
    grants: HashMap<String, Vec<Grant>>,
    /// Token name → SHA-256 of its secret (hex).
    tokens: HashMap<String, String>,
    fetched: Instant,
}

/// The gateway's enforcement point.
#[derive(Debug)]
pub struct Access {
    enforcing: bool,
    copy: RwLock<Option<Copy>>,
    /// [`EXTEND_CACHE`]; shorter in unit tests.
    extend: Duration,
}

fn unauthenticated(msg: impl Into<String>) -> Status {
    status(ErrorCode::Unauthenticated, msg.into())
}

impl Access {
    /// `enforcing` is false exactly on an `--insecure` gateway.
    pub fn new(enforcing: bool) -> Access {
        Access { enforcing, copy: RwLock::new(None), extend: EXTEND_CACHE }
    }

    /// Can this gateway decide calls: not enforcing, or holding a fresh copy of the
    /// policy? Part of `/readyz` and gRPC health: a gateway that would refuse every
    /// call with UNAVAILABLE is not ready.
    pub fn ready(&self) -> bool {
        !self.enforcing || self.with_fresh(|_| ()).is_ok()
    }

    /// Authenticates the caller of `ctx` and checks it against `need`. The context
    /// returned names the caller ([`CallContext::authenticated`]): cells bind sessions
    /// to it and the registry's audit log records it.
    pub fn authorize(&self, ctx: &CallContext, need: &Need) -> Result<CallContext, Status> {
        if !self.enforcing {
            return Ok(ctx.clone());
        }
        let principal = match (&ctx.bearer, ctx.caller()) {
            (Some(token), _) => {
                if !self.with_fresh(|c| c.tokens.get(token.name()).is_some_and(|hash| token.matches(hash)))? {
                    return Err(unauthenticated(format!("token {} is unknown or revoked", token.name())));
                }
                token.principal()
            }
            // Peers and the bootstrap operator: every call, without the registry's copy.
            (None, Some(id)) if id.is_node_or_root() => {
                let who = match id {
                    Identity::Node(_) => ctx.principal().unwrap_or_else(|| id.to_string()),
                    Identity::User(_) => id.to_string(),
                };
                return Ok(ctx.clone().authenticated_as(who));
            }
            (None, Some(id)) => id.to_string(),
            (None, None) => return Err(unauthenticated("no client certificate and no bearer token: present one (docs/security.md)")),
        };
        if self.with_fresh(|c| c.grants.get(&principal).is_some_and(|gs| gs.iter().any(|g| need.covered_by(g))))? {
            Ok(ctx.clone().authenticated_as(principal))
        } else {
            Err(status(ErrorCode::PermissionDenied, format!("{principal} may not make this call: it needs {}", need.describe())))
        }
    }

    /// `f` of the copy, if it is fresh enough to decide with.
    fn with_fresh<T>(&self, f: impl FnOnce(&Copy) -> T) -> Result<T, Status> {
        match self.copy.read().expect("access lock").as_ref() {
            Some(c) if c.fetched.elapsed() <= self.extend => Ok(f(c)),
            Some(c) => Err(status(
                ErrorCode::Unavailable,
                format!(
                    "this gateway's copy of the access policy is {} s old, older than the {} s it serves on while the registry is unreachable: it refuses until it refreshes",
                    c.fetched.elapsed().as_secs(),
                    self.extend.as_secs()
                ),
            )),
            None => Err(status(ErrorCode::Unavailable, "this gateway has not yet fetched the access policy from the registry")),
        }
    }

    /// Keeps the copy fresh: asks the registry every [`REFRESH`] for anything newer
    /// than the version it has.
    pub async fn follow(&self, registry: &Upstream, budget: Budget) {
        loop {
            let known = self.copy.read().expect("access lock").as_ref().map_or(0, |c| c.version);
            let req = rpb::ListAccessRequest { known_version: known };
            match registry.call(budget, |ch| async move { RegistryServiceClient::new(ch).list_access(req).await }).await {
                Ok(r) => self.install(r.value),
                Err(e) => debug!(error = %e, "fetching the access policy failed"),
            }
            tokio::time::sleep(REFRESH).await;
        }
    }

    fn install(&self, r: rpb::ListAccessResponse) {
        let now = Instant::now();
        let mut copy = self.copy.write().expect("access lock");
        if let (true, Some(c)) = (r.unchanged, copy.as_mut()) {
            if c.version == r.version {
                c.fetched = now;
                return;
            }
        }
        let mut grants: HashMap<String, Vec<Grant>> = HashMap::new();
        let count = r.grants.len();
        for g in r.grants {
            match grant_from(g) {
                Ok(g) => grants.entry(g.principal.clone()).or_default().push(g),
                // Written by a newer registry: not understood, so it grants nothing.
                Err(e) => warn!(error = %e, "a grant this gateway cannot read: ignored"),
            }
        }
        let tokens = r.tokens.into_iter().map(|t| (t.name, t.sha256)).collect();
        if copy.as_ref().is_none_or(|c| c.version != r.version) {
            info!(version = r.version, grants = count, "access policy fetched");
        }
        *copy = Some(Copy { version: r.version, grants, tokens, fetched: now });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_proto::convert::grant_to;
    use holdfast_rpc::serve::Peer;
    use holdfast_rpc::status::code_of;
    use holdfast_rpc::BearerToken;

    fn ns(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    fn from(identity: Option<Identity>, bearer: Option<&BearerToken>) -> CallContext {
        CallContext { peer: Some(Peer { addr: "127.0.0.1:1".parse().unwrap(), identity, tls: true }), bearer: bearer.cloned(), ..CallContext::default() }
    }

    fn user(name: &str) -> CallContext {
        from(Some(Identity::user(name).unwrap()), None)
    }

    fn code(r: Result<CallContext, Status>) -> Result<String, ErrorCode> {
        r.map(|c| c.principal().unwrap()).map_err(|s| code_of(&s).unwrap())
    }

    /// alice: holder in alpha; token ci: reader in alpha; version 1.
    fn policy(token: &BearerToken) -> rpb::ListAccessResponse {
        let grants = [
            Grant { principal: "user:alice".into(), role: Role::Holder, ns: Some(ns("alpha")) },
            Grant { principal: "token:ci".into(), role: Role::Reader, ns: Some(ns("alpha")) },
            Grant { principal: "user:olga".into(), role: Role::Operator, ns: None },
        ];
        rpb::ListAccessResponse {
            grants: grants.iter().map(grant_to).collect(),
            tokens: vec![rpb::TokenInfo { name: "ci".into(), sha256: token.sha256(), created_unix_ms: 1, created_by: "user:olga".into() }],
            version: 1,
            unchanged: false,
        }
    }

    #[test]
    fn roles_are_checked_per_namespace_and_tokens_against_their_hash() {
        let a = Access::new(true);
        let token = BearerToken::generate("ci").unwrap();
        // Nothing fetched yet: undecidable, so refused as unavailable (and not ready).
        assert!(!a.ready());
        assert_eq!(code(a.authorize(&user("alice"), &Need::In(Role::Reader, ns("alpha")))), Err(ErrorCode::Unavailable));
        a.install(policy(&token));
        assert!(a.ready());

        let holder_alpha = Need::In(Role::Holder, ns("alpha"));
        assert_eq!(code(a.authorize(&user("alice"), &holder_alpha)), Ok("user:alice".into()));
        assert_eq!(code(a.authorize(&user("alice"), &Need::In(Role::Reader, ns("alpha")))), Ok("user:alice".into()));
        assert_eq!(code(a.authorize(&user("alice"), &Need::In(Role::Admin, ns("alpha")))), Err(ErrorCode::PermissionDenied));
        assert_eq!(code(a.authorize(&user("alice"), &Need::In(Role::Reader, ns("beta")))), Err(ErrorCode::PermissionDenied));
        assert_eq!(code(a.authorize(&user("alice"), &Need::Operator)), Err(ErrorCode::PermissionDenied));
        assert_eq!(code(a.authorize(&user("bob"), &holder_alpha)), Err(ErrorCode::PermissionDenied));
        assert_eq!(code(a.authorize(&user("olga"), &Need::In(Role::Admin, ns("beta")))), Ok("user:olga".into()));
        assert_eq!(code(a.authorize(&user("olga"), &Need::NodesOnly)), Err(ErrorCode::PermissionDenied));
        // Nodes and root pass without a grant.
        assert!(a.authorize(&user("root"), &Need::Operator).is_ok());
        assert!(a.authorize(&from(Some(Identity::node("gw1").unwrap()), None), &Need::NodesOnly).is_ok());
        // No certificate and no token: unauthenticated.
        assert_eq!(code(a.authorize(&from(None, None), &Need::In(Role::Reader, ns("alpha")))), Err(ErrorCode::Unauthenticated));

        // The token: its grant, and only with the right secret.
        let reader_alpha = Need::In(Role::Reader, ns("alpha"));
        assert_eq!(code(a.authorize(&from(None, Some(&token)), &reader_alpha)), Ok("token:ci".into()));
        assert_eq!(code(a.authorize(&from(None, Some(&token)), &holder_alpha)), Err(ErrorCode::PermissionDenied));
        let forged = BearerToken::generate("ci").unwrap();
        assert_eq!(code(a.authorize(&from(None, Some(&forged)), &reader_alpha)), Err(ErrorCode::Unauthenticated));
        // A token wins over the certificate it came with: alice's token is only the token.
        assert_eq!(code(a.authorize(&from(Some(Identity::user("alice").unwrap()), Some(&token)), &holder_alpha)), Err(ErrorCode::PermissionDenied));

        // Revoked: the next copy lacks it.
        let mut next = policy(&token);
        next.tokens.clear();
        next.version = 2;
        a.install(next);
        assert_eq!(code(a.authorize(&from(None, Some(&token)), &reader_alpha)), Err(ErrorCode::Unauthenticated));
    }

    #[test]
    fn a_stale_copy_fails_closed_except_for_nodes_and_root() {
        // The copy is served on for `extend` (35 minutes in production) with the
        // registry away; older, it fails closed.
        // The copy's age is set by moving its fetch time back, a second from each side
        // of the extension, so a slow machine between two lines changes nothing (with
        // 1 ms of slack it failed once under load).
        let a = Access { extend: Duration::from_secs(10), ..Access::new(true) };
        let token = BearerToken::generate("ci").unwrap();
        a.install(policy(&token));
        let holder_alpha = Need::In(Role::Holder, ns("alpha"));
        assert!(a.authorize(&user("alice"), &holder_alpha).is_ok());
        a.copy.write().unwrap().as_mut().unwrap().fetched -= Duration::from_secs(9);
        assert!(a.ready() && a.authorize(&user("alice"), &holder_alpha).is_ok(), "a copy within its extension was not served on");
        a.copy.write().unwrap().as_mut().unwrap().fetched -= Duration::from_secs(2);
        assert!(!a.ready());
        assert_eq!(code(a.authorize(&user("alice"), &holder_alpha)), Err(ErrorCode::Unavailable));
        assert_eq!(code(a.authorize(&from(None, Some(&token)), &Need::In(Role::Reader, ns("alpha")))), Err(ErrorCode::Unavailable));
        assert!(a.authorize(&user("root"), &holder_alpha).is_ok());
        // An unchanged answer refreshes it.
        a.install(rpb::ListAccessResponse { version: 1, unchanged: true, ..Default::default() });
        assert!(a.authorize(&user("alice"), &holder_alpha).is_ok());
    }

    #[test]
    fn an_insecure_gateway_lets_every_call_through() {
        let a = Access::new(false);
        assert!(a.ready());
        assert!(a.authorize(&CallContext::default(), &Need::Operator).is_ok());
    }
}
