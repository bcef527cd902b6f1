//! The gateway in front of real cells and a registry: both fronts, routing with a stale
//! epoch, rate limits, and the two postures.

mod common;

use common::*;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tracing::info;

fn shard(ns: &str) -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: ns.into(), shard: "default".into(), epoch: 0 })
}

fn acquire_req(ns: &str, session: u64, name: &str, rid: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        shard: shard(ns),
        name: name.into(),
        session_id: session,
        mode: pb::Mode::Exclusive as i32,
        wait_timeout_ms: 0,
        request_id: rid.into(),
        value: b"via-gateway".to_vec(),
    }
}

async fn session(c: &LockServiceClient<tonic::transport::Channel>, ns: &str) -> u64 {
    retry("create session", || {
        let mut c = c.clone();
        let req = pb::CreateSessionRequest { shard: shard(ns), ttl_ms: 10_000, client_label: "gw-test".into() };
        async move { c.create_session(req).await }
    })
    .await
    .into_inner()
    .session_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_front_acquires_renews_and_releases() {
    let _g = serial().await;
    let w = World::start(false).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let c = LockServiceClient::new(w.gateway_channel().await);

    info!("--- session, acquire, a renewal stream naming its shard, release");
    let s = session(&c, "pay").await;
    let t1 = retry("acquire", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req("pay", s, "settle", "r-1")).await }
    })
    .await
    .into_inner();
    assert!(!t1.unfenced && t1.token > 0);
    let renewals = vec![pb::KeepAliveRequest { session_id: s, shard: shard("pay"), more: vec![] }];
    let mut stream = c.clone().keep_alive(tokio_stream::iter(renewals)).await.unwrap().into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().ttl_remaining_ms, 10_000);
    c.clone().release(pb::ReleaseRequest { shard: shard("pay"), name: "settle".into(), token: t1.token, session_id: 0 }).await.unwrap();
    let t2 = c.clone().acquire(acquire_req("pay", s, "settle", "r-2")).await.unwrap().into_inner();
    assert!(t2.token > t1.token);

    info!("--- bad input gets its code through the gateway");
    let e = c.clone().acquire(acquire_req("nope", s, "settle", "r-3")).await.unwrap_err();
    assert_eq!(code(&e), "UNKNOWN_NAMESPACE");
    let e = c.clone().acquire(acquire_req("pay", s, &"n".repeat(20 * 1024), "r-4")).await.unwrap_err();
    assert_eq!(code(&e), "INVALID_ARGUMENT");
    let e = c.clone().keep_alive(tokio_stream::iter(vec![pb::KeepAliveRequest { session_id: s, shard: None, more: vec![] }])).await.unwrap_err();
    assert_eq!(code(&e), "INVALID_ARGUMENT", "a gateway needs the shard of a renewal stream");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_front_with_a_real_http_client() {
    let _g = serial().await;
    let w = World::start(false).await;
    let http = reqwest::Client::new();

    info!("--- create a leadership namespace over HTTP, then place its shard");
    let r = http
        .post(w.http("/v1/namespaces"))
        .json(&json!({ "name": "web", "owner": "team-web", "intent": "leadership", "lock_delay_ms": 0 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let created: Value = r.json().await.unwrap();
    assert_eq!((created["intent"].as_str(), created["posture"].as_str()), (Some("leadership"), Some("fail-closed")), "{created}");
    let mut reg = w.registry_client().await;
    reg.place_shard(rpb::PlaceShardRequest { ns: "web".into(), shard: "default".into(), cell: "a".into() }).await.unwrap();
    let ns: Value = http.get(w.http("/v1/namespaces/web")).send().await.unwrap().json().await.unwrap();
    assert_eq!((ns["owner"].as_str(), ns["version"].as_u64(), ns["intent"].as_str()), (Some("team-web"), Some(1), Some("leadership")), "{ns}");

    info!("--- session and acquire (retried while the cell adopts the shard)");
    let deadline = Instant::now() + WAIT;
    let session = loop {
        let r = http.post(w.http("/v1/sessions")).json(&json!({ "ns": "web", "ttl_ms": 10_000 })).send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        if status == 200 {
            break body["session"].as_str().unwrap().to_owned();
        }
        assert!(status == 503 && Instant::now() < deadline, "{status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The cell may still be taking its first ownership lease: 503 until it has.
    let grant: Value = loop {
        let r = http
            .post(w.http("/v1/locks/web/default/leader/acquire"))
            .json(&json!({ "session": session, "request_id": "h-1", "value": "10.0.0.7:8080" }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        if status == 200 {
            break body;
        }
        assert!(status == 503 && Instant::now() < deadline, "{status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let token = grant["token"].as_str().expect("tokens are JSON strings").to_owned();
    assert_eq!(grant["unfenced"], json!(false));

    info!("--- keepalive, describe, check, release, check again");
    let ka: Value = http.post(w.http(&format!("/v1/sessions/{session}/keepalive"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(ka["ttl_remaining_ms"], json!(10_000));
    let d: Value = http.get(w.http("/v1/locks/web/default/leader")).send().await.unwrap().json().await.unwrap();
    assert_eq!(d["holders"][0]["token"].as_str(), Some(token.as_str()));
    assert_eq!(d["holders"][0]["value"].as_str(), Some("10.0.0.7:8080"));
    assert_eq!((d["intent"].as_str(), d["holders"][0]["mode"].as_str()), (Some("leadership"), Some("exclusive")), "{d}");
    let check: Value = http.post(w.http("/v1/locks/web/default/leader/check")).json(&json!({ "token": token })).send().await.unwrap().json().await.unwrap();
    assert_eq!(check["current"], json!(true));
    let r = http.post(w.http("/v1/locks/web/default/leader/release")).json(&json!({ "token": token })).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let check: Value = http.post(w.http("/v1/locks/web/default/leader/check")).json(&json!({ "token": token })).send().await.unwrap().json().await.unwrap();
    assert_eq!(check["current"], json!(false));
    let owner: Value = http.get(w.http("/v1/shards/web/default/owner")).send().await.unwrap().json().await.unwrap();
    assert_eq!((owner["cell"].as_str(), owner["epoch"].as_u64()), (Some("a"), Some(1)));

    info!("--- errors are JSON with the stable code and the right status");
    let r = http.post(w.http("/v1/locks/nope/default/x/acquire")).json(&json!({ "session": session, "request_id": "x" })).send().await.unwrap();
    assert_eq!(r.status(), 400, "a session of another shard is a bad request");
    let r = http.post(w.http("/v1/sessions")).json(&json!({ "ns": "nope", "ttl_ms": 10_000 })).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["code"], json!("UNKNOWN_NAMESPACE"));
    assert!(e["message"].as_str().unwrap().contains("nope"));
    let r = http.post(w.http("/v1/sessions")).json(&json!({ "ns": "web", "ttl_ms": 10 })).send().await.unwrap();
    assert_eq!(r.status(), 400);
    for (body, content_type) in [("{not json", "application/json"), (r#"{"ns":"web","ttl_ms":1000}"#, "text/plain"), (r#"{"ns":"web"}"#, "application/json")] {
        let r = http.post(w.http("/v1/sessions")).body(body).header("content-type", content_type).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body} as {content_type}");
        let e: Value = r.json().await.expect("a malformed body gets the API's JSON error");
        assert_eq!(e["code"], json!("INVALID_ARGUMENT"), "{e}");
    }
    let r = http.post(w.http("/v1/namespaces")).json(&json!({ "name": "x", "owner": "y", "intent": "Leadership" })).send().await.unwrap();
    assert_eq!(r.status(), 400, "enum words are exact");

    info!("--- /metrics, /healthz, /readyz on the same port");
    assert_eq!(http.get(w.http("/healthz")).send().await.unwrap().status(), 200);
    // Ready once placement has been listed (it may still be retrying right after start).
    let deadline = Instant::now() + WAIT;
    while http.get(w.http("/readyz")).send().await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "the gateway never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = http.get(w.http("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("# TYPE lock_acquire_latency_seconds histogram"), "{metrics}");
    if let Some(promtool) = promtool() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("metrics.txt");
        std::fs::write(&f, &metrics).unwrap();
        let out = std::process::Command::new(promtool).args(["check", "metrics"]).stdin(std::fs::File::open(&f).unwrap()).output().unwrap();
        assert!(out.status.success(), "promtool: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    } else {
        assert!(std::env::var("CI_REQUIRE_PROMTOOL").is_err(), "promtool is required (scripts/setup.sh installs it)");
    }
    w.shutdown().await;
}

/// Every HTTP body is bounded (64 KiB): a larger one is refused with INVALID_ARGUMENT
/// before it is read whole, a 100 MB one included, and the gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_http_body_is_refused_and_the_gateway_serves_on() {
    let _g = serial().await;
    let w = World::start(false).await;
    w.namespace("big", pb::Posture::FailClosed, 0).await;
    let http = reqwest::Client::new();
    let url = w.http("/v1/namespaces");
    let over = format!(r#"{{"name":"big2","owner":"{}"}}"#, "x".repeat(100 << 10));
    let r = http.post(&url).header("content-type", "application/json").body(over).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["code"], json!("INVALID_ARGUMENT"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("65536"), "{e}");

    // 100 MB: refused (or the connection closed under the sender once the limit was
    // reached); nothing is created either way.
    let huge = vec![b' '; 100 << 20];
    match http.post(&url).header("content-type", "application/json").body(huge).send().await {
        Ok(r) => assert_eq!(r.status(), 400),
        Err(e) => info!(error = %e, "the gateway closed the connection under a 100 MB body"),
    }
    let r = http.get(w.http("/v1/namespaces/big2")).send().await.unwrap();
    assert_eq!(r.status(), 404, "an oversized create created nothing");
    let r = http.get(w.http("/v1/namespaces/big")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the gateway still serves");
    w.shutdown().await;
}

/// Debian's promtool, as scripts/setup.sh installs it.
fn promtool() -> Option<String> {
    ["promtool", "/usr/local/bin/promtool", "/opt/prometheus/usr/bin/promtool"]
        .into_iter()
        .find(|p| std::process::Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_routed_with_a_stale_epoch_is_refused_and_retried_at_the_new_owner() {
    let _g = serial().await;
    let w = World::start(true).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let c = LockServiceClient::new(w.gateway_channel().await);
    let s = session(&c, "pay").await;
    retry("acquire at a", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req("pay", s, "x", "x-1")).await }
    })
    .await;

    info!("--- the gateway loses the registry; the shard moves a -> b meanwhile");
    w.cut_gateway_from_registry(true);
    let mut reg = w.registry_client().await;
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: true, ..Default::default() })
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let o = reg.get_owner(rpb::GetOwnerRequest { ns: "pay".into(), shard: "default".into(), fresh: true }).await.unwrap().into_inner().owner.unwrap();
        if o.cell == "b" {
            break;
        }
        assert!(Instant::now() < deadline, "the move did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Cell a has dropped the shard from its own lease (its next renewal after the
    // move): from now on it answers NOT_OWNER, the stale answer the gateway must handle.
    let a_leader = w.cells["a"].iter().find(|n| n.leads()).map(|n| n.client_addr()).expect("cell a has a leader");
    let mut direct_a = LockServiceClient::new(holdfast_rpc::Transport::insecure().connect(&a_leader.to_string()).await.unwrap());
    let deadline = Instant::now() + WAIT;
    loop {
        let req = pb::CreateSessionRequest { shard: shard("pay"), ttl_ms: 10_000, client_label: String::new() };
        match direct_a.create_session(req).await {
            Err(e) if code(&e) == "NOT_OWNER" => break,
            other => assert!(Instant::now() < deadline, "cell a kept answering {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stale_before = stale_routes();

    info!("--- the link heals; the first call goes to a at epoch 1, is refused, and is retried at b");
    w.cut_gateway_from_registry(false);
    let s2 = session(&c, "pay").await;
    let t = retry("acquire after the move", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req("pay", s2, "y", "y-1")).await }
    })
    .await
    .into_inner();
    assert_eq!(t.epoch, 2, "granted at b, epoch 2");
    assert!(stale_routes() > stale_before, "the stale route was not taken (the cache was already fresh)");
    w.shutdown().await;
}

/// The process-wide count of stale routes (the gateway runs in this process).
/// `holdfast_gateway_owner_lookups_total{source}` in this process.
fn owner_lookups(source: &str) -> u64 {
    let text = holdfast_telemetry::install().render();
    let series = format!("holdfast_gateway_owner_lookups_total{{source=\"{source}\"}}");
    text.lines().filter(|l| l.starts_with(&series)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

fn stale_routes() -> u64 {
    let text = holdfast_telemetry::install().render();
    text.lines().filter(|l| l.starts_with("holdfast_gateway_stale_routes_total")).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_rate_limited_and_spares_other_namespaces() {
    let _g = serial().await;
    let w = World::start(false).await;
    w.namespace("busy", pb::Posture::FailClosed, 5).await;
    w.namespace("calm", pb::Posture::FailClosed, 0).await;
    let c = LockServiceClient::new(w.gateway_channel().await);
    let busy = session(&c, "busy").await;
    let calm = session(&c, "calm").await;
    retry("first acquire", || {
        let mut c = c.clone();
        async move { c.acquire(acquire_req("calm", calm, "warm", "w")).await }
    })
    .await;

    info!("--- 30 acquires at once in a namespace limited to 5/s");
    let mut limited = 0;
    for i in 0..30 {
        match c.clone().acquire(acquire_req("busy", busy, &format!("k{i}"), &format!("b{i}"))).await {
            Err(e) if code(&e) == "RATE_LIMITED" => {
                // The answer says when the next acquire may pass: within the second
                // of refill at 5/s.
                let after: u64 = e.metadata().get("holdfast-retry-after-ms").expect("a retry-after hint").to_str().unwrap().parse().unwrap();
                assert!(after <= 1000, "{after} ms");
                limited += 1
            }
            Err(e) => assert!(["MOVING", "UNAVAILABLE"].contains(&code(&e).as_str()), "{e:?}"),
            Ok(_) => {}
        }
    }
    assert!(limited >= 20, "only {limited} of 30 were limited");

    info!("--- the other namespace is not slowed");
    for i in 0..10 {
        c.clone().acquire(acquire_req("calm", calm, &format!("c{i}"), &format!("c{i}"))).await.unwrap();
    }
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_cell_fail_closed_refuses_and_fail_open_grants_unfenced() {
    let _g = serial().await;
    let mut w = World::start(false).await;
    w.namespace("strict", pb::Posture::FailClosed, 0).await;
    w.namespace("lenient", pb::Posture::FailOpen, 0).await;
    let c = LockServiceClient::new(w.gateway_channel().await);
    let s_strict = session(&c, "strict").await;
    let s_lenient = session(&c, "lenient").await;

    info!("--- the cell goes down");
    w.stop_cell("a").await;

    let e = c.clone().acquire(acquire_req("strict", s_strict, "job", "j-1")).await.unwrap_err();
    assert_eq!(code(&e), "UNAVAILABLE", "{e:?}");
    assert!(e.message().contains("fail-closed"), "{}", e.message());
    let g = c.clone().acquire(acquire_req("lenient", s_lenient, "job", "j-1")).await.unwrap().into_inner();
    assert!(g.unfenced, "a fail-open namespace gets an explicit unfenced grant");
    assert_eq!(g.token, 0, "an unfenced grant carries no token to fence with");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_works_through_the_gateway() {
    let _g = serial().await;
    let w = World::start(false).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let gateway = w.gateway.grpc_addr().to_string();
    let client = holdfast_client::Client::connect(&[gateway]).await.unwrap();

    info!("--- a session renewed through the gateway outlives its TTL");
    let ttl = Duration::from_secs(3);
    let deadline = Instant::now() + WAIT;
    let session = loop {
        match client.create_session(holdfast_client::SessionOptions::new("pay", "default", ttl)).await {
            Ok(s) => break s,
            Err(e) => assert!(e.is_retryable() && Instant::now() < deadline, "{e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lock = session.acquire("settle", holdfast_client::AcquireOptions::new().wait(Duration::from_secs(5))).await.unwrap();
    let first = lock.token();
    tokio::time::sleep(ttl * 2).await;
    assert!(!session.is_lost(), "renewals through the gateway kept the session: {:?}", session.loss_reason());

    info!("--- the cell still shows the holder; release and re-acquire gets a larger token");
    let c = LockServiceClient::new(w.gateway_channel().await);
    let d = c.clone().describe(pb::DescribeRequest { shard: shard("pay"), name: "settle".into() }).await.unwrap().into_inner();
    assert_eq!(d.holders.iter().map(|h| h.token).collect::<Vec<_>>(), vec![first.0]);
    lock.release().await.unwrap();
    let again = session.acquire("settle", holdfast_client::AcquireOptions::new()).await.unwrap();
    assert!(again.token() > first);
    session.close().await.unwrap();
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_session_recreates_itself_after_its_shard_moves() {
    let _g = serial().await;
    let w = World::start(true).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let client = holdfast_client::Client::connect(&[w.gateway.grpc_addr().to_string()]).await.unwrap();
    let opts = holdfast_client::SessionOptions::new("pay", "default", Duration::from_secs(6));
    let mut keeper = retry_sdk("the keeper's first session", || holdfast_client::SessionKeeper::start(client.clone(), opts.clone())).await;
    // A second keeper on the same client, renewing on the same stream as the first
    // until the move: it must be told MOVED too, and carry on. (Had its old session's
    // renewals joined the first's new session's stream, the new owner would answer it
    // as an unknown session and the keeper would stop: the SDK keys its renewal streams
    // by epoch. This run does not force that interleaving; it shows both carry on.)
    let mut other = holdfast_client::SessionKeeper::start(client.clone(), opts.clone()).await.unwrap();
    let other_first = other.current().unwrap();
    let first = keeper.current().unwrap();
    let lock = first.acquire("x", holdfast_client::AcquireOptions::new().wait(Duration::from_secs(5))).await.unwrap();
    let t1 = lock.token();

    info!("--- the shard moves to cell b");
    let mut reg = w.registry_client().await;
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: true, ..Default::default() })
        .await
        .unwrap();

    info!("--- the lock and its session report MOVED; the keeper publishes a new session");
    let reason = tokio::time::timeout(WAIT, lock.lost()).await.expect("the move was never reported");
    assert_eq!(reason, holdfast_client::LossReason::Moved);
    let second = tokio::time::timeout(WAIT, keeper.changed()).await.expect("no new session").expect("the keeper stopped");
    assert_ne!(second.id(), first.id());
    let other_second = tokio::time::timeout(WAIT, other.changed()).await.expect("no new session").expect("the second keeper stopped");
    assert_ne!(other_second.id(), other_first.id());
    assert_eq!(other_first.loss_reason(), Some(holdfast_client::LossReason::Moved));

    info!("--- the new session takes the lock at b, with a larger token");
    let again = second.acquire("x", holdfast_client::AcquireOptions::new().wait(Duration::from_secs(5))).await.unwrap();
    assert!(again.token() > t1);
    assert_eq!(again.token().epoch().0, 2);
    w.shutdown().await;
}

/// Issue #43: a cell cut off from the registry serves on its lease; an unplanned move
/// (unconfirmed) hands the shard to another cell once that lease ran out. The holder's
/// SDK, renewing through the gateway all along, must report the loss before the new
/// owner grants the lock: its renewals are confirmed only under the lease. The gateway
/// is cut off from the registry too (a stale route), so it cannot tell the holder
/// MOVED: the renewals' answers are all the holder has. (Renewals confirmed for the
/// whole TTL, as before the fix, left the old holder believing for seconds after the
/// new owner's grant.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_hears_its_loss_before_the_new_owner_grants() {
    let _g = serial().await;
    // A 4 s ownership lease, so the move completes in seconds; sessions of 12 s, so a
    // renewal confirmed for its whole TTL would outlast the lease by far.
    let w = World::start_with_lease(true, 4_000).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let client = holdfast_client::Client::connect(&[w.gateway.grpc_addr().to_string()]).await.unwrap();
    let opts = holdfast_client::SessionOptions::new("pay", "default", Duration::from_secs(12));
    let holder = retry_sdk("the holder's session", || client.create_session(opts.clone())).await;
    let lock = holder.acquire("x", holdfast_client::AcquireOptions::new()).await.unwrap();
    let t1 = lock.token();

    // The next owner's clients reach cell b directly.
    let at_b: Vec<String> = w.cells["b"].iter().map(|n| n.client_addr().to_string()).collect();
    let taker_client = holdfast_client::Client::connect(&at_b).await.unwrap();

    info!("--- cell a and the gateway are cut off from the registry; the shard is moved to b, unconfirmed");
    w.cut_cell_from_registry("a", true);
    w.cut_gateway_from_registry(true);
    let cut_at = Instant::now();
    let mut reg = w.registry_client().await;
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: false, ..Default::default() })
        .await
        .unwrap();

    info!("--- the holder's loss and the new owner's grant, each timed as it happens");
    let lost = async {
        let reason = lock.lost().await;
        (Instant::now(), reason)
    };
    let taker = async {
        let deadline = Instant::now() + WAIT;
        loop {
            // A fresh session each try until b serves the shard. The grant is timed by
            // when its acquire was sent: it happened no earlier.
            if let Ok(s) = taker_client.create_session(opts.clone()).await {
                let sent = Instant::now();
                if let Ok(l) = s.acquire("x", holdfast_client::AcquireOptions::new()).await {
                    return (sent, l.token(), s);
                }
            }
            assert!(Instant::now() < deadline, "the new owner never granted x");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let ((lost_at, reason), (granted_at, t2, _taker)) = tokio::join!(lost, taker);
    info!(?reason, lost_after = ?lost_at - cut_at, granted_after = ?granted_at - cut_at, "loss and grant");
    assert!(t2 > t1 && t2.epoch().0 > t1.epoch().0, "the new owner grants at the next epoch: {t1:?} then {t2:?}");
    assert!(
        lost_at < granted_at,
        "the holder's SDK reported its loss ({reason:?}) {:?} after the cut, but the new owner granted {:?} after it",
        lost_at - cut_at,
        granted_at - cut_at
    );
    w.cut_cell_from_registry("a", false);
    w.cut_gateway_from_registry(false);
    w.shutdown().await;
}

/// The SDK's ownership cache (issue #18) over a gateway: it lists, then follows the
/// watch; a planned move shows within moments with its new epoch, on the changes
/// stream too; and a move made while its watch is broken shows once it has listed
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ownership_cache_follows_moves_and_survives_a_broken_watch() {
    let _g = serial().await;
    let w = World::start(true).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let mut reg = w.registry_client().await;
    reg.place_shard(rpb::PlaceShardRequest { ns: "pay".into(), shard: "s2".into(), cell: "a".into() }).await.unwrap();
    let client = holdfast_client::Client::connect(&[w.gateway.grpc_addr().to_string()]).await.unwrap();
    let cache = client.ownership_cache("pay").await.unwrap();
    let at = |shard: &str| cache.owner(shard).map(|o| (o.cell, o.epoch));
    assert_eq!(at("default"), Some(("a".into(), 1)));
    assert_eq!(at("s2"), Some(("a".into(), 1)));
    assert_eq!(at("nope"), None);
    let mut changes = cache.changes();

    info!("--- a planned move: the cache has the new owner and epoch, and says so");
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: true, ..Default::default() })
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while at("default") != Some(("b".into(), 2)) {
        assert!(Instant::now() < deadline, "the cache never saw the move: {:?}", at("default"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = Vec::new();
    while let Ok(c) = changes.try_recv() {
        seen.push((c.shard, c.owner.cell, c.owner.epoch, c.owner.moving_to));
    }
    assert!(seen.contains(&("default".into(), "a".into(), 1, Some("b".into()))), "the move begun: {seen:?}");
    assert_eq!(seen.last(), Some(&("default".into(), "b".into(), 2, None)), "the move done: {seen:?}");

    info!("--- its watch breaks (the gateway loses the registry) while s2 moves");
    let relists = cache.relists();
    w.cut_gateway_from_registry(true);
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "s2".into(), to_cell: "b".into(), planned: true, ..Default::default() }).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while reg.get_owner(rpb::GetOwnerRequest { ns: "pay".into(), shard: "s2".into(), fresh: true }).await.unwrap().into_inner().owner.unwrap().epoch != 2 {
        assert!(Instant::now() < deadline, "the move of s2 did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.cut_gateway_from_registry(false);
    let deadline = Instant::now() + WAIT;
    while at("s2") != Some(("b".into(), 2)) {
        assert!(Instant::now() < deadline, "the cache never caught up after its watch broke: {:?}", at("s2"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cache.relists() > relists, "it listed again to catch up");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_lookups_are_answered_from_the_placement_cache_unless_fresh_is_asked() {
    let _g = serial().await;
    let w = World::start(true).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let mut gw = RegistryServiceClient::new(w.gateway_channel().await);
    let ask = |fresh: bool| rpb::GetOwnerRequest { ns: "pay".into(), shard: "default".into(), fresh };
    // Right after the namespace is made the cache may not have the shard yet (its
    // watch delivers it within moments): until then the answer is the registry's.
    let deadline = Instant::now() + WAIT;
    let cached = loop {
        let before = owner_lookups("cache");
        let r = gw.get_owner(ask(false)).await;
        if let (Ok(r), true) = (r, owner_lookups("cache") > before) {
            break r.into_inner();
        }
        assert!(Instant::now() < deadline, "the cache never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(cached.owner.as_ref().map(|o| (o.cell.as_str(), o.epoch)), Some(("a", 1)));
    assert!(cached.revision > 0, "the answer says which revision it reflects");

    info!("--- the gateway loses the registry: the cache still answers, a fresh read cannot");
    w.cut_gateway_from_registry(true);
    let during = gw.get_owner(ask(false)).await.expect("the cache answers without the registry").into_inner();
    assert_eq!(during, cached);
    let fresh = gw.get_owner(tonic::Request::new(ask(true))).await.expect_err("a fresh read needs the registry");
    assert_eq!(code(&fresh), "UNAVAILABLE", "{fresh:?}");
    w.cut_gateway_from_registry(false);

    info!("--- a move: the cache follows it (the watch), and its revision grows");
    let mut reg = w.registry_client().await;
    reg.move_shard(rpb::MoveShardRequest { ns: "pay".into(), shard: "default".into(), to_cell: "b".into(), planned: true, ..Default::default() })
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let now = gw.get_owner(ask(false)).await.unwrap().into_inner();
        if now.owner.as_ref().is_some_and(|o| o.cell == "b" && o.epoch == 2 && o.state == rpb::ShardState::Active as i32) {
            assert!(now.revision > cached.revision);
            break;
        }
        assert!(Instant::now() < deadline, "the cached owner never showed the move: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gw.get_owner(ask(true)).await.unwrap().into_inner().owner.map(|o| (o.cell, o.epoch)), Some(("b".into(), 2)));

    info!("--- a shard the cache does not know: asked of the registry, which knows it not");
    let unknown = gw.get_owner(rpb::GetOwnerRequest { ns: "pay".into(), shard: "nope".into(), fresh: false }).await.unwrap_err();
    assert_eq!(code(&unknown), "UNKNOWN_SHARD", "a shard the cache does not know is asked of the registry: {unknown:?}");
    w.shutdown().await;
}

/// Calls that a client cancels (a renewal stream dropped before its end, a Watch
/// closed) are reset on the client's connection and, as the gateway drops the upstream
/// call, on the gateway's pooled connection to the cell. A trailer that arrives for a
/// cancelled stream the client already forgot makes hyper's HTTP/2 client send another
/// reset, which it counts over the connection's life; at 1,024 it closes the connection
/// with `GOAWAY(ENHANCE_YOUR_CALM)` and every call in flight on it fails.
/// `holdfast-bench renewals` (10,000 sessions through one gateway) hit this every few
/// seconds. The wire edge's client connections lift that limit (`rpc/src/transport.rs`):
/// here 3,200 cancelled renewal streams leave a Watch through the same gateway, and the
/// test's own connection, working. Without the change the renewals fail with
/// `RESOURCE_EXHAUSTED` after about a thousand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_streams_do_not_close_the_gateways_connection_to_the_cell() {
    let _g = serial().await;
    let w = World::start(false).await;
    w.namespace("pay", pb::Posture::FailClosed, 0).await;
    let c = LockServiceClient::new(w.gateway_channel().await);
    let s = session(&c, "pay").await;
    let watch_req = pb::WatchRequest { shard: shard("pay"), name: "watched".into(), from_revision: 0 };
    let mut watch = retry("watch", || {
        let mut c = c.clone();
        let r = watch_req.clone();
        async move { c.watch(r).await }
    })
    .await
    .into_inner();

    info!("--- 3,200 renewal streams, 64 at a time, each cancelled before its end");
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..64 {
        let c = c.clone();
        tasks.spawn(async move {
            for i in 0..50 {
                let one = tokio_stream::iter([pb::KeepAliveRequest { session_id: s, shard: shard("pay"), more: vec![] }]);
                let mut stream = c.clone().keep_alive(one).await.unwrap_or_else(|e| panic!("renewal {k}/{i}: {e}")).into_inner();
                // Half are dropped with their answer unread, half after it: both before
                // the stream's end.
                if i % 2 == 0 {
                    let answer = stream.message().await.unwrap_or_else(|e| panic!("renewal {k}/{i}: {e}"));
                    assert_eq!(answer.map(|a| a.ttl_remaining_ms), Some(10_000), "renewal {k}/{i}");
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }

    info!("--- the Watch opened before them still delivers");
    let t = c.clone().acquire(acquire_req("pay", s, "watched", "r-w")).await.unwrap().into_inner();
    let granted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let m = watch.message().await.expect("the Watch stream survived the cancelled streams").expect("the Watch is open");
            if let Some(e) = m.events.iter().find(|e| e.kind == pb::EventKind::Acquired as i32) {
                return e.token;
            }
        }
    })
    .await
    .expect("the grant's event within 10 s");
    assert_eq!(granted, t.token);
    w.shutdown().await;
}
