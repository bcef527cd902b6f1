//! A real 3-node cell in this process for the SDK's tests: RocksDB in temp dirs, gRPC on
//! loopback, namespace `pay` shard `default` served at epoch 1 through admin calls (no
//! registry). Only the servers' public API is used; waits are on conditions.

#![allow(dead_code)]

use holdfast_cell::{CellConfig, CellServer};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::TcpListener;

pub const WAIT: Duration = Duration::from_secs(20);

pub use holdfast_testkit::serial;

/// Waits until `f` holds, or fails the test after `WAIT` saying `what`.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !f().await {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct TestCell {
    pub nodes: BTreeMap<u64, CellServer>,
    addrs: BTreeMap<u64, SocketAddr>,
    root: TempDir,
}

impl TestCell {
    /// Nodes 1..=3, formed into a cell serving `pay/default` at epoch 1 with the
    /// given lock-delay.
    pub async fn start(lock_delay_ms: u64) -> TestCell {
        TestCell::start_with(lock_delay_ms, 0).await
    }

    /// [`TestCell::start`], the namespace also ending any hold after `max_hold_ms`
    /// (0: never).
    pub async fn start_with(lock_delay_ms: u64, max_hold_ms: u64) -> TestCell {
        let mut c = TestCell { nodes: BTreeMap::new(), addrs: BTreeMap::new(), root: tempfile::tempdir().unwrap() };
        for id in 1..=3 {
            let dir = c.root.path().join(format!("node-{id}"));
            // The config's own loader (defaults, then these), so new fields with
            // defaults need no change here.
            let cfg = CellConfig::load(
                None,
                &[
                    ("node_id", id.to_string()),
                    ("cell", "sdk".into()),
                    ("data_dir", dir.display().to_string()),
                    ("raft_addr", "127.0.0.1:0".into()),
                    ("client_addr", "127.0.0.1:0".into()),
                    ("heartbeat_ms", "100".into()),
                    // The 2-core test timings of docs/development.md.
                    ("election_min_ms", "1000".into()),
                    ("election_max_ms", "2000".into()),
                    ("checkpoint_interval_ms", "500".into()),
                    ("shutdown_deadline_ms", "5000".into()),
                    ("tls.insecure", "true".into()),
                ],
            )
            .unwrap();
            let raft = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let server = CellServer::start_on(&cfg, raft, client).await.unwrap();
            c.addrs.insert(id, server.client_addr());
            c.nodes.insert(id, server);
        }
        let members = c.nodes.iter().map(|(id, n)| (*id, n.node().clone())).collect();
        c.nodes[&1].initialize(members).await.unwrap();
        let leader = c.leader().await;
        let mut admin = CellAdminClient::new(holdfast_rpc::Transport::insecure().connect(&c.addrs[&leader].to_string()).await.unwrap());
        let config = apb::NamespaceConfig {
            name: "pay".into(),
            owner: "team-pay".into(),
            intent: pb::Intent::Correctness as i32,
            lock_delay_ms: Some(lock_delay_ms),
            max_hold_ms,
            version: 1,
            ..Default::default()
        };
        admin.apply_namespace(apb::ApplyNamespaceRequest { config: Some(config) }).await.unwrap();
        let adopt = apb::AdoptShardRequest { ns: "pay".into(), shard: "default".into(), epoch: 1, delayed_locks: vec![] };
        admin.adopt_shard(adopt).await.unwrap();
        c
    }

    /// Client addresses of every node, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        self.addrs.values().map(ToString::to_string).collect()
    }

    /// The node that leads and runs its lease clock (highest term wins).
    pub async fn leader(&self) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let leading = self.nodes.iter().filter(|(_, n)| n.leads()).map(|(id, n)| (n.metrics().current_term, *id));
            if let Some((_, id)) = leading.max() {
                return id;
            }
            assert!(Instant::now() < deadline, "no leader within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The client address of the node that leads now.
    pub async fn leader_endpoint(&self) -> String {
        self.addrs[&self.leader().await].to_string()
    }

    pub async fn stop_node(&mut self, id: u64) {
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown().await;
        }
    }

    /// The lock's holders `(session, token)` and waiters' request ids, from whichever
    /// node answers a linearizable Describe.
    pub async fn describe(&self, name: &str) -> Option<(Vec<(u64, u64)>, Vec<String>)> {
        for id in self.nodes.keys() {
            let Ok(ch) = holdfast_rpc::Transport::insecure().connect(&self.addrs[id].to_string()).await else { continue };
            let mut c = LockServiceClient::new(ch);
            let req = pb::DescribeRequest { shard: Some(pb::ShardRef { ns: "pay".into(), shard: "default".into(), epoch: 0 }), name: name.into() };
            if let Ok(Ok(d)) = tokio::time::timeout(Duration::from_secs(1), c.describe(req)).await {
                let d = d.into_inner();
                return Some((d.holders.iter().map(|h| (h.session_id, h.token)).collect(), d.waiters.iter().map(|w| w.request_id.clone()).collect()));
            }
        }
        None
    }

    /// BreakLock at the leader (the cell is `--insecure`: anyone may).
    pub async fn break_lock(&self, name: &str) {
        let leader = self.leader().await;
        let mut c = LockServiceClient::new(holdfast_rpc::Transport::insecure().connect(&self.addrs[&leader].to_string()).await.unwrap());
        let req = pb::BreakLockRequest {
            shard: Some(pb::ShardRef { ns: "pay".into(), shard: "default".into(), epoch: 0 }),
            name: name.into(),
            reason: "test".into(),
        };
        c.break_lock(req).await.unwrap();
    }

    pub async fn holders(&self, name: &str) -> Vec<(u64, u64)> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some((holders, _)) = self.describe(name).await {
                return holders;
            }
            assert!(Instant::now() < deadline, "no node answered Describe within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.stop_node(id).await;
        }
    }
}

/// The value of a counter with `ns="pay"` in the process's Prometheus exposition (the
/// cell servers install the recorder; the SDK records through the same facade).
pub fn counter(name: &str) -> f64 {
    let text = holdfast_telemetry::install().render();
    text.lines().filter(|l| l.starts_with(name) && l.contains("ns=\"pay\"")).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// A test double of a cell released before batched renewals, in front of a real cell's
/// leader: it forwards CreateSession and CloseSession, and KeepAlive with each message's
/// `more` dropped, as a server that does not know the field ignores it (it renews the
/// first session and answers without `more`). Everything else is UNIMPLEMENTED.
pub struct PredatesBatching {
    pub addr: SocketAddr,
    pub counts: std::sync::Arc<Counts>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PredatesBatching {
    pub async fn start(upstream: &str) -> PredatesBatching {
        use holdfast_proto::lock::v1::lock_service_server::LockServiceServer;
        let upstream = LockServiceClient::new(holdfast_rpc::Transport::insecure().connect(upstream).await.unwrap());
        let counts = std::sync::Arc::new(Counts::default());
        let double = OldCell { upstream, counts: counts.clone() };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let transport = holdfast_rpc::Transport::insecure();
        let router = transport.grpc_server().add_service(LockServiceServer::new(double));
        tokio::spawn(async move {
            let _ = transport
                .serve_grpc(router, listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        PredatesBatching { addr, counts, stop: Some(stop) }
    }
}

impl Drop for PredatesBatching {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct OldCell {
    upstream: LockServiceClient<holdfast_rpc::Channel>,
    counts: std::sync::Arc<Counts>,
}

/// What the double saw: KeepAlive messages in all, and those that came with a batch
/// in `more`.
#[derive(Default)]
pub struct Counts {
    messages: std::sync::atomic::AtomicU64,
    batched: std::sync::atomic::AtomicU64,
}

impl Counts {
    pub fn messages(&self) -> u64 {
        self.messages.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn batched(&self) -> u64 {
        self.batched.load(std::sync::atomic::Ordering::Relaxed)
    }
}

type Answers<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send>>;

fn not_in_the_double(what: &str) -> tonic::Status {
    tonic::Status::unimplemented(format!("{what}: not in the test double"))
}

#[tonic::async_trait]
impl holdfast_proto::lock::v1::lock_service_server::LockService for OldCell {
    async fn create_session(&self, r: tonic::Request<pb::CreateSessionRequest>) -> Result<tonic::Response<pb::CreateSessionResponse>, tonic::Status> {
        self.upstream.clone().create_session(r.into_inner()).await
    }

    type KeepAliveStream = Answers<pb::KeepAliveResponse>;

    async fn keep_alive(&self, r: tonic::Request<tonic::Streaming<pb::KeepAliveRequest>>) -> Result<tonic::Response<Self::KeepAliveStream>, tonic::Status> {
        use std::sync::atomic::Ordering;
        use tokio_stream::StreamExt;
        let counts = self.counts.clone();
        let requests = r.into_inner().map_while(Result::ok).map(move |mut m| {
            counts.messages.fetch_add(1, Ordering::Relaxed);
            if !m.more.is_empty() {
                counts.batched.fetch_add(1, Ordering::Relaxed);
            }
            m.more.clear();
            m
        });
        let answers = self.upstream.clone().keep_alive(requests).await?.into_inner();
        Ok(tonic::Response::new(Box::pin(answers)))
    }

    async fn close_session(&self, r: tonic::Request<pb::CloseSessionRequest>) -> Result<tonic::Response<pb::CloseSessionResponse>, tonic::Status> {
        self.upstream.clone().close_session(r.into_inner()).await
    }

    async fn acquire(&self, _: tonic::Request<pb::AcquireRequest>) -> Result<tonic::Response<pb::AcquireResponse>, tonic::Status> {
        Err(not_in_the_double("Acquire"))
    }

    async fn release(&self, _: tonic::Request<pb::ReleaseRequest>) -> Result<tonic::Response<pb::ReleaseResponse>, tonic::Status> {
        Err(not_in_the_double("Release"))
    }

    async fn describe(&self, _: tonic::Request<pb::DescribeRequest>) -> Result<tonic::Response<pb::DescribeResponse>, tonic::Status> {
        Err(not_in_the_double("Describe"))
    }

    async fn list(&self, _: tonic::Request<pb::ListRequest>) -> Result<tonic::Response<pb::ListResponse>, tonic::Status> {
        Err(not_in_the_double("List"))
    }

    async fn list_sessions(&self, _: tonic::Request<pb::ListSessionsRequest>) -> Result<tonic::Response<pb::ListSessionsResponse>, tonic::Status> {
        Err(not_in_the_double("ListSessions"))
    }

    type WatchStream = Answers<pb::WatchResponse>;

    async fn watch(&self, _: tonic::Request<pb::WatchRequest>) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(not_in_the_double("Watch"))
    }

    async fn check_token(&self, _: tonic::Request<pb::CheckTokenRequest>) -> Result<tonic::Response<pb::CheckTokenResponse>, tonic::Status> {
        Err(not_in_the_double("CheckToken"))
    }

    async fn break_lock(&self, _: tonic::Request<pb::BreakLockRequest>) -> Result<tonic::Response<pb::BreakLockResponse>, tonic::Status> {
        Err(not_in_the_double("BreakLock"))
    }
}
