//! Forming the playground and waiting for it: every wait polls a condition (RaftAdmin
//! answers, a leader is known, /readyz says 200) under a deadline, and fails at once
//! with the log's tail if the process it waits for has exited.

use super::layout::{Layout, NodeSpec};
use super::supervisor::Supervisor;
use crate::remote::{raft_admin, raft_metrics};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::raft::v1 as rpb;
use holdfast_proto::registry::v1 as gpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Channel, Transport};
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tracing::info;

/// Long enough for 15 processes to start and elect on a 2-core machine.
pub const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

pub const DEMO_NS: &str = "demo";
pub const DEMO_SHARD: &str = "default";

/// Polls `probe` until it yields a value, `name` exits, or [`WAIT`] passes.
pub async fn until<T, F, Fut>(sup: &Supervisor, name: &str, what: &str, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = Instant::now() + WAIT;
    loop {
        let last = match probe().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if let Some(status) = sup.exited(name) {
            let log = sup.procs().iter().find(|p| p.name == name).map(|p| p.log.clone()).unwrap_or_default();
            return Err(format!("{name} exited ({status}) while waiting for {what}; last lines of {}:\n{}", log.display(), tail(&log, 10)));
        }
        if Instant::now() >= end {
            return Err(format!("{what}: not after {WAIT:?} (last: {last})"));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Forms a Raft group (registry or cell) from `nodes` unless it already has a log, and
/// waits until a leader is known. Returns the leader's client address.
pub async fn form_group(sup: &Supervisor, t: &Transport, what: &str, nodes: &[&NodeSpec]) -> Result<String, String> {
    let mut formed = false;
    for n in nodes {
        let m = until(sup, &n.name, &format!("{} to answer RaftAdmin on {}", n.name, n.raft), || raft_metrics(t, &n.raft)).await?;
        formed |= m.has_log;
    }
    if !formed {
        let members = nodes.iter().map(|n| rpb::Member { node_id: n.node_id, raft_addr: n.raft.clone(), client_addr: n.client.clone() }).collect();
        info!(group = what, "initializing");
        raft_admin(t, &nodes[0].raft).await?.initialize(rpb::InitializeRequest { members }).await.map_err(|s| format!("initialize {what}: {}", s.message()))?;
    }
    until(sup, &nodes[0].name, &format!("{what} to elect a leader"), || async {
        for n in nodes {
            if let Ok(m) = raft_metrics(t, &n.raft).await {
                if m.has_leader && !m.leader_client_addr.is_empty() {
                    return Ok(m.leader_client_addr);
                }
            }
        }
        Err("no leader yet".to_owned())
    })
    .await
}

async fn registry_client(t: &Transport, leader: &str) -> Result<RegistryServiceClient<Channel>, String> {
    Ok(RegistryServiceClient::new(crate::remote::connect(t, leader).await?))
}

/// Runs a registry write until it succeeds or reports the record already exists
/// (a first start interrupted half-way is simply run again).
async fn ensure<F, Fut, T>(sup: &Supervisor, layout: &Layout, what: &str, mut call: F) -> Result<(), String>
where
    F: FnMut(RegistryServiceClient<Channel>) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let voters: Vec<&NodeSpec> = layout.registry_nodes().collect();
    let end = Instant::now() + WAIT;
    loop {
        let attempt = async {
            let t = layout.transport()?;
            let leader = form_leader(t, &voters).await?;
            match call(registry_client(t, &leader).await?).await {
                Ok(_) => Ok(()),
                Err(s) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::AlreadyExists) => Ok(()),
                Err(s) => Err(s.message().to_owned()),
            }
        };
        match attempt.await {
            Ok(()) => break,
            Err(e) if Instant::now() >= end => return Err(format!("{what}: not after {WAIT:?} (last: {e})")),
            Err(_) => {}
        }
        if let Some((name, status)) = voters.iter().find_map(|v| sup.exited(&v.name).map(|s| (&v.name, s))) {
            return Err(format!("{name} exited ({status}) while waiting for {what}"));
        }
        tokio::time::sleep(POLL).await;
    }
    info!(record = %what, "in the registry");
    Ok(())
}

async fn form_leader(t: &Transport, voters: &[&NodeSpec]) -> Result<String, String> {
    for n in voters {
        if let Ok(m) = raft_metrics(t, &n.raft).await {
            if m.has_leader && !m.leader_client_addr.is_empty() {
                return Ok(m.leader_client_addr);
            }
        }
    }
    Err("no registry leader".into())
}

/// The registry's records on a first start: regions, cells (with their members'
/// addresses), and the demo namespace with its shard on the first region's cell.
pub async fn records(sup: &Supervisor, layout: &Layout) -> Result<(), String> {
    for r in &layout.regions {
        let region = r.name.clone();
        ensure(sup, layout, &format!("region {region}"), |mut c| {
            let region = region.clone();
            async move { c.create_region(gpb::CreateRegionRequest { region }).await }
        })
        .await?;
        let req = gpb::RegisterCellRequest {
            cell: r.cell.name.clone(),
            region: r.name.clone(),
            members: r.cell.nodes.iter().map(|n| gpb::CellMember { node_id: n.node_id, client_addr: n.client.clone(), raft_addr: n.raft.clone() }).collect(),
        };
        ensure(sup, layout, &format!("cell {} in {}", r.cell.name, r.name), |mut c| {
            let req = req.clone();
            async move { c.register_cell(req).await }
        })
        .await?;
    }
    let config = apb::NamespaceConfig {
        name: DEMO_NS.into(),
        owner: "holdfast-dev".into(),
        intent: pb::Intent::Correctness as i32,
        posture: pb::Posture::FailClosed as i32,
        // The tour's steps follow each other at once (an expired holder's lock is free
        // for the next command): no lock-delay, said explicitly. Unset would be 5 s.
        lock_delay_ms: Some(0),
        ..Default::default()
    };
    ensure(sup, layout, &format!("namespace {DEMO_NS}"), |mut c| {
        let config = config.clone();
        async move { c.create_namespace(gpb::CreateNamespaceRequest { config: Some(config) }).await }
    })
    .await?;
    let cell = layout.regions[0].cell.name.clone();
    ensure(sup, layout, &format!("shard {DEMO_NS}/{DEMO_SHARD} on {cell}"), |mut c| {
        let cell = cell.clone();
        async move { c.place_shard(gpb::PlaceShardRequest { ns: DEMO_NS.into(), shard: DEMO_SHARD.into(), cell }).await }
    })
    .await
}

/// The HTTP status of `GET path` on `addr`, over a bare HTTP/1.1 connection (TLS
/// when the playground has it).
pub async fn http_status(t: &Transport, addr: &str, path: &str) -> Result<u16, String> {
    let work = async {
        let mut s = t.stream(addr).await.map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&head);
        text.get(9..12).and_then(|c| c.parse().ok()).ok_or_else(|| format!("not an HTTP answer: {text:?}"))
    };
    tokio::time::timeout(Duration::from_secs(3), work).await.map_err(|_| "no answer within 3s".to_owned())?
}

/// Waits until every gateway's /readyz answers 200 (it has listed placement and, with
/// TLS, fetched the access policy).
pub async fn gateways_ready(sup: &Supervisor, layout: &Layout) -> Result<(), String> {
    for r in &layout.regions {
        let g = &r.gateway;
        until(sup, &g.name, &format!("{} /readyz", g.name), || async {
            match http_status(layout.transport()?, &g.http, "/readyz").await? {
                200 => Ok(()),
                other => Err(format!("HTTP {other}")),
            }
        })
        .await?;
    }
    Ok(())
}

/// Waits until every gateway serves the demo shard: a describe (a read, no state left
/// behind) answers 200 once the gateway knows the owning cell's members and that cell
/// has adopted the shard. /readyz alone is not enough on a first start: a gateway lists
/// an empty placement before the records exist.
pub async fn demo_shard_served(sup: &Supervisor, layout: &Layout) -> Result<(), String> {
    let path = format!("/v1/locks/{DEMO_NS}/{DEMO_SHARD}/holdfast-dev-probe");
    for r in &layout.regions {
        let g = &r.gateway;
        until(sup, &g.name, &format!("{} to serve {DEMO_NS}/{DEMO_SHARD}", g.name), || async {
            match http_status(layout.transport()?, &g.http, &path).await? {
                200 => Ok(()),
                other => Err(format!("HTTP {other}")),
            }
        })
        .await?;
    }
    Ok(())
}

/// `--once`: a session and a lock through the first region's gateway (gRPC), retried
/// while the shard is being adopted. Returns the token.
pub async fn take_demo_lock(sup: &Supervisor, layout: &Layout) -> Result<u64, String> {
    let g = &layout.regions[0].gateway;
    let shard = Some(pb::ShardRef::named(DEMO_NS, DEMO_SHARD));
    let session = until(sup, &g.name, "a session through the gateway", || async {
        let ch = crate::remote::connect(layout.transport()?, &g.grpc).await?;
        let req = pb::CreateSessionRequest { shard: shard.clone(), ttl_ms: 10_000, client_label: "holdfast dev --once".into() };
        LockServiceClient::new(ch).create_session(req).await.map(|r| r.into_inner().session_id).map_err(|s| s.message().to_owned())
    })
    .await?;
    let request_id = format!("dev-once-{}", std::process::id());
    until(sup, &g.name, "a lock through the gateway", || async {
        let ch = crate::remote::connect(layout.transport()?, &g.grpc).await?;
        let req = pb::AcquireRequest {
            shard: shard.clone(),
            name: "dev-once".into(),
            session_id: session,
            mode: pb::Mode::Exclusive as i32,
            wait_timeout_ms: 5_000,
            request_id: request_id.clone(),
            value: b"holdfast dev --once".to_vec(),
        };
        LockServiceClient::new(ch).acquire(req).await.map(|r| r.into_inner().token).map_err(|s| s.message().to_owned())
    })
    .await
}
