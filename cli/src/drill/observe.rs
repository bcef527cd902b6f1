//! What the drill watches besides its own workload:
//! - the registry's ownership (list, then watch from the list's revision): every
//!   change is an `OwnerObserved` line, and [`Owners`] answers which cell owned a
//!   shard at an epoch;
//! - linearizable reads of each workload lock's holders (`HolderObserved`), so the
//!   checker can tell an acknowledged grant lost after a failover;
//! - every cell's served shards (`CellServing` intervals), so it can tell two cells
//!   serving one shard at one epoch.

use super::playground::{channel, Playground, Reg};
use holdfast_core::{CellId, Epoch, FencingToken, LockName, NamespaceName, ShardName};
use holdfast_drills::history::{EventKind, LockKey};
use holdfast_drills::record::Recorder;
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

const POLL: Duration = Duration::from_millis(300);

/// Who owned which shard at which epoch, as the registry said.
#[derive(Debug, Default, Clone)]
pub struct Owners {
    inner: Arc<Mutex<OwnersInner>>,
}

#[derive(Debug, Default)]
struct OwnersInner {
    /// (ns, shard) → (cell, region, epoch) now.
    now: BTreeMap<(String, String), (String, String, u32)>,
    /// (ns, shard, epoch) → (cell, region): one cell per epoch.
    at: BTreeMap<(String, String, u32), (String, String)>,
}

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, OwnersInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, ns: &str, shard: &str, cell: &str, region: &str, epoch: u32) {
        let mut g = self.lock();
        g.now.insert((ns.to_owned(), shard.to_owned()), (cell.to_owned(), region.to_owned(), epoch));
        g.at.insert((ns.to_owned(), shard.to_owned(), epoch), (cell.to_owned(), region.to_owned()));
    }

    /// The cell owning the shard now, as far as the watch has told.
    pub fn cell_now(&self, ns: &str, shard: &str) -> String {
        self.lock().now.get(&(ns.to_owned(), shard.to_owned())).map(|o| o.0.clone()).unwrap_or_else(|| "unknown".into())
    }

    /// The cell and region that owned the shard at `epoch`.
    pub fn at(&self, ns: &str, shard: &str, epoch: u32) -> (String, String) {
        self.lock().at.get(&(ns.to_owned(), shard.to_owned(), epoch)).cloned().unwrap_or_else(|| ("unknown".into(), "unknown".into()))
    }
}

fn cell_id(s: &str) -> Option<CellId> {
    CellId::new(s).ok()
}

// The fields a listed owner and a watch event share (two generated types).
#[allow(clippy::too_many_arguments)]
fn record_owner(rec: &Recorder, owners: &Owners, ns: &str, shard: &str, region: &str, cell: &str, epoch: u32, to_cell: &str) {
    owners.update(ns, shard, cell, region, epoch);
    let (Ok(ns), Ok(shard)) = (NamespaceName::new(ns), ShardName::new(shard)) else { return };
    rec.record(EventKind::OwnerObserved {
        ns,
        shard,
        cell: cell_id(cell),
        epoch: Epoch(epoch),
        moving_to: if to_cell.is_empty() { None } else { cell_id(to_cell) },
    });
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

/// One cell's view of one shard at one epoch, as polled.
#[derive(Debug, Clone)]
struct Interval {
    from_ms: u64,
    last_ms: u64,
    open: bool,
}

/// Polls every cell's `CellAdmin.Status` (served, unsealed shards) until `stop`;
/// returns the intervals, which the caller records as `CellServing` lines.
/// An interval runs from the send time of the first poll that showed the shard to the
/// answer time of the last one (`until: None` if still served at the end).
pub async fn poll_serving(playground: Playground, rec: Arc<Recorder>, stop: CancellationToken) -> Vec<EventKind> {
    let mut seen: BTreeMap<(String, String, String, u32), Interval> = BTreeMap::new();
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
            for ((c, ns, shard, epoch), iv) in seen.iter_mut() {
                if c == cell && iv.open && !served.iter().any(|(n, s, e)| n == ns && s == shard && e == epoch) {
                    iv.open = false;
                }
            }
            for (ns, shard, epoch) in served {
                let iv = seen.entry((cell.clone(), ns, shard, epoch)).or_insert(Interval { from_ms: sent, last_ms: now, open: true });
                if iv.open {
                    iv.last_ms = now;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    seen.into_iter()
        .filter_map(|((cell, ns, shard, epoch), iv)| {
            Some(EventKind::CellServing {
                cell: CellId::new(cell).ok()?,
                ns: NamespaceName::new(ns).ok()?,
                shard: ShardName::new(shard).ok()?,
                epoch: Epoch(epoch),
                from_ms: iv.from_ms,
                until_ms: (!iv.open).then_some(iv.last_ms),
            })
        })
        .collect()
}
