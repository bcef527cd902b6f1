//! CellAdmin: an operator gives a cell its namespaces and shards (until the registry
//! does it), seals a shard, and reads the cell's placement.

use crate::cell::{cell_status, Cell};
use crate::convert::{self, invalid};
use holdfast_cell_state::{Command, Outcome};
use holdfast_core::{Epoch, ErrorCode, LockName, NamespaceName, ShardKey, ShardName};
use holdfast_proto::admin::v1 as pb;
use holdfast_proto::admin::v1::cell_admin_server::CellAdmin;
use holdfast_proto::raft::v1 as rpb;
use holdfast_raft::backup;
use holdfast_raft::snapshot_file::GroupKind;
use holdfast_rpc::status::status;
use holdfast_rpc::CallContext;
use std::sync::Arc;
use tonic::{Request, Response, Status};
use tracing::info;

/// Contended locks a status answer lists, most waiters first.
const MAX_CONTENDED: usize = 10;

#[derive(Debug, Clone)]
pub struct CellAdminApi {
    cell: Arc<Cell>,
    /// The cell's name, as snapshot files name it.
    name: String,
}

impl CellAdminApi {
    pub fn new(cell: Arc<Cell>, name: String) -> CellAdminApi {
        CellAdminApi { cell, name }
    }
}

fn shard_key(ns: String, shard: String) -> Result<ShardKey, Status> {
    let ns = NamespaceName::new(ns).map_err(invalid)?;
    let shard = if shard.is_empty() { ShardName::default_shard() } else { ShardName::new(shard).map_err(invalid)? };
    Ok(ShardKey::new(ns, shard))
}

#[tonic::async_trait]
impl CellAdmin for CellAdminApi {
    type SaveSnapshotStream = backup::SnapshotStream;

    /// The cell's whole state, read after a read index, audited before it is sent
    /// (a snapshot the audit log does not record is not taken).
    async fn save_snapshot(&self, req: Request<rpb::SaveSnapshotRequest>) -> Result<Response<Self::SaveSnapshotStream>, Status> {
        let ctx = CallContext::from_grpc(&req);
        backup::is_group(&req.get_ref().group, &self.name)?;
        let (header, state) = self.cell.group.snapshot_file(GroupKind::Cell, &self.name, &ctx.identity()).await?;
        let detail = format!("cell {} at entry {} of term {} ({} bytes)", self.name, header.last_index, header.last_term, header.state_bytes);
        self.cell.audit(&ctx, "snapshot_save", detail).await?;
        info!(cell = %self.name, index = header.last_index, bytes = header.state_bytes, by = %header.taken_by, "snapshot saved");
        Ok(Response::new(backup::stream(&header, state)))
    }

    async fn apply_namespace(&self, req: Request<pb::ApplyNamespaceRequest>) -> Result<Response<pb::ApplyNamespaceResponse>, Status> {
        let config = convert::namespace_from(req.into_inner().config.ok_or_else(|| invalid("config is required"))?)?;
        let leader = self.cell.assume_leader()?;
        let name = config.name.clone();
        match self.cell.propose(leader, Command::ApplyConfig { config }).await? {
            Ok(Outcome::ConfigApplied { version }) => {
                info!(ns = %name, version, "namespace config applied");
                Ok(Response::new(pb::ApplyNamespaceResponse { version }))
            }
            Ok(Outcome::ConfigUnchanged { current }) => Ok(Response::new(pb::ApplyNamespaceResponse { version: current })),
            Ok(o) => Err(status(ErrorCode::Unavailable, format!("unexpected outcome {o:?}"))),
            Err(e) => Err(cell_status(&e)),
        }
    }

    async fn adopt_shard(&self, req: Request<pb::AdoptShardRequest>) -> Result<Response<pb::AdoptShardResponse>, Status> {
        let r = req.into_inner();
        let shard = shard_key(r.ns, r.shard)?;
        let delayed_locks = r.delayed_locks.into_iter().map(LockName::new).collect::<Result<Vec<_>, _>>().map_err(invalid)?;
        if Epoch(r.epoch) > Epoch::MAX {
            return Err(invalid(format!("epoch {} does not fit in 24 bits", r.epoch)));
        }
        let leader = self.cell.assume_leader()?;
        match self.cell.propose(leader, Command::AdoptShard { shard: shard.clone(), epoch: Epoch(r.epoch), delayed_locks }).await? {
            Ok(_) => {
                info!(shard = %shard, epoch = r.epoch, "shard adopted");
                Ok(Response::new(pb::AdoptShardResponse { epoch: r.epoch }))
            }
            Err(e) => Err(cell_status(&e)),
        }
    }

    async fn seal_shard(&self, req: Request<pb::SealShardRequest>) -> Result<Response<pb::SealShardResponse>, Status> {
        let r = req.into_inner();
        let shard = shard_key(r.ns, r.shard)?;
        let leader = self.cell.assume_leader()?;
        match self.cell.propose(leader, Command::SealShard { shard: shard.clone(), epoch: Epoch(r.epoch) }).await? {
            Ok(Outcome::Sealed { highest, held_locks }) => {
                info!(shard = %shard, epoch = r.epoch, highest = highest.map_or(0, |t| t.0), "shard sealed");
                Ok(Response::new(pb::SealShardResponse {
                    highest_token: highest.map_or(0, |t| t.0),
                    held_locks: held_locks.into_iter().map(String::from).collect(),
                }))
            }
            Ok(o) => Err(status(ErrorCode::Unavailable, format!("unexpected outcome {o:?}"))),
            Err(e) => Err(cell_status(&e)),
        }
    }

    async fn status(&self, _req: Request<pb::CellStatusRequest>) -> Result<Response<pb::CellStatusResponse>, Status> {
        let resp = self
            .cell
            .read(|st| {
                let sessions = st.sessions_per_shard();
                let mut contended: Vec<pb::ContendedLock> = st
                    .namespace_stats()
                    .into_iter()
                    .flat_map(|(ns, s)| {
                        s.waiting.into_iter().map(move |(name, n)| pb::ContendedLock { ns: ns.to_string(), name: name.to_string(), waiters: n as u32 })
                    })
                    .collect();
                contended.sort_by(|a, b| b.waiters.cmp(&a.waiters).then_with(|| (&a.ns, &a.name).cmp(&(&b.ns, &b.name))));
                contended.truncate(MAX_CONTENDED);
                pb::CellStatusResponse {
                    contended,
                    shards: st
                        .shards()
                        .map(|s| pb::ShardInfo {
                            ns: s.key.ns.to_string(),
                            shard: s.key.shard.to_string(),
                            epoch: s.epoch.0,
                            seq: s.seq.0,
                            sealed: s.sealed,
                            keys: s.keys as u32,
                            sessions: sessions.get(&s.key).copied().unwrap_or(0) as u32,
                        })
                        .collect(),
                    namespaces: st.namespaces().map(convert::namespace_to).collect(),
                    revision: st.revision().0,
                    sessions: st.session_countdowns().count() as u32,
                    ..Default::default()
                }
            })
            .await?;
        let rm = holdfast_raft::current_metrics(self.cell.group.raft());
        let resp = pb::CellStatusResponse {
            leader_id: self.cell.group.node_id(),
            term: rm.current_term,
            commit_index: rm.local_committed.as_ref().map_or(0, |l| l.index),
            applied_index: rm.last_applied.as_ref().map_or(0, |l| l.index),
            ownership_lease_left_ms: self.cell.ownership_lease_left().map(|d| d.as_millis() as u64),
            ..resp
        };
        Ok(Response::new(resp))
    }
}
