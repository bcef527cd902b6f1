//! A node of a replicated group, serving: its Raft node (peer port), its client gRPC
//! port, its HTTP port (`/metrics`, `/healthz`, `/readyz`) if it has one, the
//! background duties it runs, and one shutdown with a hard deadline. A cell node and a
//! registry node are each this plus their own state and services.

use crate::error::InitError;
use crate::node::RaftNode;
use crate::sm_store::ReplicatedState;
use crate::types::{Fatal, Node, NodeId, Raft, RaftMetrics};
use holdfast_rpc::net::Listener;
use holdfast_rpc::{CancellationToken, GrpcRouter, Tasks, Transport};
use openraft::async_runtime::WatchReceiver;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{error, warn};

/// The listener of an optional port (`metrics_addr`), bound before the node starts so a
/// port in use fails the start.
pub async fn bind_optional(addr: Option<&str>) -> std::io::Result<Option<TcpListener>> {
    match addr {
        Some(addr) => Ok(Some(TcpListener::bind(addr).await?)),
        None => Ok(None),
    }
}

/// Fires once the node's Raft stopped on its own — a storage read or write failed, or
/// openraft panicked. Such a node must not serve on: openraft may still report it as
/// the leader, but nothing it confirms is durable. [`Serving`] then stops every duty
/// and the client API at once, readiness turns false, and the process that ran it
/// exits non-zero (`holdfast cell run`, `holdfast registry run`); a supervisor
/// restarts it on its data, or an operator replaces the disk.
#[derive(Debug, Clone, Default)]
pub struct Failure {
    fired: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Failure {
    pub fn is_failed(&self) -> bool {
        self.fired.is_cancelled()
    }

    /// Waits until the node failed; returns why.
    pub async fn wait(&self) -> String {
        self.fired.cancelled().await;
        self.reason.get().cloned().unwrap_or_default()
    }

    fn fail(&self, reason: String) {
        let _ = self.reason.set(reason);
        self.fired.cancel();
    }
}

/// Watches `raft` until it stops on a fatal error other than a requested shutdown,
/// then records it in `failure` and fires `stop` (every duty and the client API).
async fn watch_fatal<S: ReplicatedState>(raft: Raft<S>, failure: Failure, stop: CancellationToken) {
    let mut metrics = raft.metrics();
    // After the sender is gone (Raft ended), the last value is read once more.
    let mut last = false;
    loop {
        let running = metrics.borrow_watched().running_state.clone();
        match running {
            Err(Fatal::Stopped) => return,
            Err(fatal) => {
                error!(error = %fatal, "raft stopped on a fatal error: this node stops serving and its process exits non-zero");
                failure.fail(fatal.to_string());
                stop.cancel();
                return;
            }
            Ok(()) if last => return,
            Ok(()) => {}
        }
        last = metrics.changed().await.is_err();
    }
}

#[derive(Debug)]
pub struct Serving<S: ReplicatedState> {
    node: RaftNode<S>,
    client_addr: SocketAddr,
    /// The client API server and every duty: all stop with [`Serving::shutdown`].
    tasks: Tasks,
    deadline: Duration,
    failure: Failure,
}

impl<S: ReplicatedState> Serving<S> {
    /// Serves `router` on `client` until [`Serving::shutdown`]; `what` names the API in
    /// logs. `deadline` bounds the whole shutdown.
    /// `tasks` are the node's (created before the services, which spawn per-call work
    /// into them).
    pub fn new(node: RaftNode<S>, client: impl Into<Listener>, router: GrpcRouter, tasks: Tasks, deadline: Duration, what: &'static str) -> Serving<S> {
        let client: Listener = client.into();
        let client_addr = client.local_addr().expect("a bound listener has an address");
        let transport = node.transport().clone();
        let stop = tasks.stop_token();
        tasks.spawn_graceful(what, async move {
            if let Err(e) = transport.serve_grpc(router, client, stop.cancelled_owned()).await {
                warn!(error = %e, "the {what} server ended with an error");
            }
        });
        let failure = Failure::default();
        tasks.spawn("fatal-error watch", watch_fatal(node.raft().clone(), failure.clone(), tasks.stop_token()));
        Serving { node, client_addr, tasks, deadline, failure }
    }

    /// Fires if Raft stops on a fatal error (see [`Failure`]).
    pub fn failure(&self) -> Failure {
        self.failure.clone()
    }

    /// Fires when the node starts shutting down: every duty watches it.
    pub fn stop_signal(&self) -> CancellationToken {
        self.tasks.stop_token()
    }

    /// The node's tasks: a duty spawned here is stopped (and waited for) by the
    /// shutdown.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Runs `duty` as task `name` until the node shuts down.
    pub fn spawn(&self, name: &'static str, duty: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(name, duty);
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` (and whatever `router` adds) on
    /// `listener` until the node shuts down.
    pub fn serve_http(&self, name: &'static str, router: axum::Router, listener: TcpListener) {
        let transport = self.transport().clone();
        let stop = self.tasks.stop_token();
        self.tasks.spawn_graceful(name, async move {
            if let Err(e) = transport.serve_http(router, listener, stop.cancelled_owned()).await {
                warn!(error = %e, "the {name} endpoint stopped");
            }
        });
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `listener`: ready while this node
    /// knows a leader of its group (calls to it get an answer), never after its Raft
    /// stopped on a fatal error.
    pub fn serve_metrics(&self, listener: TcpListener) {
        let (raft, failure) = (self.node.raft().clone(), self.failure());
        let ready: holdfast_telemetry::Readiness = Arc::new(move || !failure.is_failed() && crate::node::current_metrics(&raft).current_leader.is_some());
        self.spawn("metrics upkeep", holdfast_telemetry::upkeep());
        self.serve_http("metrics endpoint", holdfast_telemetry::router(ready), listener);
    }

    pub fn transport(&self) -> &Transport {
        self.node.transport()
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

    /// Hands leadership over if this node leads, then stops accepting calls, stops the
    /// duties, stops Raft and closes RocksDB, all within the deadline.
    pub async fn shutdown(self) {
        let id = self.node.id();
        let started = tokio::time::Instant::now();
        // A leader hands over first, while its client API still answers (NOT_LEADER,
        // with the new leader's address): the group does not wait out a lease.
        if !self.failure.is_failed() {
            self.node.hand_over_leadership(self.deadline / 2).await;
        }
        let left = self.tasks.shutdown(self.deadline.saturating_sub(started.elapsed())).await;
        if !left.is_empty() {
            warn!(node_id = id, tasks = ?left, "tasks outlived the shutdown deadline and were aborted");
        }
        let rest = self.deadline.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
        if tokio::time::timeout(rest, self.node.shutdown()).await.is_err() {
            warn!(node_id = id, deadline = ?self.deadline, "shutdown passed its deadline; giving up on a clean stop");
        }
    }
}
