//! What an on-call SRE reads (issue #17), checked against a running playground:
//!
//! - traces: with `--otlp-endpoint`, one acquire through a gateway yields one trace
//!   whose spans come from the gateway and the cell leader (two processes, each
//!   exporting to an OTLP collector served by this test), parent-linked, with the
//!   stages of the Raft write;
//! - metrics: the gateway counts its front door; every metric name an alert rule or a
//!   dashboard panel uses (`telemetry/prometheus/alerts.yml`,
//!   `telemetry/grafana/holdfast.json`) is served by some role's `/metrics`, save the
//!   few listed in [`ELSEWHERE`] and [`ON_EVENTS`], which must still be holdfast's names;
//!   and every role's `/metrics` passes `promtool check metrics`;
//! - the status page: a headless chromium renders a gateway's `/status` with three
//!   regions, and after `holdfast shard move` the new owner and epoch within seconds;
//!   a screenshot is kept (`$CI_ARTIFACTS/status-page.png`);
//! - a drill's trace: `holdfast drill evacuate` exporting too, its steps and the
//!   registry calls they make (through a gateway) are one trace.

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
}

#[derive(Default, Clone)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(&self, r: tonic::Request<ExportTraceServiceRequest>) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = self.0.lock().unwrap();
        for rs in r.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    AnyValue::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(Span { service: service.clone(), trace: s.trace_id, id: s.span_id, parent: s.parent_span_id, name: s.name });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// Debian's chromium, as scripts/setup.sh installs it.
fn chromium() -> Option<String> {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|p| std::process::Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(str::to_owned)
}

/// Headless, as root, trusting the playground's own CA (the page is served over TLS).
fn browser_args() -> Vec<String> {
    let profile = std::env::temp_dir().join(format!("holdfast-chromium-{}", std::process::id()));
    ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--ignore-certificate-errors", "--no-first-run"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect()
}

/// The page as the browser built it.
fn dump_dom(browser: &str, url: &str) -> String {
    let out = std::process::Command::new(browser).args(browser_args()).arg("--dump-dom").arg(url).output().unwrap();
    assert!(out.status.success(), "chromium --dump-dom {url}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The owner cell and epoch of `shard` (`ns/shard`) in the page's ownership map.
fn owner_on_page(dom: &str, shard: &str) -> Option<(String, String)> {
    let row = &dom[dom.find(&format!("data-shard=\"{shard}\""))?..];
    let row = &row[..row.find("</tr>")?];
    let cell = |class: &str| {
        let start = row.find(&format!("<td class=\"{class}\">"))? + class.len() + 13;
        Some(row[start..start + row[start..].find("</td>")?].to_owned())
    };
    Some((cell("owner")?, cell("epoch")?))
}

/// Debian's promtool, as scripts/setup.sh installs it.
fn promtool() -> Option<String> {
    ["promtool", "/opt/prometheus/usr/bin/promtool"]
        .into_iter()
        .find(|p| std::process::Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(str::to_owned)
}

async fn start_collector() -> (String, Collector) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let t = holdfast_rpc::Transport::new(Default::default(), holdfast_rpc::Security::Insecure);
    let router = t.grpc_server().add_service(TraceServiceServer::new(collector.clone()));
    tokio::spawn(async move { t.serve_grpc(router, listener, std::future::pending()).await });
    (format!("http://{addr}"), collector)
}

/// The acquire's trace: started at the gateway's HTTP door, reaching a cell's Raft.
fn acquire_trace(spans: &[Span]) -> Option<Vec<Span>> {
    let root = spans.iter().find(|s| s.service == "holdfast-gateway" && s.parent.is_empty() && s.name.ends_with("/acquire"))?;
    let trace: Vec<Span> = spans.iter().filter(|s| s.trace == root.trace).cloned().collect();
    trace.iter().any(|s| s.name == "raft.apply").then_some(trace)
}

fn metric_names_of_holdfast() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("core/src/metric_names.rs")).unwrap();
    text.lines().filter_map(|l| l.split('"').nth(1)).map(str::to_owned).collect()
}

/// Names a rule or panel uses: identifiers that start like ours, less the suffixes
/// a histogram's series carry.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = |p: &str| text[text.char_indices().nth(i).map_or(text.len(), |(b, _)| b)..].starts_with(p);
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == '_');
        if boundary && (starts("lock_") || starts("holdfast_")) {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == '_') {
                j += 1;
            }
            let name: String = bytes[i..j].iter().collect();
            let base = ["_bucket", "_sum", "_count"].iter().fold(name.clone(), |n, s| n.strip_suffix(s).map_or(n.clone(), str::to_owned));
            out.insert(base);
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Recorded outside the servers: by the SDK in client processes, or by fenced resources.
const ELSEWHERE: &[&str] = &[
    "lock_renew_failures_total",
    "lock_lease_expired_while_held_total",
    "lock_hold_time_seconds",
    "lock_held_without_progress_seconds",
    "lock_fencing_rejections_total",
    "lock_holder_overlap_seconds",
];
/// Counted by servers only when their event happens, which this test does not provoke.
const ON_EVENTS: &[&str] = &[
    "holdfast_gateway_fail_closed_refusals_total",
    "holdfast_gateway_unfenced_grants_total",
    "holdfast_gateway_rate_limited_total",
    "holdfast_gateway_stale_routes_total",
    "lock_admin_break_total",
    // An unplanned move completes on a lapsed lease only 35 minutes after its source
    // went quiet; this test's move is fence-confirmed.
    "holdfast_ownership_lease_lapses_total",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_acquire_is_one_trace_across_processes_and_every_alerted_metric_is_served() {
    let (endpoint, collector) = start_collector().await;
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("dev");
    std::fs::create_dir(&data).unwrap();
    let ports = holdfast_testkit::port_block(64);
    let base = ports.base;
    let mut dev = Dev::start(&data, &["--base-port", &base.to_string(), "--otlp-endpoint", &endpoint]);
    let v = dev.endpoints(&data);
    let c = https_client(&data, Duration::from_secs(30));
    ready(&c, &v).await;
    let gw = http(&v, "east");

    // ---- one acquire, one trace
    let s = session(&c, &gw, 30_000).await;
    collector.0.lock().unwrap().clear();
    let token = acquire(&c, &gw, "traced", &s, 0).await;
    assert!(token > 0);
    let end = Instant::now() + Duration::from_secs(30);
    let trace = loop {
        if let Some(t) = acquire_trace(&collector.0.lock().unwrap()) {
            break t;
        }
        assert!(Instant::now() < end, "no acquire trace within 30 s; spans: {:?}", collector.0.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Let the rest of the trace's spans arrive (each process exports on its own).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let root_span = trace.iter().find(|s| s.parent.is_empty()).unwrap().clone();
    let trace: Vec<Span> = collector.0.lock().unwrap().iter().filter(|s| s.trace == root_span.trace).cloned().collect();
    let by_id: HashMap<&[u8], &Span> = trace.iter().map(|s| (s.id.as_slice(), s)).collect();
    let parent_of = |s: &Span| by_id.get(s.parent.as_slice()).copied();
    let names: Vec<String> = trace.iter().map(|s| format!("{}:{}", s.service, s.name)).collect();
    for s in &trace {
        assert!(s.parent.is_empty() || parent_of(s).is_some(), "span {} has a parent outside the trace: {names:?}", s.name);
    }
    assert_eq!(trace.iter().filter(|s| s.parent.is_empty()).count(), 1, "one root: {names:?}");
    let upstream = trace.iter().find(|s| s.name == "gateway.upstream").unwrap_or_else(|| panic!("no upstream span: {names:?}"));
    assert_eq!(upstream.service, "holdfast-gateway");
    let cell = trace
        .iter()
        .find(|s| s.service == "holdfast-cell" && s.name.ends_with("LockService/Acquire"))
        .unwrap_or_else(|| panic!("no span of the cell's handler: {names:?}"));
    assert_eq!(parent_of(cell).map(|p| p.name.as_str()), Some("gateway.upstream"), "{names:?}");
    let propose = trace.iter().find(|s| s.name == "raft.propose").unwrap_or_else(|| panic!("no proposal span: {names:?}"));
    assert_eq!(propose.service, "holdfast-cell");
    let mut under = propose.clone();
    while let Some(p) = parent_of(&under) {
        under = p.clone();
        if under.id == cell.id {
            break;
        }
    }
    assert_eq!(under.id, cell.id, "the proposal runs under the cell's handler: {names:?}");
    for stage in ["raft.append", "raft.commit", "raft.apply"] {
        let s = trace.iter().find(|s| s.name == stage).unwrap_or_else(|| panic!("no {stage} span: {names:?}"));
        assert_eq!(s.parent, propose.id, "{stage} is a stage of the proposal: {names:?}");
    }

    // ---- events the alerts watch: contention, an expired session, an unplanned (fence-confirmed) move
    let other = call(&c, reqwest::Method::POST, &format!("{gw}/v1/sessions"), Some(json!({ "ns": "demo", "ttl_ms": 3_000 }))).await;
    let other = other["session"].as_str().unwrap().to_owned();
    // A waiter, seen by the leader's gauges (refreshed every second), then granted.
    let url = format!("{gw}/v1/locks/demo/default/traced/acquire");
    let queued = c.post(&url).json(&json!({ "session": other, "request_id": "queued", "wait_timeout_ms": 10_000 })).send();
    let queued = tokio::spawn(queued);
    // Names some scrape below saw: a gauge such as the waiters' is served only while
    // there is something to count, and dropped a minute after (telemetry/src/lib.rs).
    let mut seen_early: BTreeSet<String> = BTreeSet::new();
    let east_nodes: Vec<String> =
        v["regions"]["east"]["cells"][0]["nodes"].as_array().unwrap().iter().map(|n| format!("https://{}/metrics", n["metrics"].as_str().unwrap())).collect();
    let scrape_east_until = |want: &'static str, seen: &mut BTreeSet<String>| {
        let rt = tokio::runtime::Handle::current();
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            for u in &east_nodes {
                let text = tokio::task::block_in_place(|| rt.block_on(async { c.get(u).send().await.unwrap().text().await.unwrap() }));
                if text.lines().any(|l| l.starts_with(want)) {
                    seen.extend(text.lines().filter(|l| l.starts_with("# TYPE ")).map(|l| l.split_whitespace().nth(2).unwrap().to_owned()));
                    return;
                }
            }
            assert!(Instant::now() < end, "no east node served `{want}` within 20 s");
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(250)));
        }
    };
    // The leader's gauge (refreshed every second) counts the waiter.
    scrape_east_until(r#"lock_waiters{ns="demo",name="traced"} 1"#, &mut seen_early);
    call(&c, reqwest::Method::POST, &format!("{gw}/v1/locks/demo/default/traced/release"), Some(json!({ "token": token.to_string() }))).await;
    let r = queued.await.unwrap().unwrap();
    assert!(r.status().is_success(), "the waiter gets the lock: {}", r.text().await.unwrap());
    // A refused acquire (the lock is held, no wait): counted by its code.
    let r = c.post(&url).json(&json!({ "session": s, "request_id": "refused", "wait_timeout_ms": 0 })).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 409, "LOCK_HELD: {}", r.text().await.unwrap());
    // Its session (TTL 3 s, never renewed) expires, counted by the east cell's leader.
    // Waited for here: the move below seals demo/default in the east cell, which would
    // end the session as MOVED rather than expired if it came first.
    scrape_east_until(r#"holdfast_sessions_expired_total{ns="demo"} "#, &mut seen_early);

    // ---- the status page, in a real browser, before and after a move
    let browser = chromium();
    let status_url = format!("{gw}/status");
    if let Some(b) = &browser {
        let dom = dump_dom(b, &status_url);
        for region in ["east", "west", "south"] {
            assert!(dom.contains(&format!("<td>{region}</td>")), "the page lists region {region}: {dom}");
        }
        assert_eq!(owner_on_page(&dom, "demo/default"), Some(("east-1".to_owned(), "1".to_owned())), "{dom}");
        // The registry's leader and quorum, read from its voters, and each cell's lease
        // time left (the production 35 minutes, renewed every second).
        assert!(dom.contains(r#"<p class="ok" id="registry-health">leader node "#) && dom.contains("quorum acknowledged it"), "{dom}");
        assert!(dom.matches(r#"<td class="lease ok">34 min "#).count() >= 3, "each region's cell shows its lease left: {dom}");
    }
    let grpc = v["regions"]["east"]["gateway"]["grpc"].as_str().unwrap();
    // Unplanned, the fencing confirmed: the playground's ownership lease is the
    // production 35 minutes, which an unconfirmed move would wait out.
    let out = holdfast_at(&data)
        .args([
            "shard",
            "move",
            "demo",
            "default",
            "--to",
            "west-1",
            "--unplanned",
            "--fence-confirmed",
            "--reason",
            "the observability test",
            "--endpoint",
            grpc,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "shard move: {}", String::from_utf8_lossy(&out.stderr));
    if let Some(b) = &browser {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let dom = dump_dom(b, &status_url);
            if owner_on_page(&dom, "demo/default") == Some(("west-1".to_owned(), "2".to_owned())) {
                break;
            }
            assert!(Instant::now() < end, "the page shows the new owner and epoch within 10 s of the move: {dom}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let dir = std::env::var_os("CI_ARTIFACTS").map_or_else(|| std::env::temp_dir().join("holdfast-artifacts"), PathBuf::from);
        std::fs::create_dir_all(&dir).unwrap();
        let shot = dir.join("status-page.png");
        let out = std::process::Command::new(b)
            .args(browser_args())
            .arg(format!("--screenshot={}", shot.display()))
            .arg("--window-size=1280,1800")
            .arg(&status_url)
            .output()
            .unwrap();
        assert!(out.status.success() && shot.exists(), "screenshot: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("status page screenshot: {}", shot.display());
    } else {
        assert!(std::env::var("CI_REQUIRE_CHROMIUM").as_deref() != Ok("1"), "chromium is required (scripts/setup.sh installs it)");
        eprintln!("SKIPPED the status page in a browser: no chromium");
    }

    // ---- every role's /metrics
    let mut urls = Vec::new();
    for (_, r) in v["regions"].as_object().unwrap() {
        urls.push(format!("https://{}/metrics", r["gateway"]["http"].as_str().unwrap()));
        urls.push(format!("https://{}/metrics", r["registry"]["metrics"].as_str().expect("registry voters serve /metrics")));
        for n in r["cells"][0]["nodes"].as_array().unwrap() {
            urls.push(format!("https://{}/metrics", n["metrics"].as_str().unwrap()));
        }
    }
    let served = || -> (BTreeSet<String>, HashMap<String, String>) {
        let mut served = BTreeSet::new();
        let mut texts = HashMap::new();
        let rt = tokio::runtime::Handle::current();
        for u in &urls {
            let text = tokio::task::block_in_place(|| rt.block_on(async { c.get(u).send().await.unwrap().text().await.unwrap() }));
            for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
                served.insert(l.split_whitespace().nth(2).unwrap().to_owned());
            }
            texts.insert(u.clone(), text);
        }
        (served, texts)
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut used = names_used(&std::fs::read_to_string(repo.join("telemetry/prometheus/alerts.yml")).unwrap());
    let dashboard = names_used(&std::fs::read_to_string(repo.join("telemetry/grafana/holdfast.json")).unwrap());
    assert!(used.len() >= 8 && dashboard.len() >= 15, "the scan finds the names: {used:?} {dashboard:?}");
    used.extend(dashboard);
    let ours = metric_names_of_holdfast();
    let end = Instant::now() + Duration::from_secs(30);
    let (missing, texts) = loop {
        let (mut served, texts) = served();
        served.extend(seen_early.iter().cloned());
        let missing: Vec<&String> =
            used.iter().filter(|n| !served.contains(*n) && !ELSEWHERE.contains(&n.as_str()) && !ON_EVENTS.contains(&n.as_str())).collect();
        if missing.is_empty() || Instant::now() > end {
            break (missing.into_iter().cloned().collect::<Vec<_>>(), texts);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(missing.is_empty(), "used by an alert or a panel, served by no role: {missing:?}");
    let unknown: Vec<&String> = used.iter().filter(|n| !ours.contains(*n)).collect();
    assert!(unknown.is_empty(), "names that are not holdfast's (core/src/metric_names.rs): {unknown:?}");
    let gateway_east = &texts[&format!("https://{}/metrics", v["regions"]["east"]["gateway"]["http"].as_str().unwrap())];
    assert!(
        gateway_east.contains(r#"holdfast_gateway_requests_total{front="http",route="POST /v1/locks/{ns}/{shard}/{name}/acquire",code="OK"}"#),
        "the front door counts the acquire"
    );
    // Every role's exposition passes promtool (a HELP and TYPE for each name, valid
    // histograms).
    match promtool() {
        Some(promtool) => {
            for (u, text) in &texts {
                let mut child = std::process::Command::new(&promtool)
                    .args(["check", "metrics"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success(), "promtool check metrics {u}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            }
        }
        None => assert!(std::env::var("CI_REQUIRE_PROMTOOL").is_err(), "promtool is required (scripts/setup.sh installs it)"),
    }

    // ---- a drill's steps are one trace with the registry calls they make
    let state = root.path().join("evacuate-west");
    let out =
        holdfast_at(&data).args(["drill", "evacuate", "--region", "west", "--state-dir"]).arg(&state).args(["--otlp-endpoint", &endpoint]).output().unwrap();
    assert!(out.status.success(), "evacuate west: {}", String::from_utf8_lossy(&out.stderr));
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let spans = collector.0.lock().unwrap().clone();
        let drill = spans.iter().find(|s| s.service == "holdfast" && s.name == "drill.evacuate");
        let reached_registry = drill.is_some_and(|d| {
            spans.iter().any(|s| s.trace == d.trace && s.name == "drill.step")
                && spans.iter().any(|s| s.trace == d.trace && s.service == "holdfast-registry" && s.name.contains("RegistryService/"))
        });
        if reached_registry {
            break;
        }
        let names: BTreeSet<String> = spans.iter().map(|s| format!("{}:{}", s.service, s.name)).collect();
        assert!(Instant::now() < end, "no drill trace reaching the registry within 30 s: {names:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    dev.stop();
}
