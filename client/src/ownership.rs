//! [`OwnershipCache`]: who owns each shard of a namespace, from memory. The cache lists
//! the namespace's shards (`ListShards`, which says the registry revision it reflects),
//! then follows the ownership watch from that revision, so no change falls between the
//! two; when the watch breaks (a gateway restarts, the registry's retained history no
//! longer reaches back) it lists again and resumes. Every change it applies — including
//! the ones it learns by listing again — goes to [`OwnershipCache::changes`].
//!
//! Connect the [`Client`] to gateways: they forward the registry's calls for a caller
//! with the `reader` role in the namespace.

use crate::client::{traced, Client};
use crate::error::Error;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Backoff, Budget};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tracing::debug;

/// Changes kept for a slow reader of [`OwnershipCache::changes`] before it lags.
const CHANGES_KEPT: usize = 1024;

/// Where a shard lives, as the registry last said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub region: String,
    pub cell: String,
    /// Bumped on every transfer; tokens granted at it carry it in their high bits.
    pub epoch: u32,
    /// Set while the shard moves: the cell it goes to.
    pub moving_to: Option<String>,
}

/// One change of a shard's owner, as the cache applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnershipChange {
    pub ns: String,
    pub shard: String,
    pub owner: Owner,
    /// The registry revision of the change (0 when learnt by listing again).
    pub revision: u64,
}

#[derive(Debug)]
struct Shared {
    ns: String,
    owners: RwLock<HashMap<String, Owner>>,
    revision: AtomicU64,
    relists: AtomicU64,
    changes: broadcast::Sender<OwnershipChange>,
    ready: watch::Sender<bool>,
}

impl Shared {
    fn set(&self, shard: &str, owner: Owner, revision: u64) {
        let changed = {
            let mut owners = self.owners.write().unwrap_or_else(|e| e.into_inner());
            owners.insert(shard.to_owned(), owner.clone()).as_ref() != Some(&owner)
        };
        if changed {
            let _ = self.changes.send(OwnershipChange { ns: self.ns.clone(), shard: shard.to_owned(), owner, revision });
        }
    }
}

fn owner_of(region: &str, cell: &str, epoch: u32, state: i32, to_cell: &str) -> Owner {
    let moving = state == rpb::ShardState::Moving as i32 && !to_cell.is_empty();
    Owner { region: region.to_owned(), cell: cell.to_owned(), epoch, moving_to: moving.then(|| to_cell.to_owned()) }
}

/// A namespace's shard owners, kept current in the background (see the module doc).
/// Dropping it stops the watch.
#[derive(Debug)]
pub struct OwnershipCache {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OwnershipCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OwnershipCache {
    /// The owner of `shard`, from memory; `None` if the namespace has no such shard.
    pub fn owner(&self, shard: &str) -> Option<Owner> {
        self.shared.owners.read().unwrap_or_else(|e| e.into_inner()).get(shard).cloned()
    }

    /// Every shard of the namespace with its owner.
    pub fn owners(&self) -> HashMap<String, Owner> {
        self.shared.owners.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The registry revision the cache reflects.
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::SeqCst)
    }

    /// Times the cache listed again after its watch broke.
    pub fn relists(&self) -> u64 {
        self.shared.relists.load(Ordering::SeqCst)
    }

    /// Every change applied from now on.
    pub fn changes(&self) -> broadcast::Receiver<OwnershipChange> {
        self.shared.changes.subscribe()
    }
}

impl Client {
    /// Lists `ns`'s shard owners and follows their changes (see [`OwnershipCache`]).
    /// Returns once the first listing is in.
    pub async fn ownership_cache(&self, ns: &str) -> Result<OwnershipCache, Error> {
        let (ready, mut is_ready) = watch::channel(false);
        let shared = Arc::new(Shared {
            ns: ns.to_owned(),
            owners: RwLock::new(HashMap::new()),
            revision: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            changes: broadcast::channel(CHANGES_KEPT).0,
            ready,
        });
        let first = list(self, &shared).await?;
        let task = tokio::spawn(follow(self.clone(), shared.clone(), first));
        let _ = is_ready.wait_for(|r| *r).await;
        Ok(OwnershipCache { shared, task })
    }
}

/// Lists the namespace's shards into the cache: the revision the listing reflects.
async fn list(client: &Client, s: &Shared) -> Result<u64, Error> {
    let req = rpb::ListShardsRequest { ns: s.ns.clone(), cell: String::new() };
    let budget = Budget::per_attempt(client.config().request_timeout);
    let r = client
        .upstream()
        .call(budget, |ch| {
            let req = traced(req.clone());
            async move { RegistryServiceClient::new(ch).list_shards(req).await }
        })
        .await?
        .value;
    let listed: HashMap<&str, &rpb::ShardOwner> = r.shards.iter().map(|o| (o.shard.as_str(), o)).collect();
    // Shards gone from the listing (none today: shards are never deleted) are dropped.
    s.owners.write().unwrap_or_else(|e| e.into_inner()).retain(|k, _| listed.contains_key(k.as_str()));
    for o in &r.shards {
        s.set(&o.shard, owner_of(&o.region, &o.cell, o.epoch, o.state, &o.to_cell), 0);
    }
    s.revision.store(r.revision, Ordering::SeqCst);
    let _ = s.ready.send(true);
    Ok(r.revision)
}

/// Follows the watch from `from`; lists again and resumes whenever it breaks.
async fn follow(client: Client, s: Arc<Shared>, mut from: u64) {
    let mut backoff = Backoff::new(client.config().retry);
    loop {
        let why = watch_from(&client, &s, from).await;
        debug!(ns = %s.ns, error = %why, "ownership watch ended; listing again");
        tokio::time::sleep(backoff.next_delay().min(Duration::from_secs(2))).await;
        match list(&client, &s).await {
            Ok(r) => {
                from = r;
                s.relists.fetch_add(1, Ordering::SeqCst);
                backoff.reset();
            }
            Err(e) => debug!(ns = %s.ns, error = %e, "listing shards failed; trying again"),
        }
    }
}

/// Applies the watch's events until it ends; returns why.
async fn watch_from(client: &Client, s: &Shared, from: u64) -> String {
    let req = rpb::WatchOwnershipRequest { from_revision: from, ns: s.ns.clone() };
    let budget = Budget::per_attempt(client.config().request_timeout);
    let stream = client
        .upstream()
        .call(budget, |ch| {
            let req = traced(req.clone());
            async move { RegistryServiceClient::new(ch).watch_ownership(req).await }
        })
        .await;
    let mut stream = match stream {
        Ok(c) => c.value,
        Err(e) => return format!("opening the watch: {e}"),
    };
    loop {
        match stream.message().await {
            Ok(Some(ev)) => {
                s.set(&ev.shard, owner_of(&ev.region, &ev.cell, ev.epoch, ev.state, &ev.to_cell), ev.revision);
                s.revision.fetch_max(ev.revision, Ordering::SeqCst);
            }
            Ok(None) => return "the watch was closed".into(),
            Err(e) => return e.message().to_owned(),
        }
    }
}
