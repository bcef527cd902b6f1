//! Recovery of a group that lost its majority for good: read what a stopped survivor's
//! data directory holds ([`read_stopped`]), let the application change it (the
//! registry raises every epoch), and write it as the whole state of a **new group of
//! one member** on a new data directory ([`write_new_member`]). Started on that
//! directory, the node elects itself; members are added back with the ordinary member
//! commands (learner first, each on a pristine disk).
//!
//! What the copy holds: the survivor's snapshot and every entry of its log applied on
//! top, committed or not (as etcd's `--force-new-cluster` keeps its whole WAL). An
//! entry the lost majority never committed may so take effect; one it committed that
//! never reached the survivor is lost. The application must make up for the second:
//! the registry raises every shard's epoch past any the lost group can have served.
//!
//! The new directory gets a disk identity of its own and a membership that records it,
//! so none of the lost group's members — should one come back — is taken for a member
//! of the new group: its requests name a disk the new group does not know.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use crate::identity;
use crate::log_store;
use crate::rocks::open_db;
use crate::sm_store::{read_stored_snapshot, write_stored_snapshot, ReplicatedState};
use crate::types::{EntryPayload, LogId, Membership, Node, NodeId, SnapshotMeta, StoredMembership, Vote};

/// A recovery could not read its source or write its target. Nothing is written to
/// the target before the source was read whole.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("{0}: not a holdfast node's data directory (no RocksDB files there)")]
    NotADataDir(PathBuf),
    #[error("{dir}: cannot open it ({why}); is its node still running? Stop it first: a recovery reads a stopped node's directory")]
    Locked { dir: PathBuf, why: String },
    #[error("{0}: the directory holds no state (no snapshot and no log): nothing to recover from")]
    Empty(PathBuf),
    #[error("{0}: exists and is not empty; a recovered member starts on a new data directory")]
    TargetNotEmpty(PathBuf),
    #[error("reading or writing {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
}

/// What a stopped node's data directory holds.
#[derive(Debug)]
pub struct Survivor<S> {
    /// The application state: the snapshot plus every entry after it.
    pub state: S,
    /// The id of the last entry in that state (the snapshot's, or the last log entry's).
    pub last_log_id: LogId,
    /// The highest term the node had seen (its vote, or its last entry's).
    pub term: u64,
    /// The node id the directory belongs to.
    pub node_id: NodeId,
    /// Entries applied on top of the snapshot.
    pub replayed: u64,
    /// The members of the lost group, as the copy last knew them.
    pub members: BTreeMap<NodeId, Node>,
}

fn at(dir: &Path) -> impl Fn(io::Error) -> RecoverError + '_ {
    move |source| RecoverError::Io { dir: dir.to_owned(), source }
}

/// Reads the state of the stopped node whose data directory is `dir` into `initial`
/// (the application's empty state). Opens the directory read-write (RocksDB's lock
/// refuses a directory its node still runs on) and adds nothing to its log, vote or
/// snapshot (RocksDB does rewrite its own manifest and info log on open).
pub fn read_stopped<S: ReplicatedState>(dir: &Path, mut initial: S) -> Result<Survivor<S>, RecoverError> {
    if !dir.join("CURRENT").is_file() {
        return Err(RecoverError::NotADataDir(dir.to_owned()));
    }
    let db = open_db(dir, None).map_err(|e| RecoverError::Locked { dir: dir.to_owned(), why: e.to_string() })?;
    let node_id = identity::read(&db).map_err(at(dir))?.map(|i| i.node_id).unwrap_or(0);
    let stored = read_stored_snapshot(&db).map_err(at(dir))?;
    let (mut last, mut members) = (None, BTreeMap::new());
    if let Some((meta, data)) = &stored {
        initial.restore(data).map_err(at(dir))?;
        last = meta.last_log_id;
        members = meta.last_membership.membership().nodes().map(|(id, n)| (*id, n.clone())).collect();
    }
    let from = last.as_ref().map_or(0, |l| l.index + 1);
    let mut replayed = 0;
    for entry in log_store::entries_from(&db, from).map_err(at(dir))? {
        match &entry.payload {
            EntryPayload::Normal(req) => {
                initial.apply(entry.log_id.index, &req.payload).map_err(at(dir))?;
                replayed += 1;
            }
            EntryPayload::Membership(m) => members = m.nodes().map(|(id, n)| (*id, n.clone())).collect(),
            EntryPayload::Blank => {}
        }
        last = Some(entry.log_id);
    }
    let last_log_id = last.ok_or_else(|| RecoverError::Empty(dir.to_owned()))?;
    let vote_term = log_store::stored_vote(&db).map_err(at(dir))?.map_or(0, |v| v.leader_id.term);
    Ok(Survivor { state: initial, term: vote_term.max(last_log_id.leader_id.term), last_log_id, node_id, replayed, members })
}

/// Writes a new data directory `dir` (absent or empty) for node `node_id`, reached at
/// `node`'s addresses, holding `state` (an application snapshot) as of `last_log_id`,
/// as the only member of a new group. Its next election is for a term above `term`.
/// Returns the disk identity written there.
pub fn write_new_member(dir: &Path, node_id: NodeId, node: Node, state: Vec<u8>, last_log_id: LogId, term: u64) -> Result<u64, RecoverError> {
    if dir.exists() && std::fs::read_dir(dir).map_err(at(dir))?.next().is_some() {
        return Err(RecoverError::TargetNotEmpty(dir.to_owned()));
    }
    let db = open_db(dir, None).map_err(|e| RecoverError::Io { dir: dir.to_owned(), source: io::Error::other(e) })?;
    let id = identity::load_or_create(&db, node_id).map_err(|e| RecoverError::Io { dir: dir.to_owned(), source: io::Error::other(e.to_string()) })?;
    let voters = BTreeSet::from([node_id]);
    let nodes = BTreeMap::from([(node_id, node.on_disk(id.disk))]);
    let membership = Membership::new(vec![voters], nodes).map_err(|e| RecoverError::Io { dir: dir.to_owned(), source: io::Error::other(e.to_string()) })?;
    let meta = SnapshotMeta { last_log_id: Some(last_log_id), last_membership: StoredMembership::new(Some(last_log_id), membership) };
    // The snapshot first, then the log's markers, each a synced write. A recovery cut
    // short between the two leaves a directory that is not empty: the next attempt is
    // refused until it is removed (do not start a node on it).
    write_stored_snapshot(&db, meta, state).map_err(at(dir))?;
    log_store::seed(&db, last_log_id, Vote::new(term, node_id)).map_err(at(dir))?;
    Ok(id.disk)
}
