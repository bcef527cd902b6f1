//! The node boundary: what a cell's or a registry voter's own ports let through. They
//! serve the cluster's peers — nodes, whose certificates say `holdfast://node/...` —
//! and the bootstrap operator `root`; people and services go through a gateway, which
//! checks their roles. Raft traffic and ownership calls are for nodes alone.
//!
//! On a plaintext (`--insecure`) server nobody is authenticated and these checks let
//! everything through: that is what `--insecure` means, and every process says so in
//! its log at start.

use crate::serve::Peer;
use crate::status::status;
use crate::tls::Identity;
use holdfast_core::ErrorCode;
use tonic::{Request, Status};

/// Who may pass a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// Nodes only: Raft replication and votes, ownership renewals, seal reports.
    Nodes,
    /// Nodes and the root user: everything else a node's ports serve.
    NodesAndRoot,
}

/// Checks the caller of `req` against `boundary`; the refusal says who was refused.
pub fn check<T>(req: &Request<T>, boundary: Boundary) -> Result<(), Status> {
    let Some(peer) = req.extensions().get::<Peer>() else {
        // Not from a network listener (an in-process call): nothing to check.
        return Ok(());
    };
    if !peer.tls {
        return Ok(());
    }
    let allowed = match (&peer.identity, boundary) {
        (Some(Identity::Node(_)), _) => true,
        (Some(id), Boundary::NodesAndRoot) => id.is_node_or_root(),
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    let who = peer.identity.as_ref().map_or_else(|| format!("an unidentified caller at {}", peer.addr), |i| i.to_string());
    let whom = match boundary {
        Boundary::Nodes => "holdfast nodes",
        Boundary::NodesAndRoot => "holdfast nodes and user:root; other callers go through a gateway",
    };
    Err(status(ErrorCode::PermissionDenied, format!("{who} may not call this port: it serves {whom}")))
}

/// A tonic interceptor for a service only nodes may call.
pub fn nodes_only(req: Request<()>) -> Result<Request<()>, Status> {
    check(&req, Boundary::Nodes).map(|_| req)
}

/// A tonic interceptor for a service nodes and the root user may call.
pub fn nodes_and_root(req: Request<()>) -> Result<Request<()>, Status> {
    check(&req, Boundary::NodesAndRoot).map(|_| req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(identity: Option<Identity>, tls: bool) -> Request<()> {
        let mut r = Request::new(());
        r.extensions_mut().insert(Peer { addr: "10.0.0.9:1".parse().unwrap(), identity, tls });
        r
    }

    #[test]
    fn the_boundary_lets_nodes_and_root_through_and_nobody_else() {
        let node = Some(Identity::Node("cell-1-n1".into()));
        let root = Some(Identity::User("root".into()));
        let alice = Some(Identity::User("alice".into()));
        assert!(nodes_only(req(node.clone(), true)).is_ok());
        assert!(nodes_and_root(req(node, true)).is_ok());
        assert!(nodes_and_root(req(root.clone(), true)).is_ok());
        let e = nodes_only(req(root, true)).unwrap_err();
        assert_eq!(crate::status::code_of(&e), Some(ErrorCode::PermissionDenied));
        assert!(e.message().contains("user:root"), "{}", e.message());
        assert!(nodes_and_root(req(alice, true)).is_err());
        assert!(nodes_and_root(req(None, true)).is_err(), "TLS without a client certificate");
        assert!(nodes_only(req(None, false)).is_ok(), "a plaintext server authenticates nobody");
    }
}
