//! The simulation with moves (`Options::moves`): two cells in two regions, the
//! registry, and a gateway, all the product's own servers. The admin host writes the
//! registry's records, places the shard on the first cell, then moves it back and
//! forth, planned or unplanned as the seed says, while the workers take the lock
//! through the gateway. It also watches the registry's view of the shard's owner
//! (`OwnerObserved` lines), which the checker holds every grant against, and polls
//! each cell for the shards it serves (`CellServing` intervals: no two cells may serve
//! the shard at one epoch).

use crate::workload::{namespace, Ready, NS, SHARD};
use crate::{now_ms, Dice, Layout, Log, NodeSpec, CLIENT_PORT, GATEWAY_HTTP_PORT, GATEWAY_PORT};
use holdfast_drills::observe::{OwnerSeen, Owners, Serving};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Budget, Hints, Transport, Upstream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The two cells: name, region.
pub(crate) const CELLS: [(&str, &str); 2] = [("sim-a", "east"), ("sim-b", "west")];
/// The gateway's (and so the workers') region: the first cell's.
pub(crate) const GATEWAY_REGION: &str = CELLS[0].1;

/// How often the admin host reads the shard's owner.
const OWNER_POLL: Duration = Duration::from_millis(50);
/// How often it asks each cell what it serves (every so many owner polls: 300 ms).
const SERVING_EVERY: u64 = 6;

fn registry_config(spec: &NodeSpec) -> holdfast_registry::RegistryConfig {
    holdfast_registry::RegistryConfig {
        node_id: spec.id,
        region: "sim".into(),
        data_dir: format!("/sim/{}", spec.host()).into(),
        raft_addr: format!("0.0.0.0:{}", crate::RAFT_PORT),
        client_addr: format!("0.0.0.0:{CLIENT_PORT}"),
        advertise_client_addr: None,
        metrics_addr: None,
        heartbeat_ms: 100,
        // One value per node, drawn from the seed (see the cells' config).
        election_min_ms: spec.election_min_ms,
        election_max_ms: spec.election_min_ms + 1,
        // Short, so the cut-off and stale-route faults see leases run out in a seed.
        ownership_lease_ms: 3_000,
        ownership_renew_ms: 1_000,
        ownership_grace_ms: 200,
        snapshot_every_logs: 200,
        shutdown_deadline_ms: 2_000,
        transport: Default::default(),
        tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
    }
}

/// Starts a registry node on its host (again after a crash: same memory disk).
pub(crate) async fn run_registry_node(spec: NodeSpec) -> turmoil::Result {
    let (raft, client, transport) = spec.listen().await?;
    let server = holdfast_registry::RegistryServer::start_simulated(&registry_config(&spec), raft, client, transport, spec.disk.clone()).await?;
    spec.initialize(&server).await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// Starts the gateway on its host.
pub(crate) async fn run_gateway(host: String, registry: Vec<String>) -> turmoil::Result {
    let cfg = holdfast_gateway::GatewayConfig {
        region: GATEWAY_REGION.into(),
        registry_endpoints: registry.join(","),
        grpc_addr: format!("0.0.0.0:{GATEWAY_PORT}"),
        http_addr: format!("0.0.0.0:{GATEWAY_HTTP_PORT}"),
        shutdown_deadline_ms: 2_000,
        transport: Default::default(),
        tls: holdfast_rpc::TlsOptions { insecure: true, certs_dir: None },
    };
    let grpc = crate::net::listen(&host, GATEWAY_PORT).await?;
    let http = crate::net::listen(&host, GATEWAY_HTTP_PORT).await?;
    let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
    let _server = holdfast_gateway::GatewayServer::start_simulated(&cfg, grpc, http, transport).await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// The registry's client: its leader, found by the wire edge's leader-following.
struct Registry(Upstream);

impl Registry {
    fn new(layout: &Layout) -> Registry {
        let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
        Registry(Upstream::new(&transport, layout.registry_endpoints(), Hints::Members))
    }

    /// One call, retried by the wire edge within a few seconds; `Err` is the last
    /// status.
    async fn call<Req, T, F, Fut>(&self, req: Req, f: F) -> Result<T, tonic::Status>
    where
        Req: Clone,
        F: Fn(RegistryServiceClient<holdfast_rpc::Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let budget = Budget::per_attempt(Duration::from_secs(2)).until(tokio::time::Instant::now() + Duration::from_secs(6));
        self.0.call(budget, |ch| f(RegistryServiceClient::new(ch), req.clone())).await.map(|c| c.value).map_err(|e| e.into_status())
    }

    /// Calls until the registry answers, or it answered "already exists" (a retry of
    /// a write that was applied).
    async fn ensure<Req, T, F, Fut>(&self, what: &str, req: Req, f: F) -> Result<(), String>
    where
        Req: Clone,
        F: Fn(RegistryServiceClient<holdfast_rpc::Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        for _ in 0..100 {
            match self.call(req.clone(), &f).await {
                Ok(_) => return Ok(()),
                Err(s) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::AlreadyExists) => return Ok(()),
                Err(s) => tracing::debug!(what, status = %s, "registry setup"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("{what}: the registry did not take it"))
    }

    async fn owner(&self) -> Result<rpb::ShardOwner, tonic::Status> {
        let req = rpb::GetOwnerRequest { ns: NS.into(), shard: SHARD.into(), fresh: true };
        let r = self.call(req, |mut c, r| async move { c.get_owner(r).await }).await?;
        r.owner.ok_or_else(|| tonic::Status::internal("GetOwner answered no owner"))
    }
}

/// The registry's records: both regions and cells, the namespace, the shard on the
/// first cell.
async fn setup(reg: &Registry, layout: &Layout, lock_delay_ms: Option<u64>) -> Result<(), String> {
    for cell in &layout.cells {
        let region = cell.region.to_owned();
        reg.ensure(&format!("region {region}"), rpb::CreateRegionRequest { region: region.clone() }, |mut c, r| async move { c.create_region(r).await })
            .await?;
        let members = cell
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| rpb::CellMember { node_id: i as u64 + 1, client_addr: format!("{h}:{CLIENT_PORT}"), raft_addr: format!("{h}:{}", crate::RAFT_PORT) })
            .collect();
        let req = rpb::RegisterCellRequest { cell: cell.name.into(), region, members };
        reg.ensure(&format!("cell {}", cell.name), req, |mut c, r| async move { c.register_cell(r).await }).await?;
    }
    let req = rpb::CreateNamespaceRequest { config: Some(namespace(lock_delay_ms)) };
    reg.ensure("namespace", req, |mut c, r| async move { c.create_namespace(r).await }).await?;
    let req = rpb::PlaceShardRequest { ns: NS.into(), shard: SHARD.into(), cell: layout.cells[0].name.into() };
    reg.ensure("placement", req, |mut c, r| async move { c.place_shard(r).await }).await
}

/// What the admin host last saw of the shard's owner; records each change.
struct Watch {
    log: Log,
    owners: Owners,
    layout: Layout,
    seen: Option<(String, u32, String)>,
    serving: Serving,
    transport: Transport,
}

impl Watch {
    fn saw(&mut self, o: &rpb::ShardOwner) {
        let now = (o.cell.clone(), o.epoch, o.to_cell.clone());
        if self.seen.as_ref() == Some(&now) {
            return;
        }
        let region = self.layout.cells.iter().find(|c| c.name == o.cell).map_or("unknown", |c| c.region);
        if let Some(line) = self.owners.saw(OwnerSeen { ns: &o.ns, shard: &o.shard, region, cell: &o.cell, epoch: o.epoch, to_cell: &o.to_cell }) {
            self.log.record(line);
        }
        self.seen = Some(now);
    }

    /// Asks each cell (its nodes in turn, until one answers) which shards it serves.
    async fn poll_serving(&mut self) {
        for cell in &self.layout.cells {
            let sent = now_ms();
            for host in &cell.hosts {
                let Ok(ch) = self.transport.channel(&format!("{host}:{CLIENT_PORT}")) else { continue };
                let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(1), CellAdminClient::new(ch).status(apb::CellStatusRequest {})).await else {
                    continue;
                };
                let served: Vec<(String, String, u32)> =
                    r.get_ref().shards.iter().filter(|s| !s.sealed).map(|s| (s.ns.clone(), s.shard.clone(), s.epoch)).collect();
                self.serving.polled(cell.name, sent, now_ms(), &served);
                break;
            }
        }
    }
}

/// The admin host: the registry's records, then a move every few seconds until the
/// workers are done, each started only once the shard is active again; one in four
/// is aborted a moment later if it has not completed by then. The shard's
/// owner is read every 50 ms throughout, the cells' served shards every 300 ms.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn admin(
    layout: &Layout,
    ready: Ready,
    lock_delay_ms: Option<u64>,
    mut dice: Dice,
    owners: Owners,
    log: Log,
    done: Arc<AtomicU64>,
    workers: u64,
) -> Result<(), String> {
    let reg = Registry::new(layout);
    setup(&reg, layout, lock_delay_ms).await?;
    let transport = Transport::over(Default::default(), Arc::new(crate::net::SimNetwork));
    let mut watch = Watch { log: log.clone(), owners, layout: layout.clone(), seen: None, serving: Serving::default(), transport };
    let finished = || done.load(Ordering::Relaxed) >= workers;
    // The workers start once the registry shows the shard placed. The cell adopts it
    // at its next renewal and the gateway routes there once its watch shows it; a
    // session asked for before that fails, and its worker goes on to its next round.
    loop {
        if let Ok(o) = reg.owner().await {
            watch.saw(&o);
            break;
        }
        tokio::time::sleep(OWNER_POLL).await;
    }
    ready.store(true, Ordering::Relaxed);
    let mut next_move = tokio::time::Instant::now() + Duration::from_millis(dice.range(2_000, 6_000));
    // The move to take back, by its epoch, and when.
    let mut abort: Option<(u32, tokio::time::Instant)> = None;
    for poll in 0.. {
        if finished() {
            break;
        }
        tokio::time::sleep(OWNER_POLL).await;
        if poll % SERVING_EVERY == 0 {
            watch.poll_serving().await;
        }
        let Ok(o) = reg.owner().await else { continue };
        watch.saw(&o);
        let active = o.state == rpb::ShardState::Active as i32;
        // A move the SRE takes back (an evacuation reversed): back to the source, at
        // the next epoch if the source already sealed.
        if let Some((epoch, _)) = abort.filter(|(epoch, at)| !active && o.epoch == *epoch && tokio::time::Instant::now() >= *at) {
            abort = None;
            let req = rpb::AbortMoveRequest { ns: NS.into(), shard: SHARD.into(), epoch };
            match reg.call(req, |mut c, r| async move { c.abort_move(r).await }).await {
                Ok(r) => {
                    tracing::info!(epoch, "shard move aborted");
                    if let Some(o) = r.owner {
                        watch.saw(&o);
                    }
                }
                Err(s) => tracing::debug!(status = %s, "AbortMove"),
            }
            continue;
        }
        if !active || tokio::time::Instant::now() < next_move {
            continue;
        }
        let to = layout.cells.iter().find(|c| c.name != o.cell).map_or(CELLS[0].0, |c| c.name);
        // Two moves in three are planned (an evacuation); the third is unplanned (the
        // source is written off, and the move completes once its lease ran out).
        let planned = dice.range(0, 3) != 0;
        let req = rpb::MoveShardRequest { ns: NS.into(), shard: SHARD.into(), to_cell: to.into(), planned, ..Default::default() };
        // One move in four is taken back a while after it started, if still under way.
        let take_back = dice.range(0, 4) == 0;
        let after = Duration::from_millis(dice.range(50, 2_000));
        match reg.call(req, |mut c, r| async move { c.move_shard(r).await }).await {
            Ok(r) => {
                tracing::info!(to, planned, "shard move started");
                if take_back {
                    abort = Some((o.epoch, tokio::time::Instant::now() + after));
                }
                if let Some(o) = r.owner {
                    watch.saw(&o);
                }
            }
            Err(s) => tracing::debug!(status = %s, "MoveShard"),
        }
        next_move = tokio::time::Instant::now() + Duration::from_millis(dice.range(2_000, 6_000));
    }
    for line in std::mem::take(&mut watch.serving).into_events() {
        log.record(line);
    }
    Ok(())
}
