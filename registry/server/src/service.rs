//! The RegistryService of `proto/holdfast/registry/v1`, served by every node of the
//! registry. Writes and reads go to the leader (others answer `NOT_LEADER` with a hint);
//! ownership renewals are answered only under the leader's Raft lease.

use crate::convert::{self as cv, invalid};
use crate::registry::{registry_status, Registry};
use holdfast_core::{CellId, Epoch, ErrorCode, FencingToken, LockName, Revision, ShardKey};
use holdfast_proto::registry::v1 as pb;
use holdfast_proto::registry::v1::registry_service_server::RegistryService;
use holdfast_raft::snapshot_file::{GroupKind, REGISTRY_GROUP};
use holdfast_registry_state::{Command, HistoryError, Outcome, RegistryError, ShardState, TokenRecord};
use holdfast_rpc::status::status;
use holdfast_rpc::CallContext;
use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

#[derive(Debug, Clone)]
pub struct RegistryApi {
    reg: Arc<Registry>,
    /// The highest cell-leader term each cell renewed with, as this node saw it, and
    /// when it last renewed with it.
    cell_terms: Arc<Mutex<HashMap<CellId, (u64, Instant)>>>,
}

impl RegistryApi {
    pub fn new(reg: Arc<Registry>) -> RegistryApi {
        RegistryApi { reg, cell_terms: Arc::default() }
    }

    /// Refuses a renewal from a deposed leader of `cell`: one whose term is below the
    /// highest this node has seen from the cell within the last `window` (three renewal
    /// periods). Its report of what the cell serves is stale (a zombie leader's frozen
    /// list), and reconciling it would restart shards the live leader serves, once per
    /// renewal — an epoch-bump storm. The record lapses after a window without a renewal
    /// in its term, so a cell formed again from empty disks (its terms start over) is
    /// heard once its old leader has gone quiet. A new registry leader has seen no term
    /// yet: it restarts no epoch until it is settled (`OwnershipLeases::settled`). Term
    /// 0 (not given) is not checked.
    fn fence_cell_term(&self, cell: &CellId, term: u64, window: Duration) -> Result<(), Status> {
        if term == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut terms = self.cell_terms.lock().expect("cell terms lock");
        if let Some((seen, at)) = terms.get(cell) {
            if term < *seen && now.duration_since(*at) < window {
                return Err(status(
                    ErrorCode::NotLeader,
                    format!("cell {cell} renews in term {seen} already; this renewal from term {term} comes from a deposed cell leader"),
                ));
            }
        }
        terms.insert(cell.clone(), (term, now));
        Ok(())
    }

    async fn shard_write(&self, by: &str, cmd: Command) -> Result<pb::ShardOwner, Status> {
        match self.reg.write_as(by, cmd).await? {
            Outcome::Shard { shard, record } => Ok(cv::owner_to(&shard, &record)),
            other => Err(unexpected(other)),
        }
    }

    /// An access change (grant, revoke, token), recorded; returns the new version.
    async fn access_write(&self, by: &str, cmd: Command) -> Result<u64, Status> {
        match self.reg.write_as(by, cmd).await? {
            Outcome::Access { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }

    async fn namespace_write(&self, by: &str, cmd: Command) -> Result<holdfast_proto::admin::v1::NamespaceConfig, Status> {
        match self.reg.write_as(by, cmd).await? {
            Outcome::Namespace { config } => {
                info!(ns = %config.name, version = config.version, "namespace config stored");
                Ok(cv::namespace_to(&config))
            }
            other => Err(unexpected(other)),
        }
    }
}

/// Longest reason a fence confirmation may give (it is audited).
const MAX_FENCE_REASON_BYTES: usize = 512;

fn unexpected(o: Outcome) -> Status {
    status(ErrorCode::Unavailable, format!("internal: unexpected outcome {o:?}"))
}

fn history_status(e: HistoryError) -> Status {
    match e {
        HistoryError::Compacted { .. } => status(ErrorCode::InvalidArgument, format!("{e}; re-list with ListShards and watch from its revision")),
        HistoryError::Ahead { .. } => status(ErrorCode::InvalidArgument, e.to_string()),
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl RegistryApi {
    /// Compares what a renewing cell serves with what it owns: the first report of an
    /// owned epoch is recorded (`Adopted`); an adopted epoch missing from a later report
    /// means the cell lost it, and it gets the shard back only at the next epoch
    /// (`Restarted`). Writes only when something changed.
    ///
    /// `settled`: this registry leader has led for a lease, so its fence knows the live
    /// cell leader's term. Until then it records adoptions but restarts no epoch: the
    /// renewal may be a deposed cell leader's, whose list lacks what the live one
    /// adopted since (an epoch bump on its word is the storm the fence prevents).
    async fn reconcile_adoption(&self, cell: &CellId, serving: &BTreeSet<(ShardKey, Epoch)>, settled: bool) -> Result<(), Status> {
        let fixes: Vec<Command> = self.reg.group.state().read(|m| {
            let st = m.state();
            st.shards_of_cell(cell)
                .into_iter()
                .filter(|o| !o.draining)
                .filter_map(|o| {
                    let served = serving.contains(&(o.shard.clone(), o.epoch));
                    match (served, o.adopted) {
                        (true, false) => Some(Command::Adopted { shard: o.shard, epoch: o.epoch }),
                        (false, true) if settled => Some(Command::Restarted { shard: o.shard, epoch: o.epoch }),
                        _ => None,
                    }
                })
                .collect()
        });
        for cmd in fixes {
            let restart = matches!(cmd, Command::Restarted { .. });
            let leader = self.reg.assume_leader()?;
            match self.reg.propose(leader, cmd).await? {
                Ok(Outcome::Shard { shard, record }) if restart => {
                    warn!(cell = %cell, shard = %shard, epoch = record.epoch.0, "the cell no longer serves a shard it had adopted (data lost?): it re-adopts at the next epoch");
                    // A transfer like any other (the simulation's stamps read this line).
                    info!(shard = %shard, cell = %cell, epoch = record.epoch.0, "shard transferred");
                }
                Ok(_) => {}
                Err(e) => debug!(cell = %cell, error = %e, "adoption bookkeeping refused (the shard moved on)"),
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl RegistryService for RegistryApi {
    async fn create_region(&self, req: Request<pb::CreateRegionRequest>) -> Result<Response<pb::CreateRegionResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let region = cv::region_id(req.into_inner().region)?;
        match self.reg.write_as(&by, Command::CreateRegion { region }).await? {
            Outcome::Region { region, state } => {
                info!(region = %region, "region created");
                Ok(Response::new(pb::CreateRegionResponse { region: Some(cv::region_to(&region, state)) }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn set_region_state(&self, req: Request<pb::SetRegionStateRequest>) -> Result<Response<pb::SetRegionStateResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let region = cv::region_id(r.region)?;
        let state = cv::region_state_from(r.state)?;
        match self.reg.write_as(&by, Command::SetRegionState { region, state }).await? {
            Outcome::Region { region, state } => {
                info!(region = %region, state = %state, "region state changed");
                Ok(Response::new(pb::SetRegionStateResponse { region: Some(cv::region_to(&region, state)) }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn register_cell(&self, req: Request<pb::RegisterCellRequest>) -> Result<Response<pb::RegisterCellResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let cmd = Command::RegisterCell { cell: cv::cell_id(r.cell)?, region: cv::region_id(r.region)?, members: cv::members_from(r.members) };
        match self.reg.write_as(&by, cmd).await? {
            Outcome::Cell { cell, record } => {
                info!(cell = %cell, region = %record.region, members = record.members.len(), "cell registered");
                Ok(Response::new(pb::RegisterCellResponse { cell: Some(cv::cell_to(&cell, &record)) }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn retire_cell(&self, req: Request<pb::RetireCellRequest>) -> Result<Response<pb::RetireCellResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let cmd = Command::RetireCell { cell: cv::cell_id(req.into_inner().cell)? };
        match self.reg.write_as(&by, cmd).await? {
            Outcome::Retired { cell, record } => {
                info!(cell = %cell, region = %record.region, "cell retired");
                Ok(Response::new(pb::RetireCellResponse { cell: Some(cv::cell_to(&cell, &record)) }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn raft_status(&self, _req: Request<pb::RaftStatusRequest>) -> Result<Response<pb::RaftStatusResponse>, Status> {
        // This node's own view: no read through the leader, so it answers while the
        // registry has no quorum (that is when an SRE needs it).
        let m = holdfast_raft::current_metrics(self.reg.group.raft());
        Ok(Response::new(pb::RaftStatusResponse { raft: Some(holdfast_raft::metrics_to_pb(&m)) }))
    }

    async fn list_regions(&self, _req: Request<pb::ListRegionsRequest>) -> Result<Response<pb::ListRegionsResponse>, Status> {
        let regions = self.reg.read(|st| st.regions().map(|(r, s)| cv::region_to(r, s)).collect()).await?;
        Ok(Response::new(pb::ListRegionsResponse { regions }))
    }

    async fn list_cells(&self, req: Request<pb::ListCellsRequest>) -> Result<Response<pb::ListCellsResponse>, Status> {
        let r = req.into_inner();
        let region = if r.region.is_empty() { None } else { Some(cv::region_id(r.region)?) };
        let cells =
            self.reg.read(|st| st.cells().filter(|(_, c)| region.as_ref().is_none_or(|r| &c.region == r)).map(|(id, c)| cv::cell_to(id, c)).collect()).await?;
        Ok(Response::new(pb::ListCellsResponse { cells }))
    }

    async fn create_namespace(&self, req: Request<pb::CreateNamespaceRequest>) -> Result<Response<pb::CreateNamespaceResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let config = cv::namespace_from(req.into_inner().config)?;
        let config = self.namespace_write(&by, Command::CreateNamespace { config }).await?;
        Ok(Response::new(pb::CreateNamespaceResponse { config: Some(config) }))
    }

    async fn update_namespace(&self, req: Request<pb::UpdateNamespaceRequest>) -> Result<Response<pb::UpdateNamespaceResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let config = cv::namespace_from(r.config)?;
        let config = self.namespace_write(&by, Command::UpdateNamespace { config, expected_version: r.expected_version }).await?;
        Ok(Response::new(pb::UpdateNamespaceResponse { config: Some(config) }))
    }

    async fn get_namespace(&self, req: Request<pb::GetNamespaceRequest>) -> Result<Response<pb::GetNamespaceResponse>, Status> {
        let name = cv::ns_name(req.into_inner().name)?;
        let (config, auto_failover) = self
            .reg
            .read(|st| st.namespace(&name).map(|c| (cv::namespace_to(c), cv::auto_failover_to(st.auto_failover(&name)))))
            .await?
            .ok_or_else(|| registry_status(&RegistryError::UnknownNamespace(name.to_string())))?;
        Ok(Response::new(pb::GetNamespaceResponse { config: Some(config), auto_failover: Some(auto_failover) }))
    }

    async fn set_auto_failover(&self, req: Request<pb::SetAutoFailoverRequest>) -> Result<Response<pb::SetAutoFailoverResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let cmd = Command::SetAutoFailover { ns: cv::ns_name(r.ns)?, policy: cv::auto_failover_from(r.auto_failover)? };
        match self.reg.write_as(&by, cmd).await? {
            Outcome::AutoFailover { ns, policy } => {
                info!(ns = %ns, enabled = policy.is_some(), fallback = ?policy.as_ref().and_then(|p| p.fallback.as_ref()), "automatic failover set");
                Ok(Response::new(pb::SetAutoFailoverResponse { auto_failover: Some(cv::auto_failover_to(policy.as_ref())) }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn list_namespaces(&self, _req: Request<pb::ListNamespacesRequest>) -> Result<Response<pb::ListNamespacesResponse>, Status> {
        let configs = self.reg.read(|st| st.namespaces().map(cv::namespace_to).collect()).await?;
        Ok(Response::new(pb::ListNamespacesResponse { configs }))
    }

    async fn place_shard(&self, req: Request<pb::PlaceShardRequest>) -> Result<Response<pb::PlaceShardResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let cmd = Command::PlaceShard { shard: cv::shard_key(r.ns, r.shard)?, cell: cv::cell_id(r.cell)? };
        let owner = self.shard_write(&by, cmd).await?;
        info!(ns = %owner.ns, shard = %owner.shard, cell = %owner.cell, epoch = owner.epoch, "shard placed");
        Ok(Response::new(pb::PlaceShardResponse { owner: Some(owner) }))
    }

    async fn get_owner(&self, req: Request<pb::GetOwnerRequest>) -> Result<Response<pb::GetOwnerResponse>, Status> {
        let r = req.into_inner();
        let key = cv::shard_key(r.ns, r.shard)?;
        let (owner, revision) =
            self.reg.read(|st| st.get_owner(&key).map(|rec| (cv::owner_to(&key, rec), st.revision()))).await?.map_err(|e| registry_status(&e))?;
        Ok(Response::new(pb::GetOwnerResponse { owner: Some(owner), revision: revision.0 }))
    }

    async fn list_shards(&self, req: Request<pb::ListShardsRequest>) -> Result<Response<pb::ListShardsResponse>, Status> {
        let r = req.into_inner();
        let ns = if r.ns.is_empty() { None } else { Some(cv::ns_name(r.ns)?) };
        let cell = if r.cell.is_empty() { None } else { Some(cv::cell_id(r.cell)?) };
        let (shards, revision) = self
            .reg
            .read(|st| {
                let shards = st
                    .list_shards()
                    .filter(|(k, rec)| ns.as_ref().is_none_or(|n| &k.ns == n) && cell.as_ref().is_none_or(|c| &rec.cell == c))
                    .map(|(k, rec)| cv::owner_to(k, rec))
                    .collect();
                (shards, st.revision())
            })
            .await?;
        Ok(Response::new(pb::ListShardsResponse { shards, revision: revision.0 }))
    }

    async fn move_shard(&self, req: Request<pb::MoveShardRequest>) -> Result<Response<pb::MoveShardResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        if r.fence_confirmed && (r.planned || r.reason.trim().is_empty() || r.reason.len() > MAX_FENCE_REASON_BYTES) {
            return Err(invalid(format!("fence_confirmed is for an unplanned move, with a reason of 1 to {MAX_FENCE_REASON_BYTES} bytes (it is audited)")));
        }
        let key = cv::shard_key(r.ns, r.shard)?;
        let to = cv::cell_id(r.to_cell)?;
        // A fence confirmed for an unplanned move already waiting on this target (a
        // failover begun without it) completes that move rather than beginning one.
        let mut waiting = false;
        if r.fence_confirmed {
            let (from, unplanned_to) = self
                .reg
                .read(|st| {
                    st.get_owner(&key).map(|o| {
                        let waiting_on = match &o.state {
                            ShardState::Moving(m) if !m.planned => Some(m.to_cell.clone()),
                            _ => None,
                        };
                        (o.cell.to_string(), waiting_on)
                    })
                })
                .await?
                .map_err(|e| registry_status(&e))?;
            waiting = unplanned_to.as_ref() == Some(&to);
            // Written ahead: a confirmation the audit log does not record does not happen.
            let detail = format!("{key} from {from} to {to}: {}", r.reason.trim());
            match self.reg.write(Command::Audit { by: by.clone(), action: "fence_confirmed".into(), detail }).await? {
                Outcome::Audited { .. } => {}
                other => return Err(unexpected(other)),
            }
        }
        let mut owner = if waiting {
            self.reg.read(|st| st.get_owner(&key).map(|o| cv::owner_to(&key, o))).await?.map_err(|e| registry_status(&e))?
        } else {
            let cmd = Command::BeginMove { shard: key.clone(), to_cell: to, planned: r.planned };
            let owner = self.shard_write(&by, cmd).await?;
            info!(ns = %owner.ns, shard = %owner.shard, from = %owner.cell, to = %owner.to_cell, epoch = owner.epoch, planned = owner.planned, "shard move begun");
            owner
        };
        if r.fence_confirmed {
            // The operator vouched that the source serves no one: no lease to wait out.
            let from = owner.cell.clone();
            owner = self.shard_write(&by, Command::CompleteMove { shard: key.clone(), epoch: Epoch(owner.epoch) }).await?;
            warn!(shard = %key, from = %from, cell = %owner.cell, epoch = owner.epoch, by = %by, reason = %r.reason.trim(), "shard moved unplanned without waiting out the source's lease: fencing confirmed by an operator");
            // A transfer like any other (the simulation's stamps read this line).
            info!(shard = %key, cell = %owner.cell, epoch = owner.epoch, "shard transferred");
        }
        Ok(Response::new(pb::MoveShardResponse { owner: Some(owner) }))
    }

    async fn abort_move(&self, req: Request<pb::AbortMoveRequest>) -> Result<Response<pb::AbortMoveResponse>, Status> {
        // Recorded in the audit log with who asked (a gateway names its caller).
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let key = cv::shard_key(r.ns, r.shard)?;
        let owner = self.shard_write(&by, Command::AbortMove { shard: key.clone(), epoch: Epoch(r.epoch) }).await?;
        info!(ns = %owner.ns, shard = %owner.shard, cell = %owner.cell, epoch = owner.epoch, "shard move aborted");
        if owner.epoch > r.epoch {
            // The source had sealed: it takes the shard back at the next epoch, a
            // transfer like any other (the simulation's stamps read this line).
            info!(shard = %key, cell = %owner.cell, epoch = owner.epoch, "shard transferred");
        }
        Ok(Response::new(pb::AbortMoveResponse { owner: Some(owner) }))
    }

    type SaveSnapshotStream = holdfast_raft::backup::SnapshotStream;

    /// The registry's whole state, read after a read index, audited before it is sent
    /// (a snapshot the audit log does not record is not taken).
    async fn save_snapshot(&self, req: Request<holdfast_proto::raft::v1::SaveSnapshotRequest>) -> Result<Response<Self::SaveSnapshotStream>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        holdfast_raft::backup::is_group(&req.get_ref().group, REGISTRY_GROUP)?;
        let (header, state) = self.reg.group.snapshot_file(GroupKind::Registry, REGISTRY_GROUP, &by).await?;
        let detail = format!("registry at entry {} of term {} ({} bytes)", header.last_index, header.last_term, header.state_bytes);
        match self.reg.write(Command::Audit { by: by.clone(), action: "snapshot_save".into(), detail }).await? {
            Outcome::Audited { .. } => {}
            other => return Err(unexpected(other)),
        }
        info!(index = header.last_index, bytes = header.state_bytes, by = %by, "snapshot saved");
        Ok(Response::new(holdfast_raft::backup::stream(&header, state)))
    }

    type WatchOwnershipStream = BoxStream<pb::OwnershipEvent>;

    async fn watch_ownership(&self, req: Request<pb::WatchOwnershipRequest>) -> Result<Response<Self::WatchOwnershipStream>, Status> {
        let req = req.into_inner();
        let from = Revision(req.from_revision);
        // Events of other namespaces still advance `last`: a filtered watch resumes
        // from the same revisions as a full one.
        let only = (!req.ns.is_empty()).then_some(req.ns);
        let wanted = move |ev: &holdfast_registry_state::OwnershipEvent| only.as_deref().is_none_or(|ns| ev.shard.ns.as_str() == ns);
        // Subscribe before reading the history, so no event falls between the two.
        let mut live = self.reg.hooks.subscribe();
        let history = self.reg.read(|st| st.events_after(from)).await?.map_err(history_status)?;
        let (tx, rx) = mpsc::channel(64);
        let reg = self.reg.clone();
        self.reg.tasks.spawn("ownership watch stream", async move {
            let mut last = from;
            for ev in &history {
                last = ev.revision;
                if wanted(ev) && tx.send(Ok(cv::event_to(ev))).await.is_err() {
                    return;
                }
            }
            loop {
                let next = tokio::select! {
                    ev = live.recv() => ev,
                    _ = tx.closed() => return,
                };
                let batch = match next {
                    Ok(ev) if ev.revision.0 <= last.0 + 1 => vec![ev],
                    // A gap (a snapshot was installed, or we lagged): catch up from the
                    // retained history.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => match reg.group.state().read(|m| m.state().events_after(last)) {
                        Ok(evs) => evs,
                        Err(e) => {
                            let msg = format!("watcher fell behind: {e}; resume from revision {}", last.0);
                            let _ = tx.send(Err(status(ErrorCode::Unavailable, msg))).await;
                            return;
                        }
                    },
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                for ev in batch {
                    if ev.revision <= last {
                        continue;
                    }
                    last = ev.revision;
                    if wanted(&ev) && tx.send(Ok(cv::event_to(&ev))).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn renew_ownership(&self, req: Request<pb::RenewOwnershipRequest>) -> Result<Response<pb::RenewOwnershipResponse>, Status> {
        // Ownership is the cells' business: a root certificate may not renew or seal.
        holdfast_rpc::auth::check(&req, holdfast_rpc::auth::Boundary::Nodes)?;
        let r = req.into_inner();
        let cell = cv::cell_id(r.cell)?;
        let serving = r.serving.into_iter().map(|s| Ok((cv::shard_key(s.ns, s.shard)?, Epoch(s.epoch)))).collect::<Result<BTreeSet<_>, Status>>()?;
        self.reg.lease_check().await?;
        // A leader that has not built its leases yet cannot fence a deposed cell leader
        // (it would fence with a lease of zero, issue #42): the cell retries shortly.
        let (fence_window, settled) = self
            .reg
            .hooks
            .leases
            .lock()
            .expect("leases lock")
            .as_ref()
            .map(|l| (l.fence_window(), l.settled(Instant::now())))
            .ok_or_else(|| status(ErrorCode::Unavailable, "the registry leader is still starting; retry shortly"))?;
        // A live cell leader renews every renewal period: a fence window without a
        // renewal in its term and the term is forgotten (a cell formed again from empty
        // disks starts over at term 1).
        self.fence_cell_term(&cell, r.leader_term, fence_window)?;
        self.reconcile_adoption(&cell, &serving, settled).await?;
        // Under the leases lock, so the leader duty never judges a shard's lease over
        // between this read of the state and the record of the grant.
        let (lease, renew, owned, configs) = {
            let mut guard = self.reg.hooks.leases.lock().expect("leases lock");
            let leases = guard.as_mut().ok_or_else(|| status(ErrorCode::Unavailable, "the registry leader is still starting; retry shortly"))?;
            let (owned, configs) = self
                .reg
                .group
                .state()
                .read(|m| {
                    let st = m.state();
                    st.cell(&cell).ok_or_else(|| RegistryError::UnknownCell(cell.to_string()))?;
                    let owned = st.shards_of_cell(&cell);
                    let names: BTreeSet<_> = owned.iter().map(|o| &o.shard.ns).collect();
                    let configs: Vec<_> = names.into_iter().filter_map(|n| st.namespace(n)).map(cv::namespace_to).collect();
                    Ok::<_, RegistryError>((owned, configs))
                })
                .map_err(|e| registry_status(&e))?;
            leases.granted(Instant::now(), &cell, owned.iter().map(|o| &o.shard));
            (leases.lease(), leases.renew(), owned, configs)
        };
        debug!(cell = %cell, shards = owned.len(), "ownership lease renewed");
        let shards = owned
            .into_iter()
            .map(|o| {
                let (delayed_locks, previous_unsealed) = match &o.handover {
                    None => (vec![], false),
                    Some(h) => match &h.seal {
                        Some(seal) => (seal.held_locks.iter().map(ToString::to_string).collect(), false),
                        None => (vec![], true),
                    },
                };
                pb::OwnedShard {
                    ns: o.shard.ns.to_string(),
                    shard: o.shard.shard.to_string(),
                    epoch: o.epoch.0,
                    draining: o.draining,
                    delayed_locks,
                    previous_unsealed,
                    adopted: o.adopted,
                }
            })
            .collect();
        Ok(Response::new(pb::RenewOwnershipResponse { lease_ms: lease.as_millis() as u64, shards, configs, renew_ms: renew.as_millis() as u64 }))
    }

    async fn report_sealed(&self, req: Request<pb::ReportSealedRequest>) -> Result<Response<pb::ReportSealedResponse>, Status> {
        // Ownership is the cells' business: a root certificate may not renew or seal.
        holdfast_rpc::auth::check(&req, holdfast_rpc::auth::Boundary::Nodes)?;
        let r = req.into_inner();
        let key = cv::shard_key(r.ns, r.shard)?;
        let epoch = Epoch(r.epoch);
        let highest = (r.highest_token != 0).then_some(FencingToken(r.highest_token));
        let held_locks = r.held_locks.into_iter().map(LockName::new).collect::<Result<Vec<_>, _>>().map_err(invalid)?;
        let leader = self.reg.assume_leader()?;
        let sealed = Command::Sealed { shard: key.clone(), epoch, highest, held_locks };
        let record = match self.reg.propose(leader, sealed).await? {
            Ok(Outcome::Shard { record, .. }) => record,
            Ok(other) => return Err(unexpected(other)),
            Err(e @ RegistryError::StaleEpoch { .. }) => {
                // A retried report after the move completed is answered with the result.
                let current = self.reg.read(|st| st.get_owner(&key).cloned()).await?.map_err(|e| registry_status(&e))?;
                let same_report = current.handover.as_ref().is_some_and(|h| h.from_epoch == epoch && h.seal.as_ref().is_some_and(|s| s.highest == highest));
                if same_report {
                    return Ok(Response::new(pb::ReportSealedResponse { owner: Some(cv::owner_to(&key, &current)) }));
                }
                return Err(registry_status(&e));
            }
            Err(e) => return Err(registry_status(&e)),
        };
        info!(shard = %key, epoch = epoch.0, highest = ?highest.map(|t| t.0), "source sealed the shard");
        let owner = match &record.state {
            ShardState::Active => cv::owner_to(&key, &record),
            ShardState::Moving(_) => match self.reg.propose(leader, Command::CompleteMove { shard: key.clone(), epoch }).await? {
                Ok(Outcome::Shard { record, .. }) => {
                    info!(shard = %key, cell = %record.cell, epoch = record.epoch.0, "shard transferred");
                    cv::owner_to(&key, &record)
                }
                Ok(other) => return Err(unexpected(other)),
                // The leader duty completed it first.
                Err(RegistryError::StaleEpoch { .. }) => {
                    let current = self.reg.read(|st| st.get_owner(&key).cloned()).await?.map_err(|e| registry_status(&e))?;
                    cv::owner_to(&key, &current)
                }
                Err(e) => return Err(registry_status(&e)),
            },
        };
        Ok(Response::new(pb::ReportSealedResponse { owner: Some(owner) }))
    }

    async fn grant_role(&self, req: Request<pb::GrantRoleRequest>) -> Result<Response<pb::GrantRoleResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let grant = cv::grant_from(req.into_inner().grant)?;
        let version = self.access_write(&by, Command::Grant { grant: grant.clone() }).await?;
        info!(principal = %grant.principal, role = %grant.role, ns = ?grant.ns, by = %by, "role granted");
        Ok(Response::new(pb::GrantRoleResponse { version }))
    }

    async fn revoke_role(&self, req: Request<pb::RevokeRoleRequest>) -> Result<Response<pb::RevokeRoleResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let grant = cv::grant_from(req.into_inner().grant)?;
        let version = self.access_write(&by, Command::Revoke { grant: grant.clone() }).await?;
        info!(principal = %grant.principal, role = %grant.role, ns = ?grant.ns, by = %by, "role revoked");
        Ok(Response::new(pb::RevokeRoleResponse { version }))
    }

    async fn create_token(&self, req: Request<pb::CreateTokenRequest>) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        let token =
            TokenRecord { name: r.name, sha256: r.sha256.to_ascii_lowercase(), created_at_unix_ms: holdfast_raft::wall_clock_ms(), created_by: by.clone() };
        let name = token.name.clone();
        let version = self.access_write(&by, Command::CreateToken { token }).await?;
        info!(token = %name, by = %by, "token created");
        Ok(Response::new(pb::CreateTokenResponse { version }))
    }

    async fn revoke_token(&self, req: Request<pb::RevokeTokenRequest>) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let by = CallContext::from_grpc(&req).identity();
        let name = req.into_inner().name;
        let version = self.access_write(&by, Command::RevokeToken { name: name.clone() }).await?;
        info!(token = %name, by = %by, "token revoked");
        Ok(Response::new(pb::RevokeTokenResponse { version }))
    }

    async fn list_access(&self, req: Request<pb::ListAccessRequest>) -> Result<Response<pb::ListAccessResponse>, Status> {
        let known = req.into_inner().known_version;
        let r = self
            .reg
            .read(|st| {
                let a = st.access();
                if known != 0 && known == a.version() {
                    return pb::ListAccessResponse { version: known, unchanged: true, ..Default::default() };
                }
                pb::ListAccessResponse {
                    grants: a.grants().map(holdfast_proto::convert::grant_to).collect(),
                    tokens: a.tokens().map(cv::token_to).collect(),
                    version: a.version(),
                    unchanged: false,
                }
            })
            .await?;
        Ok(Response::new(r))
    }

    async fn append_audit(&self, req: Request<pb::AppendAuditRequest>) -> Result<Response<pb::AppendAuditResponse>, Status> {
        // Only a node records what happened elsewhere, for whom it names.
        holdfast_rpc::auth::check(&req, holdfast_rpc::auth::Boundary::Nodes)?;
        let by = CallContext::from_grpc(&req).identity();
        let r = req.into_inner();
        match self.reg.write(Command::Audit { by, action: r.action, detail: r.detail }).await? {
            Outcome::Audited { seq } => Ok(Response::new(pb::AppendAuditResponse { seq })),
            other => Err(unexpected(other)),
        }
    }

    async fn list_audit(&self, req: Request<pb::ListAuditRequest>) -> Result<Response<pb::ListAuditResponse>, Status> {
        let r = req.into_inner();
        let limit = match r.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let records: Vec<pb::AuditRecord> = self.reg.read(|st| st.access().audit_after(r.after_seq, limit).iter().map(cv::audit_to).collect()).await?;
        let next_after_seq = records.last().map_or(r.after_seq, |x| x.seq);
        Ok(Response::new(pb::ListAuditResponse { records, next_after_seq }))
    }
}
