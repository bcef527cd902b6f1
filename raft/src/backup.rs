//! The server side of `SaveSnapshot`, which a cell (`CellAdmin`) and the registry
//! (`RegistryService`) each serve: which group the caller means, and the snapshot
//! file ([`crate::snapshot_file`]) streamed in pieces. Who may ask is the port's
//! rule (nodes and `user:root`; an operator through a gateway, for the registry's):
//! docs/security.md.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use holdfast_core::ErrorCode;
use holdfast_proto::raft::v1 as pb;
use holdfast_rpc::status::status;
use tonic::Status;

use crate::snapshot_file::{pieces, Header};

/// What `SaveSnapshot` answers: the file, piece by piece.
pub type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotChunk, Status>> + Send>>;

/// The caller names the group it means (`requested`): a node of another group refuses,
/// so that a file is never saved under the wrong name.
pub fn is_group(requested: &str, this: &str) -> Result<(), Status> {
    if requested == this {
        return Ok(());
    }
    Err(status(ErrorCode::InvalidArgument, format!("this node serves {this:?}, not {requested:?}: ask a node of {requested:?}")))
}

/// Streams the file of `header` and `state`.
pub fn stream(header: &Header, state: Arc<Vec<u8>>) -> SnapshotStream {
    Box::pin(futures_util::stream::iter(pieces(header, state).map(|data| Ok(pb::SnapshotChunk { data }))))
}
