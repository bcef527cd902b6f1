//! A node of a replicated group, serving: its Raft node (peer port), its client gRPC
//! port, the background duties it runs, and one shutdown with a hard deadline. A cell
//! node and a registry node are each this plus their own state and services.

use crate::error::InitError;
use crate::node::RaftNode;
use crate::sm_store::ReplicatedState;
use crate::types::{Node, NodeId, RaftMetrics};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tracing::warn;

#[derive(Debug)]
pub struct Serving<S: ReplicatedState> {
    node: RaftNode<S>,
    client_addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// Awaited, in order, by [`Serving::shutdown`] after the stop signal.
    tasks: Vec<JoinHandle<()>>,
    deadline: Duration,
}

impl<S: ReplicatedState> Serving<S> {
    /// Serves `router` on `client` until [`Serving::shutdown`]; `what` names the API in
    /// logs. `deadline` bounds the whole shutdown.
    pub fn new(node: RaftNode<S>, client: TcpListener, router: tonic::transport::server::Router, deadline: Duration, what: &'static str) -> Serving<S> {
        let client_addr = client.local_addr().expect("a bound listener has an address");
        let (stop, rx) = watch::channel(false);
        let mut stopped = rx;
        let svc = router.serve_with_incoming_shutdown(TcpIncoming::from(client).with_nodelay(Some(true)), async move {
            let _ = stopped.wait_for(|s| *s).await;
        });
        let server = tokio::spawn(async move {
            if let Err(e) = svc.await {
                warn!(error = %e, "the {what} server ended with an error");
            }
        });
        Serving { node, client_addr, stop, tasks: vec![server], deadline }
    }

    /// Turns `true` when the node is shutting down: every duty watches it.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// A duty the shutdown waits for (it must end once the stop signal turns `true`).
    pub fn keep(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    pub fn raft_node(&self) -> &RaftNode<S> {
        &self.node
    }

    pub fn node_id(&self) -> NodeId {
        self.node.id()
    }

    /// Addresses as peers and clients see them.
    pub fn node(&self) -> &Node {
        self.node.node()
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    pub fn raft_addr(&self) -> SocketAddr {
        self.node.raft_addr()
    }

    pub fn metrics(&self) -> RaftMetrics {
        self.node.metrics()
    }

    /// Forms the group from `members` (call on one node, once).
    pub async fn initialize(&self, members: BTreeMap<NodeId, Node>) -> Result<(), InitError> {
        self.node.initialize(members).await
    }

    /// Stops accepting calls, stops the duties, stops Raft and closes RocksDB, within
    /// the deadline.
    pub async fn shutdown(self) {
        let id = self.node.id();
        let _ = self.stop.send(true);
        let deadline = self.deadline;
        let (node, tasks) = (self.node, self.tasks);
        let work = async move {
            for t in tasks {
                let _ = t.await;
            }
            node.shutdown().await;
        };
        if tokio::time::timeout(deadline, work).await.is_err() {
            warn!(node_id = id, ?deadline, "shutdown passed its deadline; giving up on a clean stop");
        }
    }
}
