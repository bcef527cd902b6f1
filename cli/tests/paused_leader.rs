//! Issue #15: a cell keeps serving every client through the loss of a minority of its
//! nodes. On a playground (mutual TLS, one region), the cell's leader is SIGSTOPped for
//! 6 s, longer than either session's TTL; a session renewed only over the gateway's HTTP API
//! (`POST /v1/sessions/{id}/keepalive`, as any non-Rust client renews) and one renewed
//! by the SDK's KeepAlive stream through the gateway both keep their locks, and no HTTP
//! renewal waits on the stopped leader for more than half its budget. Before the fix
//! of issue #13, the HTTP renewal stuck to a follower answering NOT_LEADER until the
//! session expired; and a renewal through the gateway spent its whole deadline on the
//! stopped leader, so the SDK declared its session lost.
//!
//! The SDK session's TTL is 6 s: the SDK renews every TTL/3 and gives up at 2/3 TTL,
//! so it rides out a leader loss only if TTL/3 exceeds a failover (~1 s) plus one
//! stuck attempt (docs/sdk.md).

mod common;

use common::{acquire, call, http, https_client, ready, session, Dev};
use holdfast_client::{AcquireOptions, Client, ClientConfig, SessionOptions};
use holdfast_rpc::{CertFiles, Security, TlsMaterial, Transport, TransportOptions};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_MS: u64 = 3_000;
const SDK_TTL_MS: u64 = 6_000;
const PAUSE_MS: u64 = 6_000;

fn holder_tokens(d: &Value) -> Vec<u64> {
    d["holders"].as_array().expect("holders").iter().map(|h| h["token"].as_str().expect("token string").parse().expect("decimal")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cell_leader_costs_no_session_renewed_over_http_or_the_sdk_stream() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("pg");
    std::fs::create_dir(&data).unwrap();
    let mut dev = Dev::start(&data, &["--regions", "1", "--base-port", "8300"]);
    let v = dev.endpoints(&data);
    let c = https_client(&data, Duration::from_secs(5));
    ready(&c, &v).await;
    let gw = http(&v, "east");
    let grpc = v["regions"]["east"]["gateway"]["grpc"].as_str().unwrap().to_owned();

    // --- H renews over HTTP only; S is the SDK's session, renewed on its stream
    let h = session(&c, &gw, TTL_MS).await;
    let th = acquire(&c, &gw, "paused-http", &h, 0).await;
    let security = Security::Tls(Arc::new(TlsMaterial::load(CertFiles::user(&data.join("certs"), "root")).unwrap()));
    let sdk = Client::connect_via(&Transport::new(TransportOptions::default(), security), &[grpc], ClientConfig::default()).await.unwrap();
    let s = sdk.create_session(SessionOptions::new("demo", "default", Duration::from_millis(SDK_TTL_MS)).label("paused-leader")).await.unwrap();
    let lock = s.acquire("paused-sdk", AcquireOptions::new().wait(Duration::from_secs(10))).await.unwrap();
    let ts = lock.token().0;

    // --- H's renewals: every TTL/6 over HTTP, each answered or not
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let renewer = {
        let (c, url, stop, ok, failed) = (c.clone(), format!("{gw}/v1/sessions/{h}/keepalive"), stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            // The longest renewal: the gateway gives a stuck leader at most half of a
            // renewal's budget (1.5 s of 3 s) before it asks another member.
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                match c.post(&url).json(&serde_json::json!({})).send().await {
                    Ok(r) if r.status().is_success() => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                longest = longest.max(sent.elapsed());
                tokio::time::sleep(Duration::from_millis(TTL_MS / 6)).await;
            }
            longest
        })
    };

    // --- the cell's leader stops for longer than either TTL, then resumes
    let paused = Instant::now();
    let out = common::holdfast_at(&data)
        .args(["drill", "fault", "pause-leader", "--cell", "east-1", "--ms", &PAUSE_MS.to_string()])
        .output()
        .expect("run holdfast drill fault pause-leader");
    assert!(out.status.success(), "pause-leader: {}", String::from_utf8_lossy(&out.stderr));
    assert!(paused.elapsed() >= Duration::from_millis(PAUSE_MS));
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    stop.store(true, Ordering::Relaxed);
    let longest = renewer.await.unwrap();
    eprintln!("HTTP renewals: {} answered, {} not; the longest took {longest:?}", ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    // The SDK's renewals now ride a stream that stays open, so its session no longer
    // shows how the gateway opens a renewal at a stuck leader; every HTTP renewal
    // opens one. Spending the whole budget there (3 s, then the next member) instead of
    // half (1.5 s) is the bug; 2.8 s leaves the right path room on a busy machine.
    assert!(longest < Duration::from_millis(2_800), "an HTTP renewal took {longest:?}: the gateway spent more than half its budget on the stopped leader");

    // --- both sessions lived: their locks are held with the same tokens
    for (name, token) in [("paused-http", th), ("paused-sdk", ts)] {
        let d = call(&c, reqwest::Method::GET, &format!("{gw}/v1/locks/demo/default/{name}"), None).await;
        assert_eq!(holder_tokens(&d), vec![token], "{name} lost its holder while the leader was paused: {d}");
    }
    let r = c.post(format!("{gw}/v1/sessions/{h}/keepalive")).json(&serde_json::json!({})).send().await.unwrap();
    assert!(r.status().is_success(), "the HTTP session is gone: {}", r.text().await.unwrap_or_default());
    drop(lock);
    drop(s);
    dev.stop();
}
