//! Cells follow the registry: while this node leads its cell, it renews the cell's
//! ownership lease every lease/3, records the answer in the [`OwnershipLease`] that
//! every grant path asks, and commits what the answer requires ([`plan`]): namespace
//! configs, adoptions at new epochs, seals of shards that left, and for a planned move
//! away, the seal and its report to the registry.
//!
//! Only configured with `registry_endpoints`; without them the cell is in admin mode
//! (namespaces and shards come from `CellAdmin` calls, and no lease gates grants).

use crate::cell::Cell;
use crate::ownership::{plan, served, Listed, Step};
use holdfast_cell_state::{Command, Outcome};
use holdfast_core::{Epoch, LockName, NamespaceConfig, ShardKey};
use holdfast_proto::convert::{namespace_from, shard_key};
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Budget, CancellationToken, Hints, Transport, Upstream};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};

/// Retry pace while the registry does not answer.
const RETRY: Duration = Duration::from_millis(200);
/// The pause before reporting an adoption the registry has not recorded yet.
const UNRECORDED_PAUSE: Duration = Duration::from_millis(20);
/// How often a new leader looks whether its duties have built its term.
const TERM_POLL: Duration = Duration::from_millis(10);

/// The cell's client of the registry: its configured endpoints only
/// ([`Hints::Members`]), the one that answered last first.
#[derive(Debug)]
pub struct RegistryLink {
    cell: String,
    registry: Upstream,
}

impl RegistryLink {
    pub fn new(cell: String, endpoints: Vec<String>, transport: &Transport) -> RegistryLink {
        RegistryLink { cell, registry: Upstream::new(transport, endpoints, Hints::Members) }
    }

    fn budget(&self) -> Budget {
        Budget::per_attempt(self.registry.transport().options().request_timeout())
    }

    /// Renews as the cell's leader in `term` (the registry refuses a deposed one).
    async fn renew(&mut self, serving: Vec<rpb::ServedShard>, term: u64) -> Result<rpb::RenewOwnershipResponse, String> {
        let req = rpb::RenewOwnershipRequest { cell: self.cell.clone(), serving, leader_term: term };
        self.registry
            .call(self.budget(), |ch| {
                let req = req.clone();
                async move { RegistryServiceClient::new(ch).renew_ownership(req).await }
            })
            .await
            .map(|c| c.value)
            .map_err(|e| format!("RenewOwnership: {e}"))
    }

    async fn report_sealed(&mut self, req: rpb::ReportSealedRequest) -> Result<rpb::ReportSealedResponse, String> {
        self.registry
            .call(self.budget(), |ch| {
                let req = req.clone();
                async move { RegistryServiceClient::new(ch).report_sealed(req).await }
            })
            .await
            .map(|c| c.value)
            .map_err(|e| format!("ReportSealed: {e}"))
    }
}

/// Runs until `shutdown` fires: renews while this node leads, idles otherwise.
pub async fn run(cell: Arc<Cell>, mut link: RegistryLink, shutdown: CancellationToken) {
    if cell.ownership_margin.is_none() {
        return;
    }
    loop {
        let Some(term) = cell.group.await_leadership(&shutdown).await else { return };
        // The term's ownership lease starts empty: a new leader grants nothing until it
        // has renewed. Its duties build the term; wait for it.
        while cell.hooks.term_number() != Some(term) && cell.group.leader_in_term(term).is_some() && !shutdown.is_cancelled() {
            tokio::time::sleep(TERM_POLL).await;
        }
        info!(term, "following the registry: renewing the ownership lease");
        while cell.group.leader_in_term(term).is_some() && cell.hooks.term_number() == Some(term) && !shutdown.is_cancelled() {
            let pause = match follow_once(&cell, &mut link, term).await {
                // An adoption the registry has not recorded holds this cell's grants
                // back: report it almost at once rather than in lease/3 (not at once:
                // a registry that keeps refusing the record must not get a hot loop).
                Ok(Renewed { unrecorded: true, .. }) => UNRECORDED_PAUSE,
                Ok(Renewed { renew, .. }) => renew,
                Err(e) => {
                    warn!(error = %e, "ownership renewal failed; the cell stops granting when its lease runs out");
                    RETRY
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}

/// What one renewal left.
struct Renewed {
    /// When to renew next (the registry says; a third of the lease for an older one).
    renew: Duration,
    /// The cell now serves an epoch the registry lists as not yet adopted (it adopted
    /// it just now): the next renewal reports it, and grants wait for that.
    unrecorded: bool,
}

/// One renewal and everything it requires, as the cell's leader in `term`.
async fn follow_once(cell: &Cell, link: &mut RegistryLink, term: u64) -> Result<Renewed, String> {
    // What this cell serves, so the registry notices a shard it lost (data loss):
    // that one comes back only at the next epoch.
    let serving = cell.group.state().read(|m| {
        served(m.state().shards())
            .into_iter()
            .map(|(key, epoch)| rpb::ServedShard { ns: key.ns.to_string(), shard: key.shard.to_string(), epoch: epoch.0 })
            .collect()
    });
    let sent = Instant::now();
    let answer = link.renew(serving, term).await?;
    let lease_len = Duration::from_millis(answer.lease_ms);
    let answer_renew = Duration::from_millis(answer.renew_ms);
    let listed = answer.shards.into_iter().map(listed_from).collect::<Result<Vec<_>, _>>()?;
    let configs = answer
        .configs
        .into_iter()
        .map(|c| namespace_from(c).map_err(|e| format!("registry sent an invalid namespace config: {e:?}")))
        .collect::<Result<Vec<NamespaceConfig>, _>>()?;
    let steps = cell.group.state().read(|m| plan(m.state(), &listed, &configs));
    // Configs and adoptions first, so the lock-delay of an unsealed handover is known
    // when the lease records it.
    let mut reports = Vec::new();
    for step in steps {
        let leader = cell.assume_leader().map_err(|s| s.message().to_owned())?;
        match step {
            Step::Commit(cmd) => {
                let kind = cmd.kind();
                match cell.propose(leader, cmd).await.map_err(|s| s.message().to_owned())? {
                    Ok(o) => info!(kind, outcome = ?o, "followed the registry"),
                    Err(e) => warn!(kind, error = %e, "the registry asked for a change the lock table refused"),
                }
            }
            Step::SealAndReport { shard, epoch } => {
                let cmd = Command::SealShard { shard: shard.clone(), epoch };
                match cell.propose(leader, cmd).await.map_err(|s| s.message().to_owned())? {
                    Ok(Outcome::Sealed { highest, held_locks }) => reports.push(rpb::ReportSealedRequest {
                        ns: shard.ns.to_string(),
                        shard: shard.shard.to_string(),
                        epoch: epoch.0,
                        highest_token: highest.map_or(0, |t| t.0),
                        held_locks: held_locks.iter().map(ToString::to_string).collect(),
                    }),
                    other => warn!(shard = %shard, outcome = ?other, "could not seal a draining shard"),
                }
            }
        }
    }
    // Read before the term is taken: the state is never read under the term.
    let delays: HashMap<ShardKey, Duration> = cell
        .group
        .state()
        .read(|m| listed.iter().map(|l| (l.shard.clone(), Duration::from_millis(m.state().namespace(&l.shard.ns).map_or(0, |c| c.lock_delay_ms)))).collect());
    cell.hooks
        .door_in(term, |t| {
            if let Some(lease) = t.ownership() {
                lease.renewed(sent, Instant::now(), lease_len, &listed, |key| delays.get(key).copied().unwrap_or_default());
            }
        })
        .map_err(|s| s.message().to_owned())?;
    for r in reports {
        let (shard, epoch) = (format!("{}/{}", r.ns, r.shard), r.epoch);
        match link.report_sealed(r).await {
            Ok(_) => info!(shard, epoch, "seal reported: the shard moves on"),
            Err(e) => warn!(shard, epoch, error = %e, "seal not reported; retried at the next renewal"),
        }
    }
    let now_served = cell.group.state().read(|m| served(m.state().shards()));
    let unrecorded = listed.iter().filter(|l| !l.adopted && !l.draining).any(|l| now_served.contains(&(l.shard.clone(), l.epoch)));
    let renew = if answer_renew.is_zero() { lease_len / 3 } else { answer_renew.min(lease_len / 3) };
    Ok(Renewed { renew, unrecorded })
}

fn listed_from(s: rpb::OwnedShard) -> Result<Listed, String> {
    let shard = shard_key(s.ns, s.shard).map_err(|e| format!("registry listed a bad shard: {e:?}"))?;
    let delayed_locks =
        s.delayed_locks.into_iter().map(LockName::new).collect::<Result<Vec<_>, _>>().map_err(|e| format!("registry listed a bad lock name: {e}"))?;
    Ok(Listed { shard, epoch: Epoch(s.epoch), draining: s.draining, delayed_locks, previous_unsealed: s.previous_unsealed, adopted: s.adopted })
}
