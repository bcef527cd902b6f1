//! Test support (feature `test-support`): a fault-injecting layer over the real gRPC
//! network, and a tiny state machine. Nothing here is used by a production build.
//!
//! The fault layer sits in front of each outgoing RPC of every node: every node of an
//! in-process cluster shares one [`Faults`] table, so cutting the link `a <-> b` makes
//! both `a`'s RPCs to `b` and `b`'s RPCs to `a` fail, while every RPC that does pass
//! still travels over real gRPC on loopback.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{ReplicationClosed, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::OptionalSend;
use tracing::info;

use crate::network::{GrpcConnection, GrpcNetworkFactory};
use crate::sm_store::ReplicatedState;
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, Node, NodeId, RpcError, Snapshot, SnapshotData, SnapshotResponse, StreamAppendResult, StreamingError,
    TransferLeaderRequest, TransferLeaderResponse, TypeConfig, Vote, VoteRequest, VoteResponse,
};

/// What happens to RPCs on one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// Every RPC fails at once, as if the peer were unreachable.
    Cut,
    /// Every RPC is held this long before it is sent.
    Delay(Duration),
}

/// The shared table of link faults, keyed by directed link `(from, to)`, and of slow
/// disks, by node.
#[derive(Debug, Default)]
pub struct Faults {
    links: RwLock<HashMap<(NodeId, NodeId), LinkFault>>,
    /// Extra time each WAL sync of a node's Raft log takes (a slow disk).
    slow_disks: RwLock<HashMap<NodeId, Duration>>,
}

impl Faults {
    pub fn new() -> Arc<Self> {
        Arc::new(Faults::default())
    }

    fn set(&self, from: NodeId, to: NodeId, fault: Option<LinkFault>) {
        let mut links = self.links.write().unwrap_or_else(|e| e.into_inner());
        match fault {
            Some(f) => links.insert((from, to), f),
            None => links.remove(&(from, to)),
        };
    }

    /// Cuts the link between `a` and `b`, both directions.
    pub fn set_unreachable(&self, a: NodeId, b: NodeId) {
        info!(a, b, "fault: link cut");
        self.set(a, b, Some(LinkFault::Cut));
        self.set(b, a, Some(LinkFault::Cut));
    }

    /// Cuts `node` off from every node in `others`.
    pub fn isolate(&self, node: NodeId, others: impl IntoIterator<Item = NodeId>) {
        for o in others {
            if o != node {
                self.set_unreachable(node, o);
            }
        }
    }

    /// Delays RPCs from `from` to `to` (one direction).
    pub fn set_delay(&self, from: NodeId, to: NodeId, delay: Duration) {
        info!(from, to, ?delay, "fault: link delayed");
        self.set(from, to, Some(LinkFault::Delay(delay)));
    }

    /// Restores the link between `a` and `b`, both directions.
    pub fn heal(&self, a: NodeId, b: NodeId) {
        self.set(a, b, None);
        self.set(b, a, None);
    }

    /// Removes every fault.
    pub fn heal_all(&self) {
        info!("fault: all links healed");
        self.links.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// From now on every WAL sync of `node`'s Raft log takes `extra` longer (a slow
    /// disk: appends are acknowledged that much later; heartbeats are not slowed, so
    /// the leader keeps leading while its writes stall). Zero heals it.
    pub fn slow_disk(&self, node: NodeId, extra: Duration) {
        info!(node, ?extra, "fault: slow disk");
        let mut disks = self.slow_disks.write().unwrap_or_else(|e| e.into_inner());
        if extra.is_zero() {
            disks.remove(&node);
        } else {
            disks.insert(node, extra);
        }
    }

    fn disk_delay(&self, node: NodeId) -> Duration {
        self.slow_disks.read().unwrap_or_else(|e| e.into_inner()).get(&node).copied().unwrap_or_default()
    }

    pub fn get(&self, from: NodeId, to: NodeId) -> Option<LinkFault> {
        self.links.read().unwrap_or_else(|e| e.into_inner()).get(&(from, to)).copied()
    }
}

/// The gRPC network factory of one node, with the shared fault table in front.
#[derive(Debug, Clone)]
pub struct FaultyNetworkFactory {
    inner: GrpcNetworkFactory,
    faults: Arc<Faults>,
}

impl FaultyNetworkFactory {
    pub fn new(inner: GrpcNetworkFactory, faults: Arc<Faults>) -> Self {
        FaultyNetworkFactory { inner, faults }
    }
}

impl RaftNetworkFactory<TypeConfig> for FaultyNetworkFactory {
    type Network = FaultyConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        FaultyConnection { link: Link { from: self.inner.local(), to: target, faults: self.faults.clone() }, inner: self.inner.connect(target, node) }
    }
}

/// One node's gRPC client to one peer, consulting the fault table around every RPC.
#[derive(Debug)]
pub struct FaultyConnection {
    link: Link,
    inner: GrpcConnection,
}

#[derive(Debug, Clone)]
struct Link {
    from: NodeId,
    to: NodeId,
    faults: Arc<Faults>,
}

#[derive(Debug, thiserror::Error)]
#[error("link {from} -> {to} cut by the test fault router")]
struct LinkCut {
    from: NodeId,
    to: NodeId,
}

impl Link {
    fn check(&self) -> Result<(), LinkCut> {
        match self.faults.get(self.from, self.to) {
            Some(LinkFault::Cut) => Err(LinkCut { from: self.from, to: self.to }),
            _ => Ok(()),
        }
    }

    /// Runs `rpc` through the link: refused when cut, held when delayed, and its reply
    /// lost if the link was cut meanwhile.
    async fn carry<T>(&self, rpc: impl Future<Output = T>) -> Result<T, LinkCut> {
        self.check()?;
        self.hold().await;
        self.check()?;
        let r = rpc.await;
        self.check()?;
        Ok(r)
    }

    /// Holds a message while the link is delayed.
    async fn hold(&self) {
        if let Some(LinkFault::Delay(d)) = self.faults.get(self.from, self.to) {
            tokio::time::sleep(d).await;
        }
    }
}

fn rpc_cut(e: LinkCut) -> RpcError {
    RpcError::Unreachable(Unreachable::new(&e))
}

impl RaftNetworkV2<TypeConfig> for FaultyConnection {
    type SnapshotData = SnapshotData;

    async fn append_entries(&mut self, rpc: AppendEntriesRequest, option: RPCOption) -> Result<AppendEntriesResponse, RpcError> {
        self.link.carry(self.inner.append_entries(rpc, option)).await.map_err(rpc_cut)?
    }

    /// The replication stream through the link: refused when cut, each request held
    /// while delayed, no request sent once cut, and the stream ends `Unreachable` at the
    /// first answer (or its end) after the cut.
    fn stream_append<'s, S>(&'s mut self, input: S, option: RPCOption) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult, RpcError>>, RpcError>>
    where
        S: Stream<Item = AppendEntriesRequest> + OptionalSend + Unpin + 'static,
    {
        let link = self.link.clone();
        Box::pin(async move {
            link.check().map_err(rpc_cut)?;
            let (delay, gate) = (link.clone(), link.clone());
            let input = input
                .then(move |req| {
                    let delay = delay.clone();
                    async move {
                        delay.hold().await;
                        req
                    }
                })
                .take_while(move |_| std::future::ready(gate.check().is_ok()));
            let answers = RaftNetworkV2::stream_append(&mut self.inner, Box::pin(input), option).await?;
            let out = futures_util::stream::unfold(Some(answers), move |state| {
                let link = link.clone();
                async move {
                    let mut answers = state?;
                    let next = answers.next().await;
                    match (link.check(), next) {
                        (Err(cut), _) => Some((Err(rpc_cut(cut)), None)),
                        (Ok(()), Some(answer)) => Some((answer, Some(answers))),
                        (Ok(()), None) => None,
                    }
                }
            });
            Ok(out.boxed())
        })
    }

    async fn vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        self.link.carry(RaftNetworkV2::vote(&mut self.inner, rpc, option)).await.map_err(rpc_cut)?
    }

    async fn pre_vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        self.link.carry(self.inner.pre_vote(rpc, option)).await.map_err(rpc_cut)?
    }

    async fn transfer_leader(&mut self, rpc: TransferLeaderRequest, option: RPCOption) -> Result<TransferLeaderResponse, RpcError> {
        self.link.carry(RaftNetworkV2::transfer_leader(&mut self.inner, rpc, option)).await.map_err(rpc_cut)?
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError> {
        self.link.carry(self.inner.full_snapshot(vote, snapshot, cancel, option)).await.map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?
    }
}

/// A test state machine: an append-only list of `u64`, one per command (8 bytes, big
/// endian). The response to a command is the list's new length, 8 bytes big endian.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AppendLog {
    pub values: Vec<u64>,
}

impl AppendLog {
    pub fn command(value: u64) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }
}

impl ReplicatedState for AppendLog {
    fn apply(&mut self, _log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        // A malformed command is applied as a no-op on every replica alike.
        if let Ok(arr) = <[u8; 8]>::try_from(payload) {
            self.values.push(u64::from_be_bytes(arr));
        }
        Ok((self.values.len() as u64).to_be_bytes().to_vec())
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = vec![1u8]; // format version
        for v in &self.values {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn restore(&mut self, data: &[u8]) -> io::Result<()> {
        let Some((&1, body)) = data.split_first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "unknown AppendLog snapshot version"));
        };
        if body.len() % 8 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "AppendLog snapshot not a multiple of 8"));
        }
        self.values = body.chunks_exact(8).map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes"))).collect();
        Ok(())
    }
}

impl fmt::Display for AppendLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppendLog({} values)", self.values.len())
    }
}

impl<S: crate::sm_store::ReplicatedState> crate::node::RaftNode<S> {
    /// Starts a node whose outgoing Raft RPCs pass through `faults` (tests only).
    pub async fn start_with_faults(
        config: crate::node::NodeConfig,
        listener: impl Into<holdfast_rpc::net::Listener>,
        initial: S,
        faults: Arc<Faults>,
    ) -> Result<Self, crate::error::StartError> {
        let inner = crate::network::GrpcNetworkFactory::new(config.node_id, config.network.clone(), config.transport.clone());
        let (node, disks) = (config.node_id, faults.clone());
        let sync: crate::log_store::Sync = Box::new(move |db| {
            let extra = disks.disk_delay(node);
            if !extra.is_zero() {
                // The flusher's own thread: sleeping here stalls this node's appends only.
                std::thread::sleep(extra);
            }
            crate::log_store::sync_wal(db)
        });
        Self::start_syncing_by(config, listener, initial, FaultyNetworkFactory::new(inner, faults), Some(sync)).await
    }
}
