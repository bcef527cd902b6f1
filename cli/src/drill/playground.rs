//! A running playground as `holdfast dev` describes it in `endpoints.json`, and the
//! registry reached through any of its gateways.

use crate::dev::endpoints::{CellEndpoints, Endpoints, RegionEndpoints};
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Budget, CallError, Channel, Hints, Upstream};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A Raft node of the playground (a cell node or a registry voter).
pub type Node = crate::dev::endpoints::NodeEndpoints;

/// A region: its name, its processes (endpoints.json), and its port on the bridge
/// (`--netns` only).
#[derive(Debug, Clone)]
pub struct Region {
    pub name: String,
    pub host_veth: Option<String>,
    endpoints: RegionEndpoints,
}

impl std::ops::Deref for Region {
    type Target = RegionEndpoints;
    fn deref(&self) -> &RegionEndpoints {
        &self.endpoints
    }
}

#[derive(Debug, Clone)]
pub struct Playground {
    pub data_dir: PathBuf,
    pub supervisor_pid: u32,
    /// In the playground's order (east first).
    pub regions: Vec<Region>,
    /// How the command line calls it: root's certificate, or plaintext.
    pub tls: crate::remote::ClientTls,
}

impl Playground {
    /// Reads `<data-dir>/endpoints.json`; it exists only while the playground is up.
    /// The first load of a process also sets how the drill calls the playground (its
    /// root certificate, or plaintext): a drill process drills one playground.
    pub fn load(data_dir: &Path) -> Result<Playground, String> {
        let e = Endpoints::read(data_dir)?;
        let tls = e.client_tls();
        crate::remote::transport(&tls)?;
        let regions = e
            .regions
            .iter()
            .map(|(name, r)| Region {
                name: name.clone(),
                host_veth: e.netns.as_ref().and_then(|n| n.regions.get(name)).map(|n| n.host_veth.clone()),
                endpoints: r.clone(),
            })
            .collect();
        Ok(Playground { data_dir: data_dir.to_owned(), supervisor_pid: e.supervisor_pid, regions, tls })
    }

    pub fn region(&self, name: &str) -> Result<&Region, String> {
        self.regions
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| format!("no region {name:?} in this playground (regions: {})", self.region_names().join(", ")))
    }

    pub fn region_names(&self) -> Vec<String> {
        self.regions.iter().map(|r| r.name.clone()).collect()
    }

    pub fn cell(&self, cell: &str) -> Result<(&Region, &CellEndpoints), String> {
        self.regions
            .iter()
            .flat_map(|r| r.cells.iter().map(move |c| (r, c)))
            .find(|(_, c)| c.cell == cell)
            .ok_or_else(|| format!("no cell {cell:?} in this playground"))
    }

    /// Gateway gRPC addresses, `first`'s region first.
    pub fn gateways(&self, first: Option<&str>) -> Vec<String> {
        let mut rs: Vec<&Region> = self.regions.iter().collect();
        rs.sort_by_key(|r| Some(r.name.as_str()) != first);
        rs.iter().map(|r| r.gateway.grpc.clone()).collect()
    }

    pub fn registry(&self) -> Reg {
        Reg::new(self.gateways(None))
    }
}

/// The registry, through whichever gateway answers: a region cut off does not stop
/// an SRE (or a drill) from reaching the registry through the others. (The wire edge's
/// caller: a gateway that does not answer is skipped; an answer, even a refusal, is
/// final.)
#[derive(Debug, Clone)]
pub struct Reg {
    gateways: Arc<Upstream>,
}

/// How this process calls the playground it loaded (set by the first
/// [`Playground::load`]; `ClientTls::default()` is never what decides it).
pub fn transport() -> Result<&'static holdfast_rpc::Transport, tonic::Status> {
    crate::remote::transport(&crate::remote::ClientTls::default()).map_err(tonic::Status::unavailable)
}

/// One connection to `addr`, now.
pub async fn channel(addr: &str) -> Result<Channel, tonic::Status> {
    crate::remote::connect(transport()?, addr).await.map_err(tonic::Status::unavailable)
}

impl Reg {
    pub fn new(gateways: Vec<String>) -> Reg {
        let t = transport().expect("a drill calls the registry of a playground it loaded first");
        Reg { gateways: Arc::new(Upstream::new(t, gateways, Hints::Members)) }
    }

    /// Sends `req` through the first gateway that answers, in the trace of the current
    /// span when traces are exported (a drill's steps are spans).
    pub async fn call<R, T, F, Fut>(&self, req: R, f: F) -> Result<T, tonic::Status>
    where
        R: Clone,
        F: Fn(RegistryServiceClient<Channel>, tonic::Request<R>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let budget = Budget::per_attempt(Duration::from_secs(5));
        let ctx = holdfast_rpc::CallContext::default();
        self.gateways.call(budget, |ch| f(RegistryServiceClient::new(ch), ctx.request(req.clone()))).await.map(|c| c.value).map_err(CallError::into_status)
    }

    pub async fn list_shards(&self) -> Result<rpb::ListShardsResponse, tonic::Status> {
        self.call(rpb::ListShardsRequest::default(), |mut c, r| async move { c.list_shards(r).await }).await
    }

    pub async fn list_cells(&self) -> Result<Vec<rpb::Cell>, tonic::Status> {
        self.call(rpb::ListCellsRequest::default(), |mut c, r| async move { c.list_cells(r).await }).await.map(|r| r.cells)
    }

    /// The shard's owner; `None` if the registry does not know it (or did not answer).
    pub async fn owner(&self, ns: &str, shard: &str) -> Option<rpb::ShardOwner> {
        let req = rpb::GetOwnerRequest { ns: ns.to_owned(), shard: shard.to_owned(), fresh: true };
        self.call(req, |mut c, r| async move { c.get_owner(r).await }).await.ok().and_then(|r| r.owner)
    }

    pub async fn move_shard(&self, req: rpb::MoveShardRequest) -> Result<rpb::MoveShardResponse, tonic::Status> {
        self.call(req, |mut c, r| async move { c.move_shard(r).await }).await
    }
}
