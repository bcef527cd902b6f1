//! [`CallContext`]: what a server knows about a call besides its message — who is
//! calling, until when the caller waits, and the trace it belongs to — read once at
//! the door (gRPC metadata or HTTP headers) and passed on to every call made on the
//! caller's behalf ([`CallContext::request`]).

use crate::bearer::{BearerToken, AUTHORIZATION};
use crate::serve::Peer;
use crate::status::{IDENTITY_HEADER, IDENTITY_METADATA, TRACEPARENT, TRACESTATE};
use crate::tls::Identity;
use std::time::Duration;
use tokio::time::Instant;

/// Longest identity or trace header kept; longer ones are dropped, not truncated.
const MAX_HEADER_VALUE: usize = 512;

/// One call's context. `Default` is a call from nobody in particular, with no
/// deadline and no trace (a server's own background work).
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The connection the call came in on, with the identity its certificate proves.
    pub peer: Option<Peer>,
    /// The identity the caller says it acts for (`holdfast-identity` metadata, or the
    /// `x-holdfast-identity` HTTP header). Believed only from a node (a gateway
    /// forwarding its own caller's identity), or on a plaintext (`--insecure`) server,
    /// which authenticates nobody; see [`CallContext::identity`].
    pub claimed_identity: Option<String>,
    /// A bearer token the caller presented (`authorization: Bearer hft....`). Only a
    /// gateway checks it (against the registry's hashes) and, when it holds, sets
    /// [`CallContext::authenticated`]; it is never passed on.
    pub bearer: Option<BearerToken>,
    /// Who a gateway found the caller to be, after checking its certificate or its
    /// token: `user:alice`, `token:ci-bot`. Wins over everything else.
    pub authenticated: Option<String>,
    /// When the caller stops waiting, on this process's monotonic clock (from the
    /// gRPC `grpc-timeout` header).
    pub deadline: Option<Instant>,
    /// W3C trace context as the caller sent it: passed on unchanged when this process
    /// exports no traces, else replaced by the current span's (`crate::trace`).
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

fn bounded(v: Option<&str>) -> Option<String> {
    v.map(str::trim).filter(|v| !v.is_empty() && v.len() <= MAX_HEADER_VALUE).map(str::to_owned)
}

/// Parses a `grpc-timeout` value: up to 8 digits and a unit (`H M S m u n`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

impl CallContext {
    /// The context of an incoming gRPC call.
    pub fn from_grpc<T>(req: &tonic::Request<T>) -> CallContext {
        let md = req.metadata();
        let get = |k: &str| md.get(k).and_then(|v| v.to_str().ok());
        CallContext {
            peer: req.extensions().get::<Peer>().cloned(),
            claimed_identity: bounded(get(IDENTITY_METADATA)),
            bearer: get(AUTHORIZATION).and_then(BearerToken::from_authorization),
            authenticated: None,
            deadline: get("grpc-timeout").and_then(parse_grpc_timeout).map(|d| Instant::now() + d),
            traceparent: bounded(get(TRACEPARENT)),
            tracestate: bounded(get(TRACESTATE)),
        }
    }

    /// The context of an incoming HTTP request.
    pub fn from_http(peer: Option<Peer>, headers: &axum::http::HeaderMap) -> CallContext {
        let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
        CallContext {
            peer,
            claimed_identity: bounded(get(IDENTITY_HEADER)),
            bearer: get(AUTHORIZATION).and_then(BearerToken::from_authorization),
            authenticated: None,
            deadline: None,
            traceparent: bounded(get(TRACEPARENT)),
            tracestate: bounded(get(TRACESTATE)),
        }
    }

    /// The identity the certificate of the connection proves.
    pub fn caller(&self) -> Option<&Identity> {
        self.peer.as_ref().and_then(|p| p.identity.as_ref())
    }

    /// Who the call is for, proven: what a gateway authenticated; the identity a node
    /// (a gateway) acting for someone names; any other certificate's own identity,
    /// whatever it claims. `None` when nothing proves it (a plaintext connection, no
    /// certificate). Sessions are bound to it.
    pub fn principal(&self) -> Option<String> {
        if let Some(p) = &self.authenticated {
            return Some(p.clone());
        }
        match (self.caller()?, &self.claimed_identity) {
            (Identity::Node(_), Some(claim)) => Some(claim.clone()),
            (id, _) => Some(id.to_string()),
        }
    }

    /// Who the call is for, as audit records name it: the [`CallContext::principal`]
    /// if anything proves one; on a plaintext server the claim, which is all there is;
    /// else the connection's address.
    pub fn identity(&self) -> String {
        if let Some(p) = self.principal() {
            return p;
        }
        let tls = self.peer.as_ref().is_some_and(|p| p.tls);
        match (&self.claimed_identity, &self.peer) {
            (Some(claim), _) if !tls => claim.clone(),
            (_, Some(p)) => format!("anonymous@{}", p.addr),
            (_, None) => "anonymous".to_owned(),
        }
    }

    /// Time left before the caller's deadline; `None` when it set none.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// `default`, cut to the caller's deadline.
    pub fn budget(&self, default: Duration) -> Duration {
        self.remaining().map_or(default, |r| r.min(default))
    }

    /// An outgoing request made on this call's behalf: the deadline (as
    /// `grpc-timeout`), the trace and the identity go with it.
    pub fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(left) = self.remaining() {
            r.set_timeout(left.max(Duration::from_millis(1)));
        }
        let on_behalf_of = (self.peer.is_some() || self.claimed_identity.is_some()).then(|| self.identity());
        // The span current here, when traces are exported; else the caller's, unchanged.
        let (traceparent, tracestate) = match crate::trace::outgoing() {
            Some((tp, ts)) => (Some(tp), ts),
            None => (self.traceparent.clone(), self.tracestate.clone()),
        };
        let md = r.metadata_mut();
        for (k, v) in [(IDENTITY_METADATA, &on_behalf_of), (TRACEPARENT, &traceparent), (TRACESTATE, &tracestate)] {
            if let Some(v) = v.as_deref().and_then(|v| v.parse().ok()) {
                md.insert(k, v);
            }
        }
        r
    }

    /// This context, its caller found to be `principal` (by a gateway).
    pub fn authenticated_as(mut self, principal: impl Into<String>) -> CallContext {
        self.authenticated = Some(principal.into());
        self
    }

    /// This context acting for `identity` (a command line naming its operator).
    pub fn acting_for(mut self, identity: impl Into<String>) -> CallContext {
        self.claimed_identity = bounded(Some(&identity.into()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_and_nonsense_does_not() {
        assert_eq!(parse_grpc_timeout("150m"), Some(Duration::from_millis(150)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        for bad in ["", "m", "12", "123456789m", "-1S", "1x"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_context_travels_with_the_calls_made_for_it() {
        let mut incoming = tonic::Request::new(());
        incoming.metadata_mut().insert(IDENTITY_METADATA, "alice".parse().unwrap());
        incoming.metadata_mut().insert(TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap());
        incoming.metadata_mut().insert("grpc-timeout", "5S".parse().unwrap());
        let ctx = CallContext::from_grpc(&incoming);
        assert_eq!(ctx.identity(), "alice");
        assert!(ctx.remaining().unwrap() <= Duration::from_secs(5));
        assert!(ctx.budget(Duration::from_secs(60)) <= Duration::from_secs(5), "cut to the deadline");
        assert_eq!(ctx.budget(Duration::from_millis(1)), Duration::from_millis(1), "a shorter default stands");
        let out = ctx.request(());
        assert_eq!(out.metadata().get(IDENTITY_METADATA).unwrap(), "alice");
        assert_eq!(out.metadata().get(TRACEPARENT).unwrap(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert!(out.metadata().get("grpc-timeout").is_some());
        let node = |claim: Option<&str>, identity: Option<Identity>, tls: bool| CallContext {
            peer: Some(Peer { addr: "10.0.0.1:5".parse().unwrap(), identity, tls }),
            claimed_identity: claim.map(str::to_owned),
            ..CallContext::default()
        };
        assert_eq!(node(Some("user:alice"), Some(Identity::Node("gw".into())), true).identity(), "user:alice", "a node speaks for its caller");
        assert_eq!(node(Some("user:root"), Some(Identity::User("mallory".into())), true).identity(), "user:mallory", "a user cannot claim another");
        assert_eq!(node(Some("user:root"), None, true).identity(), "anonymous@10.0.0.1:5", "no certificate, no claim believed");
        assert_eq!(node(Some("bob"), None, false).identity(), "bob", "plaintext authenticates nobody: the claim is all there is");
        assert_eq!(node(Some("bob"), None, false).principal(), None, "and proves no principal");
        assert_eq!(node(Some("user:alice"), Some(Identity::Node("gw".into())), true).principal().as_deref(), Some("user:alice"));
        assert_eq!(node(None, Some(Identity::User("mallory".into())), true).principal().as_deref(), Some("user:mallory"));
        let gw = node(None, None, true).authenticated_as("token:ci");
        assert_eq!((gw.principal().as_deref(), gw.identity().as_str()), (Some("token:ci"), "token:ci"), "what a gateway authenticated wins");
        let mut bearer = tonic::Request::new(());
        let t = BearerToken::generate("ci").unwrap();
        bearer.metadata_mut().insert(AUTHORIZATION, t.authorization().parse().unwrap());
        let ctx = CallContext::from_grpc(&bearer);
        assert_eq!(ctx.bearer, Some(t));
        assert!(ctx.request(()).metadata().get(AUTHORIZATION).is_none(), "a token is never passed on");
        let mut long = tonic::Request::new(());
        long.metadata_mut().insert(IDENTITY_METADATA, "x".repeat(600).parse().unwrap());
        assert_eq!(CallContext::from_grpc(&long).claimed_identity, None, "oversized headers are dropped");
    }
}
