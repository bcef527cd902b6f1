//! The server side of `holdfast.raft.v1.RaftService`: decodes peer RPCs and hands them to
//! the local Raft node.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::{Stream, StreamExt};
use holdfast_proto::raft::v1 as pb;
use holdfast_proto::raft::v1::raft_service_server::{RaftService, RaftServiceServer};
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, warn};

use crate::convert;
use crate::lock;
use crate::network::SNAPSHOT_CHUNK_BYTES;
use holdfast_core::ErrorCode;
use holdfast_rpc::status::status;

/// The largest snapshot a node takes (1 GiB): far above any cell's or registry's state
/// within their quotas, and a bound on what a peer can make it buffer.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;
use crate::identity::DiskCheck;
use crate::sm_store::ReplicatedState;
use crate::types::{Raft, Snapshot};

/// Serves the Raft RPCs of one node.
pub struct RaftGrpcService<S: ReplicatedState> {
    raft: Raft<S>,
    /// Refuses requests that name another disk than this node's (`identity.rs`).
    disk: DiskCheck,
    /// Until then, this restarted node grants no vote (see `node.rs`,
    /// `quiet_period_after_restart`).
    quiet_until: Option<tokio::time::Instant>,
}

impl<S: ReplicatedState> fmt::Debug for RaftGrpcService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftGrpcService").field("node", self.raft.node_id()).finish()
    }
}

impl<S: ReplicatedState> RaftGrpcService<S> {
    /// `quiet_until`: the end of this node's quiet period after a restart, if any.
    pub(crate) fn new(raft: Raft<S>, disk: DiskCheck, quiet_until: Option<tokio::time::Instant>) -> Self {
        RaftGrpcService { raft, disk, quiet_until }
    }

    /// Refuses a vote or pre-vote during the quiet period after a restart, unless the
    /// leader itself is handing over.
    fn quiet(&self, req: &crate::types::VoteRequest) -> Result<(), Status> {
        match self.quiet_until {
            Some(until) if !req.leadership_transfer && tokio::time::Instant::now() < until => Err(Status::unavailable(format!(
                "quiet period after restart: this node votes again in {} ms",
                until.saturating_duration_since(tokio::time::Instant::now()).as_millis()
            ))),
            _ => Ok(()),
        }
    }

    /// The tonic service, ready to be added to a `tonic::transport::Server`.
    pub fn into_server(self, max_message_bytes: usize) -> RaftServiceServer<Self> {
        RaftServiceServer::new(self).max_decoding_message_size(max_message_bytes).max_encoding_message_size(max_message_bytes)
    }
}

fn bad_request(e: convert::DecodeError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// A fatal error of the local node (shut down or stopped on a storage error): the peer
/// should treat us as unreachable.
fn stopped(e: impl fmt::Display) -> Status {
    Status::unavailable(format!("raft node stopped: {e}"))
}

/// The answers of one `StreamAppend` stream.
type AnswerStream = Pin<Box<dyn Stream<Item = Result<pb::StreamAppendResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl<S: ReplicatedState> RaftService for RaftGrpcService<S> {
    type StreamAppendStream = AnswerStream;

    /// The leader's replication stream, handed to openraft's pipelined `stream_append`.
    /// A request that does not decode ends the stream with `INVALID_ARGUMENT` after the
    /// answers to those before it; the leader going away (a reset) just ends it.
    async fn stream_append(&self, request: Request<Streaming<pb::AppendEntriesRequest>>) -> Result<Response<AnswerStream>, Status> {
        self.disk.check(request.metadata())?;
        let inbound = request.into_inner();
        let refused: Arc<Mutex<Option<Status>>> = Arc::default();
        // When each request carrying entries arrived (`None` for one without): answers
        // come in request order, so the front is the one being answered.
        let arrivals: Arc<Mutex<VecDeque<Option<Instant>>>> = Arc::default();
        let (refused_in, arrivals_in) = (refused.clone(), arrivals.clone());
        let input = inbound.scan((), move |_, msg| {
            let next = match msg {
                Ok(m) => match convert::append_request_from_pb(m) {
                    Ok(req) => {
                        lock(&arrivals_in).push_back((!req.entries.is_empty()).then(Instant::now));
                        Some(req)
                    }
                    Err(e) => {
                        warn!(error = %e, "malformed AppendEntries on a replication stream: the stream ends");
                        *lock(&refused_in) = Some(bad_request(e));
                        None
                    }
                },
                Err(status) => {
                    debug!(%status, "replication stream closed by the leader");
                    None
                }
            };
            std::future::ready(next)
        });
        let answers = self.raft.stream_append(input).map(move |res| {
            let arrived = lock(&arrivals).pop_front().flatten();
            match res {
                Ok(r) => {
                    if let (Some(arrived), Ok(_)) = (arrived, &r) {
                        metrics::histogram!(holdfast_core::metric_names::RAFT_FOLLOWER_APPEND).record(arrived.elapsed().as_secs_f64());
                    }
                    Ok(convert::stream_result_to_pb(&r))
                }
                Err(fatal) => Err(stopped(fatal)),
            }
        });
        let last = futures_util::stream::once(async move { lock(&refused).take().map(Err) }).filter_map(std::future::ready);
        Ok(Response::new(Box::pin(answers.chain(last))))
    }

    async fn append_entries(&self, request: Request<pb::AppendEntriesRequest>) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        let arrived = std::time::Instant::now();
        self.disk.check(request.metadata())?;
        let req = convert::append_request_from_pb(request.into_inner()).map_err(bad_request)?;
        let carries = !req.entries.is_empty();
        let resp = self.raft.append_entries(req).await.map_err(stopped)?;
        if carries {
            metrics::histogram!(holdfast_core::metric_names::RAFT_FOLLOWER_APPEND).record(arrived.elapsed().as_secs_f64());
        }
        Ok(Response::new(convert::append_response_to_pb(&resp)))
    }

    async fn vote(&self, request: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        self.disk.check(request.metadata())?;
        let req = convert::vote_request_from_pb(request.into_inner()).map_err(bad_request)?;
        self.quiet(&req)?;
        let resp = self.raft.vote(req).await.map_err(stopped)?;
        Ok(Response::new(convert::vote_response_to_pb(&resp)))
    }

    async fn pre_vote(&self, request: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        self.disk.check(request.metadata())?;
        let req = convert::vote_request_from_pb(request.into_inner()).map_err(bad_request)?;
        self.quiet(&req)?;
        let resp = self.raft.pre_vote(req).await.map_err(stopped)?;
        Ok(Response::new(convert::vote_response_to_pb(&resp)))
    }

    async fn transfer_leader(&self, request: Request<pb::TransferLeaderRequest>) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.disk.check(request.metadata())?;
        let req = convert::transfer_request_from_pb(request.into_inner()).map_err(bad_request)?;
        let resp = self.raft.handle_transfer_leader(req).await.map_err(stopped)?;
        Ok(Response::new(convert::transfer_response_to_pb(&resp)))
    }

    async fn install_snapshot(&self, request: Request<Streaming<pb::InstallSnapshotRequest>>) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        use pb::install_snapshot_request::Part;
        self.disk.check(request.metadata())?;
        let mut stream = request.into_inner();
        let header = match stream.next().await {
            Some(Ok(pb::InstallSnapshotRequest { part: Some(Part::Header(h)) })) => h,
            Some(Err(e)) => return Err(e),
            _ => return Err(Status::invalid_argument("InstallSnapshot must start with a header")),
        };
        let vote = convert::vote_from_pb(header.vote).map_err(bad_request)?;
        let meta = convert::snapshot_meta_from_pb(header.meta.ok_or_else(|| Status::invalid_argument("snapshot header without meta"))?).map_err(bad_request)?;
        // The header's size is a claim: refused above the cap, and never allocated up
        // front; the buffer grows with the chunks that actually arrive.
        if header.total_bytes > MAX_SNAPSHOT_BYTES {
            warn!(claimed = header.total_bytes, "InstallSnapshot larger than this node accepts: refused");
            return Err(status(
                ErrorCode::InvalidArgument,
                format!("snapshot of {} bytes refused: this node accepts at most {MAX_SNAPSHOT_BYTES}", header.total_bytes),
            ));
        }
        let total = header.total_bytes as usize;
        let mut data = Vec::with_capacity(total.min(SNAPSHOT_CHUNK_BYTES));
        while let Some(msg) = stream.next().await {
            match msg?.part {
                Some(Part::Chunk(c)) => data.extend_from_slice(&c),
                _ => return Err(Status::invalid_argument("InstallSnapshot: a second header or an empty part")),
            }
            if data.len() > total {
                return Err(Status::invalid_argument("snapshot longer than announced"));
            }
        }
        if data.len() != total {
            // The sender went away half-way: installing a torn snapshot would corrupt state.
            warn!(got = data.len(), want = total, "truncated snapshot transfer refused");
            return Err(Status::data_loss(format!("snapshot truncated: {} of {total} bytes", data.len())));
        }
        debug!(last_log_id = ?meta.last_log_id, bytes = total, "snapshot received");
        let resp = self.raft.install_full_snapshot(vote, Snapshot { meta, snapshot: data }).await.map_err(stopped)?;
        Ok(Response::new(pb::InstallSnapshotResponse { vote: Some(convert::vote_to_pb(&resp.vote)) }))
    }

    async fn identify(&self, _request: Request<pb::IdentifyRequest>) -> Result<Response<pb::IdentifyResponse>, Status> {
        let m = crate::node::current_metrics(&self.raft);
        let has_state = m.current_term > 0 || m.last_log_index.is_some() || m.snapshot.is_some();
        let (node_id, disk) = self.disk.identity();
        Ok(Response::new(pb::IdentifyResponse { node_id, disk, has_state }))
    }
}
