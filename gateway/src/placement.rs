//! The gateway's cached view of placement: which cell serves each shard at which
//! epoch, the members of every cell, and every namespace's config. Kept fresh by the
//! registry's ownership watch (list, then watch from the listed revision, so nothing
//! falls between); refreshed for one shard on demand when a cell says the gateway's
//! view is stale. Cells and namespaces, which the watch does not carry, are re-listed
//! every few seconds.

use holdfast_core::metric_names as m;
use holdfast_core::{NamespaceConfig, NamespaceName, ShardKey};
use holdfast_proto::convert::{namespace_from, shard_key};
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Budget, CallError, CancellationToken, Hints, Tasks, Transport, Upstream};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How often cells and namespaces are listed again.
const RELIST: Duration = Duration::from_secs(3);
/// Pause before the watch is opened again after it broke.
const REWATCH: Duration = Duration::from_millis(500);
/// At most one listing of namespaces on demand (for a name not in the cache) per this
/// interval: callers naming random namespaces queue for their turn instead of making
/// the gateway hammer the registry. A namespace created a moment ago is still found.
const ON_DEMAND_EVERY: Duration = Duration::from_millis(250);

/// Counts one placement read from the registry.
fn refreshed<T>(scope: &'static str, r: &Result<T, CallError>) {
    let result = if r.is_ok() { "ok" } else { "error" };
    metrics::counter!(m::GATEWAY_PLACEMENT_REFRESHES, "scope" => scope, "result" => result).increment(1);
}

/// Where one shard lives, as far as this gateway knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub region: String,
    pub cell: String,
    pub epoch: u32,
    /// A planned move away is under way: new acquires get `MOVING`.
    pub draining: bool,
    /// The registry's record, as `GetOwner` answers it from this cache.
    pub record: rpb::ShardOwner,
}

#[derive(Debug, Default)]
struct View {
    shards: HashMap<ShardKey, Owner>,
    cells: HashMap<String, Arc<Upstream>>,
    namespaces: HashMap<NamespaceName, NamespaceConfig>,
    /// The registry revision the shard view reflects.
    revision: u64,
    /// At least one full listing has succeeded.
    ready: bool,
}

/// The cache, shared by every request handler.
#[derive(Debug)]
pub struct Placement {
    transport: Transport,
    registry: Upstream,
    view: RwLock<View>,
    /// When the last on-demand namespace listing started; held across a listing, so
    /// lookups of unknown names take turns.
    on_demand: tokio::sync::Mutex<Option<Instant>>,
}

fn owner_from(o: &rpb::ShardOwner) -> Owner {
    let draining = o.state == rpb::ShardState::Moving as i32 && o.planned;
    Owner { region: o.region.clone(), cell: o.cell.clone(), epoch: o.epoch, draining, record: o.clone() }
}

impl Placement {
    /// A cache that asks the registry at `registry` (client addresses, followed to
    /// its leader among them only).
    pub fn new(transport: &Transport, registry: Vec<String>) -> Arc<Placement> {
        Arc::new(Placement {
            transport: transport.clone(),
            registry: Upstream::new(transport, registry, Hints::Members),
            view: RwLock::new(View::default()),
            on_demand: tokio::sync::Mutex::new(None),
        })
    }

    pub fn registry(&self) -> &Upstream {
        &self.registry
    }

    /// The bound of one registry call.
    fn budget(&self) -> Budget {
        Budget::per_attempt(self.transport.options().request_timeout())
    }

    /// Has the gateway listed placement at least once? (`/readyz`)
    pub fn ready(&self) -> bool {
        self.view.read().expect("view lock").ready
    }

    pub fn owner(&self, key: &ShardKey) -> Option<Owner> {
        self.view.read().expect("view lock").shards.get(key).cloned()
    }

    /// Where `key` lives as this cache knows it, with the ownership revision the cache
    /// has followed up to (a watch from it misses nothing after this answer).
    pub fn owner_at(&self, key: &ShardKey) -> Option<(rpb::ShardOwner, u64)> {
        let v = self.view.read().expect("view lock");
        v.shards.get(key).map(|o| (o.record.clone(), v.revision))
    }

    pub fn namespace(&self, ns: &NamespaceName) -> Option<NamespaceConfig> {
        self.view.read().expect("view lock").namespaces.get(ns).cloned()
    }

    /// A namespace this gateway has not seen yet (created a moment ago): ask the
    /// registry before calling it unknown, at most once per [`ON_DEMAND_EVERY`].
    pub async fn namespace_or_refresh(&self, ns: &NamespaceName) -> Option<NamespaceConfig> {
        if let Some(c) = self.namespace(ns) {
            return Some(c);
        }
        let mut last = self.on_demand.lock().await;
        // Another caller's listing, while this one waited its turn, may have found it.
        if let Some(c) = self.namespace(ns) {
            return Some(c);
        }
        if let Some(t) = *last {
            tokio::time::sleep_until(t + ON_DEMAND_EVERY).await;
        }
        *last = Some(Instant::now());
        if let Err(e) = self.list_namespaces().await {
            debug!(error = %e, "listing namespaces failed");
        }
        self.namespace(ns)
    }

    pub fn cell(&self, cell: &str) -> Option<Arc<Upstream>> {
        self.view.read().expect("view lock").cells.get(cell).cloned()
    }

    /// Asks the registry where `key` lives now (a cell said our view is stale).
    pub async fn refresh_shard(&self, key: &ShardKey) -> Result<Owner, CallError> {
        let req = rpb::GetOwnerRequest { ns: key.ns.to_string(), shard: key.shard.to_string(), fresh: true };
        let r = self
            .registry
            .call(self.budget(), |ch| {
                let req = req.clone();
                async move { RegistryServiceClient::new(ch).get_owner(req).await }
            })
            .await;
        refreshed("shard", &r);
        let r = r?.value;
        let o = r.owner.ok_or_else(|| CallError::Unreachable("the registry answered without an owner".into()))?;
        let owner = owner_from(&o);
        let known_cell = {
            let mut v = self.view.write().expect("view lock");
            v.shards.insert(key.clone(), owner.clone());
            v.cells.contains_key(&owner.cell)
        };
        if !known_cell {
            self.list_cells().await?;
        }
        Ok(owner)
    }

    async fn list_cells(&self) -> Result<(), CallError> {
        let cells = self
            .registry
            .call(self.budget(), |ch| async move { RegistryServiceClient::new(ch).list_cells(rpb::ListCellsRequest { region: String::new() }).await })
            .await?
            .value
            .cells;
        let mut v = self.view.write().expect("view lock");
        for c in cells {
            let members: Vec<String> = c.members.iter().map(|m| m.client_addr.clone()).collect();
            match v.cells.get(&c.cell) {
                Some(up) => up.set_members(members),
                None => {
                    v.cells.insert(c.cell.clone(), Arc::new(Upstream::new(&self.transport, members, Hints::Members)));
                }
            }
        }
        Ok(())
    }

    async fn list_namespaces(&self) -> Result<(), CallError> {
        let configs = self
            .registry
            .call(self.budget(), |ch| async move { RegistryServiceClient::new(ch).list_namespaces(rpb::ListNamespacesRequest {}).await })
            .await?
            .value
            .configs;
        let parsed: HashMap<NamespaceName, NamespaceConfig> = configs.into_iter().filter_map(|c| namespace_from(c).ok()).map(|c| (c.name.clone(), c)).collect();
        self.view.write().expect("view lock").namespaces = parsed;
        Ok(())
    }

    /// Lists every shard; returns the revision the listing reflects.
    async fn list_shards(&self) -> Result<u64, CallError> {
        let r =
            self.registry.call(self.budget(), |ch| async move { RegistryServiceClient::new(ch).list_shards(rpb::ListShardsRequest::default()).await }).await;
        refreshed("all", &r);
        let r = r?.value;
        let mut shards = HashMap::new();
        for o in &r.shards {
            if let Ok(key) = shard_key(o.ns.clone(), o.shard.clone()) {
                shards.insert(key, owner_from(o));
            }
        }
        let mut v = self.view.write().expect("view lock");
        v.shards = shards;
        v.revision = r.revision;
        v.ready = true;
        Ok(r.revision)
    }

    /// Keeps the view fresh under `tasks`: the ownership watch (list everything, then
    /// follow the watch from the listed revision; on any failure, pause and start
    /// over), and a re-listing of cells and namespaces every few seconds.
    pub fn follow(self: &Arc<Self>, tasks: &Tasks) {
        let me = self.clone();
        tasks.spawn("placement relister", async move {
            // When the registry last answered a listing: its age is the gauge an alert
            // reads ("registry unreachable"), refreshed every round.
            let mut answered: Option<Instant> = None;
            let started = Instant::now();
            loop {
                let cells = me.list_cells().await;
                let namespaces = me.list_namespaces().await;
                match (&cells, &namespaces) {
                    (Ok(()), Ok(())) => answered = Some(Instant::now()),
                    (Err(e), _) | (_, Err(e)) => debug!(error = %e, "listing placement failed"),
                }
                let age = answered.unwrap_or(started).elapsed();
                metrics::gauge!(m::GATEWAY_PLACEMENT_AGE).set(age.as_secs_f64());
                tokio::time::sleep(RELIST).await;
            }
        });
        tasks.spawn("ownership watch", self.clone().watch(tasks.stop_token()));
    }

    async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            tokio::select! {
                r = self.list_and_watch() => warn!(error = %r, "the ownership watch ended; listing again"),
                _ = shutdown.cancelled() => break,
            }
            tokio::select! {
                _ = tokio::time::sleep(REWATCH) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }

    /// Returns why it stopped.
    async fn list_and_watch(&self) -> String {
        if let Err(e) = self.list_cells().await {
            return format!("listing cells: {e}");
        }
        if let Err(e) = self.list_namespaces().await {
            return format!("listing namespaces: {e}");
        }
        let from = match self.list_shards().await {
            Ok(r) => r,
            Err(e) => return format!("listing shards: {e}"),
        };
        info!(revision = from, "placement listed; following the ownership watch");
        let req = rpb::WatchOwnershipRequest { from_revision: from, ns: String::new() };
        // The watch is a stream: open it on whichever member answers, then read it.
        let stream = self
            .registry
            .call(self.budget(), |ch| {
                let req = req.clone();
                async move { RegistryServiceClient::new(ch).watch_ownership(req).await }
            })
            .await;
        let mut stream = match stream {
            Ok(s) => s.value,
            Err(e) => return format!("opening the watch: {e}"),
        };
        loop {
            match stream.message().await {
                Ok(Some(ev)) => self.apply(&ev),
                Ok(None) => return "the registry closed the watch".into(),
                Err(s) => return format!("watch: {}", s.message()),
            }
        }
    }

    fn apply(&self, ev: &rpb::OwnershipEvent) {
        let Ok(key) = shard_key(ev.ns.clone(), ev.shard.clone()) else { return };
        let owner = owner_from(&holdfast_proto::convert::owner_after(ev));
        let mut v = self.view.write().expect("view lock");
        if ev.revision > v.revision {
            v.revision = ev.revision;
        }
        debug!(shard = %key, cell = %owner.cell, epoch = owner.epoch, "ownership changed");
        v.shards.insert(key, owner);
    }
}
