//! Conversions between openraft's types and the protobuf messages of
//! `holdfast.raft.v1`. Decoding is strict: a missing required field is an error, never a
//! default that would silently change the meaning of a Raft message.

use std::collections::{BTreeMap, BTreeSet};

use holdfast_proto::raft::v1 as pb;

use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryPayload, LeaderId, LogId, Membership, Node, NodeId, Request, SnapshotMeta, StoredMembership,
    StreamAppendError, StreamAppendResult, TransferLeaderError, TransferLeaderRequest, TransferLeaderResponse, Vote, VoteRequest, VoteResponse,
};

/// A protobuf message that does not describe a valid Raft message.
#[derive(Debug, thiserror::Error)]
#[error("malformed {what}: {why}")]
pub struct DecodeError {
    pub what: &'static str,
    pub why: String,
}

fn missing(what: &'static str, field: &str) -> DecodeError {
    DecodeError { what, why: format!("missing field `{field}`") }
}

pub fn leader_id_to_pb(l: &LeaderId) -> pb::LeaderId {
    pb::LeaderId { term: l.term, node_id: l.node_id }
}

pub fn leader_id_from_pb(l: pb::LeaderId) -> LeaderId {
    LeaderId { term: l.term, node_id: l.node_id }
}

pub fn log_id_to_pb(l: &LogId) -> pb::LogId {
    pb::LogId { leader_id: Some(leader_id_to_pb(&l.leader_id)), index: l.index }
}

pub fn log_id_from_pb(l: pb::LogId) -> Result<LogId, DecodeError> {
    let leader = l.leader_id.ok_or_else(|| missing("LogId", "leader_id"))?;
    Ok(LogId::new(leader_id_from_pb(leader), l.index))
}

pub fn opt_log_id_from_pb(l: Option<pb::LogId>) -> Result<Option<LogId>, DecodeError> {
    l.map(log_id_from_pb).transpose()
}

pub fn vote_to_pb(v: &Vote) -> pb::Vote {
    pb::Vote { leader_id: Some(leader_id_to_pb(&v.leader_id)), committed: v.committed }
}

pub fn vote_from_pb(v: Option<pb::Vote>) -> Result<Vote, DecodeError> {
    let v = v.ok_or_else(|| missing("Vote", "vote"))?;
    let leader = v.leader_id.ok_or_else(|| missing("Vote", "leader_id"))?;
    Ok(Vote { leader_id: leader_id_from_pb(leader), committed: v.committed })
}

pub fn node_to_pb(n: &Node) -> pb::Node {
    pb::Node { raft_addr: n.raft_addr.clone(), client_addr: n.client_addr.clone(), disk: n.disk }
}

pub fn node_from_pb(n: pb::Node) -> Node {
    Node { raft_addr: n.raft_addr, client_addr: n.client_addr, disk: n.disk }
}

pub fn membership_to_pb(m: &Membership) -> pb::Membership {
    pb::Membership {
        configs: m.get_joint_config().iter().map(|c| pb::NodeIdSet { node_ids: c.iter().copied().collect() }).collect(),
        nodes: m.nodes().map(|(id, n)| (*id, node_to_pb(n))).collect(),
    }
}

pub fn membership_from_pb(m: pb::Membership) -> Result<Membership, DecodeError> {
    let configs: Vec<BTreeSet<NodeId>> = m.configs.into_iter().map(|c| c.node_ids.into_iter().collect()).collect();
    let nodes: BTreeMap<NodeId, Node> = m.nodes.into_iter().map(|(id, n)| (id, node_from_pb(n))).collect();
    Membership::new(configs, nodes).map_err(|e| DecodeError { what: "Membership", why: e.to_string() })
}

pub fn entry_to_pb(e: &Entry) -> pb::Entry {
    use pb::entry::Payload;
    let payload = match &e.payload {
        EntryPayload::Blank => Payload::Blank(pb::Blank {}),
        EntryPayload::Normal(r) => Payload::Normal(r.payload.clone()),
        EntryPayload::Membership(m) => Payload::Membership(membership_to_pb(m)),
    };
    pb::Entry { log_id: Some(log_id_to_pb(&e.log_id)), payload: Some(payload) }
}

pub fn entry_from_pb(e: pb::Entry) -> Result<Entry, DecodeError> {
    use pb::entry::Payload;
    let log_id = log_id_from_pb(e.log_id.ok_or_else(|| missing("Entry", "log_id"))?)?;
    let payload = match e.payload.ok_or_else(|| missing("Entry", "payload"))? {
        Payload::Blank(_) => EntryPayload::Blank,
        Payload::Normal(bytes) => EntryPayload::Normal(Request { payload: bytes }),
        Payload::Membership(m) => EntryPayload::Membership(membership_from_pb(m)?),
    };
    Ok(Entry { log_id, payload })
}

pub fn append_request_to_pb(r: &AppendEntriesRequest) -> pb::AppendEntriesRequest {
    pb::AppendEntriesRequest {
        vote: Some(vote_to_pb(&r.vote)),
        prev_log_id: r.prev_log_id.as_ref().map(log_id_to_pb),
        entries: r.entries.iter().map(entry_to_pb).collect(),
        leader_commit: r.leader_commit.as_ref().map(log_id_to_pb),
    }
}

pub fn append_request_from_pb(r: pb::AppendEntriesRequest) -> Result<AppendEntriesRequest, DecodeError> {
    Ok(AppendEntriesRequest {
        vote: vote_from_pb(r.vote)?,
        prev_log_id: opt_log_id_from_pb(r.prev_log_id)?,
        entries: r.entries.into_iter().map(entry_from_pb).collect::<Result<_, _>>()?,
        leader_commit: opt_log_id_from_pb(r.leader_commit)?,
    })
}

pub fn append_response_to_pb(r: &AppendEntriesResponse) -> pb::AppendEntriesResponse {
    use pb::append_entries_response::{Conflict, PartialSuccess, Result as R, Success};
    let result = match r {
        AppendEntriesResponse::Success => R::Success(Success {}),
        AppendEntriesResponse::PartialSuccess(m) => R::PartialSuccess(PartialSuccess { matching: m.as_ref().map(log_id_to_pb) }),
        AppendEntriesResponse::Conflict => R::Conflict(Conflict {}),
        AppendEntriesResponse::HigherVote(v) => R::HigherVote(vote_to_pb(v)),
    };
    pb::AppendEntriesResponse { result: Some(result) }
}

pub fn append_response_from_pb(r: pb::AppendEntriesResponse) -> Result<AppendEntriesResponse, DecodeError> {
    use pb::append_entries_response::Result as R;
    Ok(match r.result.ok_or_else(|| missing("AppendEntriesResponse", "result"))? {
        R::Success(_) => AppendEntriesResponse::Success,
        R::PartialSuccess(p) => AppendEntriesResponse::PartialSuccess(opt_log_id_from_pb(p.matching)?),
        R::Conflict(_) => AppendEntriesResponse::Conflict,
        R::HigherVote(v) => AppendEntriesResponse::HigherVote(vote_from_pb(Some(v))?),
    })
}

pub fn stream_result_to_pb(r: &StreamAppendResult) -> pb::StreamAppendResponse {
    use pb::stream_append_response::{Matched, Result as R};
    let result = match r {
        Ok(matched) => R::Matched(Matched { log_id: matched.as_ref().map(log_id_to_pb) }),
        Err(StreamAppendError::Conflict(at)) => R::Conflict(log_id_to_pb(at)),
        Err(StreamAppendError::HigherVote(v)) => R::HigherVote(vote_to_pb(v)),
    };
    pb::StreamAppendResponse { result: Some(result) }
}

pub fn stream_result_from_pb(r: pb::StreamAppendResponse) -> Result<StreamAppendResult, DecodeError> {
    use pb::stream_append_response::Result as R;
    Ok(match r.result.ok_or_else(|| missing("StreamAppendResponse", "result"))? {
        R::Matched(m) => Ok(opt_log_id_from_pb(m.log_id)?),
        R::Conflict(at) => Err(StreamAppendError::Conflict(log_id_from_pb(at)?)),
        R::HigherVote(v) => Err(StreamAppendError::HigherVote(vote_from_pb(Some(v))?)),
    })
}

pub fn vote_request_to_pb(r: &VoteRequest) -> pb::VoteRequest {
    pb::VoteRequest { vote: Some(vote_to_pb(&r.vote)), last_log_id: r.last_log_id.as_ref().map(log_id_to_pb), leadership_transfer: r.leadership_transfer }
}

pub fn vote_request_from_pb(r: pb::VoteRequest) -> Result<VoteRequest, DecodeError> {
    let mut req = VoteRequest::new(vote_from_pb(r.vote)?, opt_log_id_from_pb(r.last_log_id)?);
    req.leadership_transfer = r.leadership_transfer;
    Ok(req)
}

pub fn vote_response_to_pb(r: &VoteResponse) -> pb::VoteResponse {
    pb::VoteResponse { vote: Some(vote_to_pb(&r.vote)), vote_granted: r.vote_granted, last_log_id: r.last_log_id.as_ref().map(log_id_to_pb) }
}

pub fn vote_response_from_pb(r: pb::VoteResponse) -> Result<VoteResponse, DecodeError> {
    Ok(VoteResponse::new(vote_from_pb(r.vote)?, opt_log_id_from_pb(r.last_log_id)?, r.vote_granted))
}

pub fn transfer_request_to_pb(r: &TransferLeaderRequest) -> pb::TransferLeaderRequest {
    pb::TransferLeaderRequest { from_leader: Some(vote_to_pb(r.from_leader())), to_node_id: *r.to_node_id(), last_log_id: r.last_log_id().map(log_id_to_pb) }
}

pub fn transfer_request_from_pb(r: pb::TransferLeaderRequest) -> Result<TransferLeaderRequest, DecodeError> {
    Ok(TransferLeaderRequest::new(vote_from_pb(r.from_leader)?, r.to_node_id, opt_log_id_from_pb(r.last_log_id)?))
}

pub fn transfer_response_to_pb(r: &TransferLeaderResponse) -> pb::TransferLeaderResponse {
    use pb::transfer_leader_response::Refused;
    let refused = match r {
        Ok(()) => None,
        Err(TransferLeaderError::VoteChanged { expected, actual }) => {
            Some(Refused::VoteChanged(pb::VoteChanged { expected: Some(vote_to_pb(expected)), actual: Some(vote_to_pb(actual)) }))
        }
        Err(TransferLeaderError::LogNotFlushed { expected, actual }) => {
            Some(Refused::LogNotFlushed(pb::LogNotFlushed { expected: expected.as_ref().map(log_id_to_pb), actual: actual.as_ref().map(log_id_to_pb) }))
        }
    };
    pb::TransferLeaderResponse { refused }
}

pub fn transfer_response_from_pb(r: pb::TransferLeaderResponse) -> Result<TransferLeaderResponse, DecodeError> {
    use pb::transfer_leader_response::Refused;
    Ok(match r.refused {
        None => Ok(()),
        Some(Refused::VoteChanged(v)) => Err(TransferLeaderError::VoteChanged { expected: vote_from_pb(v.expected)?, actual: vote_from_pb(v.actual)? }),
        Some(Refused::LogNotFlushed(l)) => {
            Err(TransferLeaderError::LogNotFlushed { expected: opt_log_id_from_pb(l.expected)?, actual: opt_log_id_from_pb(l.actual)? })
        }
    })
}

pub fn snapshot_meta_to_pb(m: &SnapshotMeta) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: m.last_log_id.as_ref().map(log_id_to_pb),
        last_membership_log_id: m.last_membership.log_id().as_ref().map(log_id_to_pb),
        last_membership: Some(membership_to_pb(m.last_membership.membership())),
    }
}

pub fn snapshot_meta_from_pb(m: pb::SnapshotMeta) -> Result<SnapshotMeta, DecodeError> {
    let membership = membership_from_pb(m.last_membership.ok_or_else(|| missing("SnapshotMeta", "last_membership"))?)?;
    Ok(SnapshotMeta {
        last_log_id: opt_log_id_from_pb(m.last_log_id)?,
        last_membership: StoredMembership::new(opt_log_id_from_pb(m.last_membership_log_id)?, membership),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lid(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: node }, index)
    }

    #[test]
    fn append_entries_round_trip_keeps_every_field() {
        let nodes: BTreeMap<NodeId, Node> = [(1, Node::new("a:1", "a:2")), (2, Node::new("b:1", "b:2")), (3, Node::new("c:1", "c:2"))].into();
        let m = Membership::new(vec![[1, 2].into(), [1, 2, 3].into()], nodes).unwrap();
        let req = AppendEntriesRequest {
            vote: Vote { leader_id: LeaderId { term: 4, node_id: 2 }, committed: true },
            prev_log_id: Some(lid(3, 1, 9)),
            entries: vec![
                Entry { log_id: lid(4, 2, 10), payload: EntryPayload::Blank },
                Entry { log_id: lid(4, 2, 11), payload: EntryPayload::Normal(Request::new(vec![0, 1, 2])) },
                Entry { log_id: lid(4, 2, 12), payload: EntryPayload::Membership(m) },
            ],
            leader_commit: Some(lid(3, 1, 8)),
        };
        let back = append_request_from_pb(append_request_to_pb(&req)).unwrap();
        assert_eq!(format!("{req:?}"), format!("{back:?}"));
    }

    #[test]
    fn responses_round_trip() {
        for r in [
            AppendEntriesResponse::Success,
            AppendEntriesResponse::PartialSuccess(None),
            AppendEntriesResponse::PartialSuccess(Some(lid(1, 1, 3))),
            AppendEntriesResponse::Conflict,
            AppendEntriesResponse::HigherVote(Vote { leader_id: LeaderId { term: 9, node_id: 3 }, committed: false }),
        ] {
            assert_eq!(append_response_from_pb(append_response_to_pb(&r)).unwrap(), r);
        }
        for r in [
            Ok(None),
            Ok(Some(lid(2, 1, 7))),
            Err(StreamAppendError::Conflict(lid(2, 3, 5))),
            Err(StreamAppendError::HigherVote(Vote { leader_id: LeaderId { term: 9, node_id: 3 }, committed: true })),
        ] {
            assert_eq!(stream_result_from_pb(stream_result_to_pb(&r)).unwrap(), r);
        }
        assert!(stream_result_from_pb(pb::StreamAppendResponse { result: None }).is_err());
        let v = VoteResponse::new(Vote { leader_id: LeaderId { term: 2, node_id: 1 }, committed: false }, None, true);
        assert_eq!(vote_response_from_pb(vote_response_to_pb(&v)).unwrap(), v);
    }

    #[test]
    fn a_log_id_without_leader_is_refused() {
        assert!(log_id_from_pb(pb::LogId { leader_id: None, index: 3 }).is_err());
        assert!(entry_from_pb(pb::Entry { log_id: Some(log_id_to_pb(&lid(1, 1, 1))), payload: None }).is_err());
    }
}
