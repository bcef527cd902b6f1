//! What the drill watches besides its own workload:
//! - the registry's ownership (list, then watch from the list's revision): every
//!   change is an `OwnerObserved` line, and [`Owners`] answers which cell owned a
//!   shard at an epoch;
//! - linearizable reads of each workload lock's holders (`HolderObserved`), so the
//!   checker can tell an acknowledged grant lost after a failover;
//! - every cell's served shards (`CellServing` intervals), so it can tell two cells
//!   serving one shard at one epoch.

use super::playground::{channel, Playground, Reg};
use holdfast_core::{Epoch, FencingToken, LockName, NamespaceName};
use holdfast_drills::history::{EventKind, LockKey};
use holdfast_drills::observe::{OwnerSeen, Serving};
use holdfast_drills::record::Recorder;
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

const POLL: Duration = Duration::from_millis(300);

pub use holdfast_drills::observe::Owners;

// The fields a listed owner and a watch event share (two generated types).
#[allow(clippy::too_many_arguments)]
fn record_owner(rec: &Recorder, owners: &Owners, ns: &str, shard: &str, region: &str, cell: &str, epoch: u32, to_cell: &str) {
    if let Some(line) = owners.saw(OwnerSeen { ns, shard, region, cell, epoch, to_cell }) {
        rec.record(line);
    }
}

/// Lists every shard's owner, then follows the registry's watch until `stop`
/// (re-listing after a broken stream).
pub async fn watch_ownership(reg: Reg, rec: Arc<Recorder>, owners: Owners, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let listed = reg.list_shards().await;
        let Ok(list) = listed else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        for o in &list.shards {
            record_owner(&rec, &owners, &o.ns, &o.shard, &o.region, &o.cell, o.epoch, &o.to_cell);
        }
        let from = list.revision;
        let stream =
            reg.call(rpb::WatchOwnershipRequest { from_revision: from, ns: String::new() }, |mut c, r| async move { c.watch_ownership(r).await }).await;
        let Ok(mut stream) = stream else { continue };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                m = stream.next() => match m {
                    Some(Ok(e)) => record_owner(&rec, &owners, &e.ns, &e.shard, &e.region, &e.cell, e.epoch, &e.to_cell),
                    _ => break,
                },
            }
        }
    }
}

/// The workload's locks: (ns, shard, lock name).
pub type LockSet = Vec<(String, String, String)>;

/// Reads each lock's holders through a gateway every [`POLL`] until `stop`.
pub async fn poll_holders(gateways: Vec<String>, locks: LockSet, rec: Arc<Recorder>, stop: CancellationToken) {
    let mut clients: Vec<Option<LockServiceClient<tonic::transport::Channel>>> = vec![None; gateways.len()];
    while !stop.is_cancelled() {
        for (ns, shard, name) in &locks {
            let since_ms = rec.ms();
            let req = pb::DescribeRequest { shard: Some(pb::ShardRef { ns: ns.clone(), shard: shard.clone(), epoch: 0 }), name: name.clone() };
            let mut answer = None;
            for (i, gw) in gateways.iter().enumerate() {
                if clients[i].is_none() {
                    clients[i] = channel(gw).await.ok().map(LockServiceClient::new);
                }
                let Some(c) = clients[i].as_mut() else { continue };
                match c.describe(req.clone()).await {
                    Ok(r) => {
                        answer = Some(r.into_inner());
                        break;
                    }
                    Err(s) if s.code() == tonic::Code::Unavailable && holdfast_rpc::status::code_of(&s).is_none() => clients[i] = None,
                    Err(_) => break,
                }
            }
            let (Some(d), Ok(lns), Ok(lname)) = (answer, NamespaceName::new(ns.as_str()), LockName::new(name.as_str())) else { continue };
            rec.record(EventKind::HolderObserved {
                lock: LockKey { ns: lns, name: lname },
                since_ms,
                epoch: Epoch(d.epoch),
                holders: d.holders.iter().map(|h| FencingToken(h.token)).collect(),
            });
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Polls every cell's `CellAdmin.Status` (served, unsealed shards) until `stop`;
/// returns the intervals, which the caller records as `CellServing` lines.
/// An interval runs from the send time of the first poll that showed the shard to the
/// answer time of the last one (`until: None` if still served at the end).
pub async fn poll_serving(playground: Playground, rec: Arc<Recorder>, stop: CancellationToken) -> Vec<EventKind> {
    let mut serving = Serving::default();
    let cells: Vec<(String, Vec<String>)> =
        playground.regions.iter().flat_map(|r| r.cells.iter().map(|c| (c.cell.clone(), c.nodes.iter().map(|n| n.client.clone()).collect()))).collect();
    while !stop.is_cancelled() {
        for (cell, nodes) in &cells {
            let sent = rec.ms();
            let mut status = None;
            for addr in nodes {
                let Ok(ch) = channel(addr).await else { continue };
                if let Ok(r) = CellAdminClient::new(ch).status(apb::CellStatusRequest {}).await {
                    status = Some(r.into_inner());
                    break;
                }
            }
            let Some(status) = status else { continue };
            let now = rec.ms();
            let served: Vec<(String, String, u32)> = status.shards.iter().filter(|s| !s.sealed).map(|s| (s.ns.clone(), s.shard.clone(), s.epoch)).collect();
            serving.polled(cell, sent, now, &served);
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    serving.into_events()
}
