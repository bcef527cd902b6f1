//! The Raft network over tonic gRPC (`RaftNetworkFactory` / `RaftNetworkV2`).
//!
//! One HTTP/2 channel per peer address, from the node's [`Transport`] pool and shared by
//! every client that openraft builds for that peer (replication, heartbeats, snapshots
//! multiplex on it), so reconnects after a peer restart are the channel's business.
//! Every RPC is bounded by openraft's soft TTL; a snapshot transfer by its hard TTL and
//! the cancel signal.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use holdfast_proto::raft::v1 as pb;
use holdfast_proto::raft::v1::raft_service_client::RaftServiceClient;
use holdfast_rpc::{AddressError, Channel, Transport};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, ReplicationClosed, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::{OptionalSend, RPCTypes};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::convert;
use crate::lock;
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, Node, NodeId, RpcError, Snapshot, SnapshotData, SnapshotResponse, StreamAppendResult, StreamingError,
    TransferLeaderRequest, TransferLeaderResponse, TypeConfig, Vote, VoteRequest, VoteResponse,
};

/// Size of one chunk of an InstallSnapshot stream.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// What the Raft port needs beyond the node's transport.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    /// Largest gRPC message on the Raft port, both ways (a big AppendEntries batch, a
    /// snapshot chunk). Default 64 MiB.
    pub max_message_bytes: usize,
}

impl Default for NetworkOptions {
    fn default() -> Self {
        NetworkOptions { max_message_bytes: 64 << 20 }
    }
}

/// Builds gRPC clients to the peers of node `local`.
#[derive(Clone)]
pub struct GrpcNetworkFactory {
    local: NodeId,
    options: NetworkOptions,
    transport: Transport,
}

impl fmt::Debug for GrpcNetworkFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcNetworkFactory").field("local", &self.local).finish_non_exhaustive()
    }
}

impl GrpcNetworkFactory {
    pub fn new(local: NodeId, options: NetworkOptions, transport: Transport) -> Self {
        GrpcNetworkFactory { local, options, transport }
    }

    /// The node whose outgoing RPCs this factory carries.
    pub fn local(&self) -> NodeId {
        self.local
    }

    /// A client to `node`, reusing the channel to its address.
    pub fn connect(&self, target: NodeId, node: &Node) -> GrpcConnection {
        let channel = self.channel(&node.raft_addr);
        if let Err(e) = &channel {
            warn!(target, addr = %node.raft_addr, error = %e, "bad peer address; the peer stays unreachable");
        }
        GrpcConnection {
            local: self.local,
            target,
            client: channel.ok().map(|c| {
                RaftServiceClient::new(c).max_decoding_message_size(self.options.max_message_bytes).max_encoding_message_size(self.options.max_message_bytes)
            }),
            unary: false,
            disk: node.disk,
        }
    }

    fn channel(&self, addr: &str) -> Result<Channel, AddressError> {
        self.transport.channel(addr)
    }
}

impl RaftNetworkFactory<TypeConfig> for GrpcNetworkFactory {
    type Network = GrpcConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        self.connect(target, node)
    }
}

/// The client side of the Raft RPCs to one peer.
pub struct GrpcConnection {
    local: NodeId,
    target: NodeId,
    /// `None` when the peer's address could not be parsed: every RPC is `Unreachable`.
    client: Option<RaftServiceClient<Channel>>,
    /// Set once the peer answered `StreamAppend` with `UNIMPLEMENTED` (a node of an
    /// older version, during a rolling upgrade): replication to it goes one unary
    /// AppendEntries at a time from then on.
    unary: bool,
    /// The disk the membership records for the peer, named in every request
    /// (`identity.rs`); 0: not known, nothing named.
    disk: u64,
}

impl fmt::Debug for GrpcConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcConnection").field("local", &self.local).field("target", &self.target).finish()
    }
}

/// A transport failure, classified for openraft.
enum Failure {
    /// The peer cannot be reached: openraft backs off before trying again.
    Unreachable(String),
    /// The RPC failed otherwise (bad reply, remote error): retried at once.
    Network(String),
    Timeout(Duration),
}

fn classify(status: tonic::Status) -> Failure {
    match status.code() {
        // Connection refused / reset, or the peer is shutting down.
        tonic::Code::Unavailable | tonic::Code::Cancelled => Failure::Unreachable(status.to_string()),
        // The peer runs on another disk than the membership records: as good as down
        // until it is replaced, so openraft backs off instead of retrying at once.
        _ if crate::identity::is_disk_refusal(&status) => Failure::Unreachable(status.to_string()),
        _ => Failure::Network(status.to_string()),
    }
}

impl GrpcConnection {
    /// `msg` as a request naming the disk the membership records for the peer.
    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        if self.disk != 0 {
            let value = crate::identity::disk_header(self.disk).parse().expect("hex is valid metadata");
            req.metadata_mut().insert(crate::identity::DISK_HEADER, value);
        }
        req
    }

    /// Asks the peer who it is (`RaftService.Identify`), within `ttl`.
    pub async fn identify(&self, ttl: Duration) -> Result<pb::IdentifyResponse, String> {
        let mut client = self.client().map_err(|_| format!("no valid address for node {}", self.target))?;
        match self.call(ttl, client.identify(pb::IdentifyRequest {})).await {
            Ok(r) => Ok(r),
            Err(Failure::Unreachable(m) | Failure::Network(m)) => Err(m),
            Err(Failure::Timeout(t)) => Err(format!("no answer within {} ms", t.as_millis())),
        }
    }

    fn client(&self) -> Result<RaftServiceClient<Channel>, Failure> {
        self.client.clone().ok_or_else(|| Failure::Unreachable(format!("no valid address for node {}", self.target)))
    }

    async fn call<T, F>(&self, ttl: Duration, fut: F) -> Result<T, Failure>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(ttl, fut).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(classify(status)),
            Err(_) => Err(Failure::Timeout(ttl)),
        }
    }

    fn rpc_error(&self, action: RPCTypes, f: Failure) -> RpcError {
        Peer { local: self.local, target: self.target }.rpc_error(action, f)
    }

    async fn send_vote(&mut self, pre: bool, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        let req = convert::vote_request_to_pb(&rpc);
        let res = async {
            let mut client = self.client()?;
            let req = self.request(req);
            let resp = if pre { self.call(option.soft_ttl(), client.pre_vote(req)).await? } else { self.call(option.soft_ttl(), client.vote(req)).await? };
            convert::vote_response_from_pb(resp).map_err(|e| Failure::Network(e.to_string()))
        }
        .await;
        res.map_err(|f| self.rpc_error(RPCTypes::Vote, f))
    }
}

impl RaftNetworkV2<TypeConfig> for GrpcConnection {
    type SnapshotData = SnapshotData;

    async fn append_entries(&mut self, rpc: AppendEntriesRequest, option: RPCOption) -> Result<AppendEntriesResponse, RpcError> {
        // Timed when it carries entries (a heartbeat or a commit notice is not a write's).
        let sent = (!rpc.entries.is_empty()).then(std::time::Instant::now);
        let req = convert::append_request_to_pb(&rpc);
        let res = async {
            let mut client = self.client()?;
            let resp = self.call(option.soft_ttl(), client.append_entries(self.request(req))).await?;
            if let Some(sent) = sent {
                metrics::histogram!(holdfast_core::metric_names::RAFT_REPLICATE).record(sent.elapsed().as_secs_f64());
            }
            convert::append_response_from_pb(resp).map_err(|e| Failure::Network(e.to_string()))
        }
        .await;
        res.map_err(|f| self.rpc_error(RPCTypes::AppendEntries, f))
    }

    /// Replication as one `StreamAppend` stream: openraft hands over the next request as
    /// soon as it has one, without waiting for the answer to the last, so a commit
    /// notice and the next entries are in flight together.
    ///
    /// Bounded by `soft_ttl`: to open the stream, and from each request sent to its
    /// answer; an idle stream (nothing unanswered) waits as long as it must. A stream that
    /// stalls ends with a timeout, and openraft opens a new one.
    fn stream_append<'s, S>(&'s mut self, input: S, option: RPCOption) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult, RpcError>>, RpcError>>
    where
        S: Stream<Item = AppendEntriesRequest> + OptionalSend + Unpin + 'static,
    {
        if self.unary {
            return openraft::network::stream_append_sequential(self, input, option);
        }
        Box::pin(async move {
            let ttl = option.soft_ttl();
            // Nothing is dialled before openraft yields the first request: it backs off
            // from an unreachable peer inside the request stream, so dialling first would
            // retry a refused connection in a tight loop.
            let mut input = input;
            let Some(first) = input.next().await else {
                return Ok(futures_util::stream::empty().boxed());
            };
            let input = futures_util::stream::once(std::future::ready(first)).chain(input);
            let mut client = self.client().map_err(|f| self.rpc_error(RPCTypes::AppendEntries, f))?;
            // When each request went out, and whether it carried entries: answers come back
            // in request order, so the front is the one being answered.
            let sent: Arc<Mutex<VecDeque<(Instant, bool)>>> = Arc::default();
            let noted = sent.clone();
            let outbound = input.map(move |req| {
                lock(&noted).push_back((Instant::now(), !req.entries.is_empty()));
                convert::append_request_to_pb(&req)
            });
            let inbound = match tokio::time::timeout(ttl, client.stream_append(self.request(outbound))).await {
                Ok(Ok(inbound)) => inbound.into_inner(),
                Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                    warn!(target = self.target, "the peer does not take a replication stream (an older version?): replicating to it one request at a time");
                    self.unary = true;
                    return Err(self.rpc_error(RPCTypes::AppendEntries, Failure::Network(status.to_string())));
                }
                Ok(Err(status)) => return Err(self.rpc_error(RPCTypes::AppendEntries, classify(status))),
                Err(_) => return Err(self.rpc_error(RPCTypes::AppendEntries, Failure::Timeout(ttl))),
            };
            let peer = Peer { local: self.local, target: self.target };
            let answers = futures_util::stream::unfold(Some(inbound), move |state| {
                let sent = sent.clone();
                async move {
                    let mut inbound = state?;
                    let answer = next_answer(&mut inbound, &sent, ttl).await;
                    let item = match answer {
                        Ok(None) => return None,
                        Ok(Some(pb)) => convert::stream_result_from_pb(pb).map_err(|e| Failure::Network(e.to_string())),
                        Err(f) => Err(f),
                    };
                    match item {
                        Ok(r) => Some((Ok(r), Some(inbound))),
                        Err(f) => Some((Err(peer.rpc_error(RPCTypes::AppendEntries, f)), None)),
                    }
                }
            });
            Ok(answers.boxed())
        })
    }

    async fn vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        self.send_vote(false, rpc, option).await
    }

    async fn pre_vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        self.send_vote(true, rpc, option).await
    }

    async fn transfer_leader(&mut self, rpc: TransferLeaderRequest, option: RPCOption) -> Result<TransferLeaderResponse, RpcError> {
        let req = convert::transfer_request_to_pb(&rpc);
        let res = async {
            let mut client = self.client()?;
            let resp = self.call(option.soft_ttl(), client.transfer_leader(self.request(req))).await?;
            convert::transfer_response_from_pb(resp).map_err(|e| Failure::Network(e.to_string()))
        }
        .await;
        res.map_err(|f| self.rpc_error(RPCTypes::TransferLeader, f))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError> {
        let total = snapshot.snapshot.len();
        let mut parts = Vec::with_capacity(1 + total / SNAPSHOT_CHUNK_BYTES + 1);
        parts.push(pb::InstallSnapshotRequest {
            part: Some(pb::install_snapshot_request::Part::Header(pb::SnapshotHeader {
                vote: Some(convert::vote_to_pb(&vote)),
                meta: Some(convert::snapshot_meta_to_pb(&snapshot.meta)),
                total_bytes: total as u64,
            })),
        });
        for chunk in snapshot.snapshot.chunks(SNAPSHOT_CHUNK_BYTES) {
            parts.push(pb::InstallSnapshotRequest { part: Some(pb::install_snapshot_request::Part::Chunk(chunk.to_vec())) });
        }
        debug!(target = self.target, bytes = total, chunks = parts.len() - 1, "sending snapshot");
        let mut client = match self.client() {
            Ok(c) => c,
            Err(f) => return Err(self.streaming_error(f)),
        };
        let send = self.call(option.hard_ttl(), client.install_snapshot(self.request(futures_util::stream::iter(parts))));
        let resp = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            resp = send => resp,
        };
        match resp {
            Ok(r) => match convert::vote_from_pb(r.vote) {
                Ok(v) => Ok(SnapshotResponse::new(v)),
                Err(e) => Err(self.streaming_error(Failure::Network(e.to_string()))),
            },
            Err(f) => Err(self.streaming_error(f)),
        }
    }
}

/// The next answer on a replication stream, `Ok(None)` when the follower ended it. Waits
/// at most `ttl` past the oldest request still unanswered; with none unanswered, waits on.
async fn next_answer(
    inbound: &mut tonic::Streaming<pb::StreamAppendResponse>,
    sent: &Mutex<VecDeque<(Instant, bool)>>,
    ttl: Duration,
) -> Result<Option<pb::StreamAppendResponse>, Failure> {
    loop {
        let oldest = lock(sent).front().map(|(at, _)| *at);
        let wake = oldest.unwrap_or_else(Instant::now) + ttl;
        match tokio::time::timeout_at(wake, inbound.next()).await {
            Ok(Some(Ok(answer))) => {
                if let Some((at, true)) = lock(sent).pop_front() {
                    metrics::histogram!(holdfast_core::metric_names::RAFT_REPLICATE).record(at.elapsed().as_secs_f64());
                }
                return Ok(Some(answer));
            }
            Ok(Some(Err(status))) => return Err(classify(status)),
            Ok(None) => return Ok(None),
            // Only an answer overdue is a stall; an idle stream was just waiting.
            Err(_) if oldest.is_some() => return Err(Failure::Timeout(ttl)),
            Err(_) => continue,
        }
    }
}

/// Who an RPC error is between, for the answers of a stream that outlives its `&mut self`.
#[derive(Clone, Copy)]
struct Peer {
    local: NodeId,
    target: NodeId,
}

impl Peer {
    fn rpc_error(self, action: RPCTypes, f: Failure) -> RpcError {
        debug!(target = self.target, ?action, "raft rpc failed");
        match f {
            Failure::Unreachable(m) => RpcError::Unreachable(Unreachable::from_string(m)),
            Failure::Network(m) => RpcError::Network(NetworkError::from_string(m)),
            Failure::Timeout(timeout) => RpcError::Timeout(Timeout { action, id: self.local, target: self.target, timeout }),
        }
    }
}

impl GrpcConnection {
    fn streaming_error(&self, f: Failure) -> StreamingError {
        match f {
            Failure::Unreachable(m) => StreamingError::Unreachable(Unreachable::from_string(m)),
            Failure::Network(m) => StreamingError::Network(NetworkError::from_string(m)),
            Failure::Timeout(timeout) => StreamingError::Timeout(Timeout { action: RPCTypes::InstallSnapshot, id: self.local, target: self.target, timeout }),
        }
    }
}
