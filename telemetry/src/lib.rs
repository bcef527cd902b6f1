//! holdfast-telemetry: the Prometheus recorder, every metric's description, and the
//! small HTTP endpoint (`/metrics`, `/healthz`, `/readyz`) that every holdfast process
//! serves. The metric names themselves live in `holdfast_core::metric_names`
//! (re-exported here as [`names`]), where the SDK and the gateway can reach them too.
//!
//! Recording goes through the `metrics` facade (`metrics::counter!(names::X, ...)`);
//! this crate installs the Prometheus recorder once per process and describes every
//! name, so `promtool check metrics` finds a HELP and TYPE line for each. Names follow
//! docs/design.md ("Metrics"); the `holdfast_` ones are ours.
//!
//! Traces: [`traces`] builds the OTLP pipeline a process installs under its
//! `tracing` subscriber (off unless an endpoint is configured).
//!
//! What does not live here: deciding what to measure (each server does), the
//! subscriber itself (the command line's), trace propagation (`holdfast_rpc::trace`).

pub mod traces;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use holdfast_core::metric_names as names;

/// Latency buckets, seconds: from a fast in-region grant (sub-ms) to a long wait.
const BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// The stages of one Raft write: an fsync here takes ~0.15 ms, a whole write ~1 ms,
/// so the buckets start at 50 µs.
const RAFT_BUCKETS: &[f64] = &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];
/// Holds, queue waits and overlaps: seconds to hours.
const LONG_BUCKETS: &[f64] = &[0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0];
/// A gauge not set for this long is dropped from `/metrics`: the series of a lock
/// that no longer has waiters, a shard this cell no longer serves. Every gauge a
/// server keeps is refreshed at least every few seconds, so only gone ones lapse.
const GAUGE_IDLE: Duration = Duration::from_secs(60);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls return the same
/// handle) and describes every name.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let mut builder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .expect("static buckets are valid")
                .idle_timeout(metrics_util::MetricKindMask::GAUGE, Some(GAUGE_IDLE));
            for (name, buckets) in per_metric_buckets() {
                builder = builder.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets).expect("static buckets are valid");
            }
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a test harness); then ours
            // only renders what it records, which is still a valid exposition.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics shows only holdfast's own handle");
            }
            describe();
            handle
        })
        .clone()
}

fn per_metric_buckets() -> [(&'static str, &'static [f64]); 8] {
    use names::*;
    [
        (RAFT_FSYNC, RAFT_BUCKETS),
        (RAFT_STAGE, RAFT_BUCKETS),
        (RAFT_REPLICATE, RAFT_BUCKETS),
        (RAFT_FOLLOWER_APPEND, RAFT_BUCKETS),
        (RAFT_PROPOSE, RAFT_BUCKETS),
        (HOLD_TIME, LONG_BUCKETS),
        (ACQUIRE_WAIT, LONG_BUCKETS),
        (HOLDER_OVERLAP, LONG_BUCKETS),
    ]
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    use names::*;
    describe_histogram!(
        ACQUIRE_LATENCY,
        Unit::Seconds,
        "Service time of a granted Acquire at the cell, by namespace: from the call's arrival to its answer, less the time it waited in the lock's queue."
    );
    describe_counter!(ACQUIRE_ERRORS, "Acquire calls answered with an error, by namespace and stable error code.");
    describe_counter!(RENEW_FAILURES, "Session renewals that failed, by namespace.");
    describe_counter!(LEASE_EXPIRED_WHILE_HELD, "Sessions the client found lost while it still held a lock, by namespace (SDK).");
    describe_counter!(FENCING_REJECTIONS, "Writes a fenced resource refused because their token was stale, by resource.");
    describe_gauge!(WAITERS, "Acquires queued for a lock, by namespace and lock (only locks that have or had waiters).");
    describe_histogram!(ACQUIRE_WAIT, Unit::Seconds, "Time a granted acquire spent in the lock's queue, by namespace.");
    describe_histogram!(HOLD_TIME, Unit::Seconds, "How long a hold lasted, by namespace (SDK: from grant to release).");
    describe_gauge!(AGE_MAX, Unit::Seconds, "Age of the oldest current hold in the namespace, by the leader's wall clock.");
    describe_gauge!(NAMESPACE_KEYS, "Lock records the namespace has in this cell (counted against max_keys).");
    describe_counter!(ADMIN_BREAK, "Locks broken by an administrator, by namespace.");
    describe_gauge!(RAFT_HAS_LEADER, "1 if this node knows a leader of its Raft group, else 0.");
    describe_gauge!(RAFT_IS_LEADER, "1 if this node leads its Raft group, else 0.");
    describe_gauge!(RAFT_TERM, "This node's current Raft term.");
    describe_gauge!(RAFT_COMMIT_INDEX, "The highest log index this node knows committed.");
    describe_gauge!(RAFT_APPLIED_INDEX, "The highest log index this node has applied.");
    describe_gauge!(BUILD_INFO, "Always 1; its labels say which release (version) and commit this process runs.");
    describe_gauge!(
        CERT_NOT_AFTER,
        Unit::Seconds,
        "When a certificate stops being valid (its notAfter, Unix seconds): certificate=own for the one this process presents, ca for the earliest-ending one of the CA bundle it trusts; file is the file it was read from. Rotated certificates show their new date within a second of a connection."
    );
    describe_histogram!(RAFT_FSYNC, Unit::Seconds, "Duration of the synced RocksDB writes of the Raft log (votes and appends).");
    describe_histogram!(
        RAFT_PROPOSE,
        Unit::Seconds,
        "On a leader: from proposing an entry to having its applied result (append, replication to a quorum, commit, apply), committed proposals only."
    );
    describe_gauge!(SHARD_EPOCH, "The ownership epoch at which this cell serves a shard, by namespace and shard.");
    describe_gauge!(
        OWNERSHIP_LEASE_REMAINING,
        Unit::Seconds,
        "On a cell's leader: how long its ownership lease from the registry has left (less its margin); renewed every second, so it stays near the lease (35 minutes) unless the registry is away. 0 on followers."
    );
    describe_counter!(SESSIONS_EXPIRED, "Sessions this cell expired because their countdown ran out, by namespace.");
    describe_counter!(GATEWAY_STALE_ROUTES, "Calls a cell refused because the gateway's placement was stale (refreshed and retried once), by namespace.");
    describe_counter!(
        GATEWAY_UNFENCED_GRANTS,
        "Acquires answered with an unfenced grant because the cell was unreachable and the namespace is fail-open, by namespace."
    );
    describe_counter!(GATEWAY_RATE_LIMITED, "Acquires refused with RATE_LIMITED, by namespace.");
    describe_histogram!(
        RAFT_STAGE,
        Unit::Seconds,
        "On a leader, the stages of a committed proposal by stage: append (the leader's log write and fsync), commit (from the append's start until a quorum has it), apply (the state machine)."
    );
    describe_histogram!(
        RAFT_REPLICATE,
        Unit::Seconds,
        "On a leader: the round trip of an AppendEntries that carries entries, from sending it to a follower to having its answer (network both ways and the follower's append)."
    );
    describe_histogram!(
        RAFT_FOLLOWER_APPEND,
        Unit::Seconds,
        "On a follower: an AppendEntries that carries entries, from its arrival to its answer (the entries written and synced)."
    );
    describe_counter!(
        RAFT_DISK_REFUSED,
        "Raft requests this node refused because they name another disk than its own: it came back on an empty or different data directory under an id its group knows (docs/runbooks/lost-volume.md)."
    );
    describe_counter!(
        OWNERSHIP_LEASE_LAPSES,
        "Shards the registry transferred because their cell's ownership lease ran out (an unplanned move completed), by the cell that lost them."
    );
    describe_counter!(
        AUTO_FAILOVER_MOVES,
        "Moves the registry leader began by automatic failover (a namespace's opt-in): the shards of a cell that stopped renewing, once their lease ran out; by the cell they left."
    );
    describe_gauge!(MOVES_IN_PROGRESS, "Shard moves the registry has begun and not finished (registry leader; followers report 0).");
    describe_gauge!(MOVE_AGE_MAX, Unit::Seconds, "Age of the oldest shard move in progress, 0 when none (registry leader).");
    describe_counter!(GATEWAY_REQUESTS, "Calls answered at the gateway's front door, by front (grpc, http), route and stable code (OK on success).");
    describe_histogram!(GATEWAY_REQUEST_DURATION, Unit::Seconds, "Time from a call's arrival at the gateway to its answer, by front and route.");
    describe_histogram!(GATEWAY_UPSTREAM_DURATION, Unit::Seconds, "One upstream attempt of the gateway, by target (cell, registry).");
    describe_counter!(
        GATEWAY_FAIL_CLOSED,
        "Acquires refused with UNAVAILABLE because the cell was unreachable and the namespace is fail-closed, by namespace."
    );
    describe_counter!(GATEWAY_PLACEMENT_REFRESHES, "Placement reads from the registry, by scope (all, shard) and result (ok, error).");
    describe_counter!(
        GATEWAY_OWNER_LOOKUPS,
        "GetOwner answers, by source: the gateway's placement cache, or the registry (fresh, or a shard the cache does not know)."
    );
    describe_gauge!(GATEWAY_PLACEMENT_AGE, Unit::Seconds, "Seconds since the gateway last listed the whole placement from the registry.");
    describe_histogram!(
        HOLDER_OVERLAP,
        Unit::Seconds,
        "At a fenced resource, by namespace: a write with an older token arrived this long after the first write of a newer one (two holders acted at once)."
    );
    describe_gauge!(
        HELD_WITHOUT_PROGRESS,
        Unit::Seconds,
        "SDK, by namespace: the longest time a lock held by this process has gone without its worker reporting progress (locks that report progress)."
    );
    describe_gauge!(CHECKPOINT_SESSIONS, "Sessions listed in the last checkpoint the leader proposed (sessions that did not renew).");
}

/// Is this process ready to serve? `/readyz` answers 200 when it says so.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

/// Drains histogram samples every few seconds, even if nobody scrapes. Runs forever:
/// run it as a task of the server that serves [`router`].
pub async fn upkeep() {
    let handle = install();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// `/metrics`, `/healthz` and `/readyz` as a router, served by the wire edge
/// (`holdfast_rpc::Transport::serve_http`) on a node's metrics port or merged into the
/// gateway's HTTP port. Installs the recorder if it is not yet.
pub fn router(ready: Readiness) -> Router {
    Router::new().route("/metrics", get(metrics_text)).route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state((install(), ready))
}

type AppState = (PrometheusHandle, Readiness);

async fn metrics_text(State((handle, _)): State<AppState>) -> impl IntoResponse {
    // Set at each scrape: the recorder drops a gauge not set for a minute.
    metrics::gauge!(names::BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "commit" => BUILD_COMMIT).set(1.0);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render())
}

/// The commit this binary was built from: `HOLDFAST_COMMIT` in the build's
/// environment (`HOLDFAST_COMMIT=$(git rev-parse --short HEAD) cargo build --release`),
/// else `unknown`.
const BUILD_COMMIT: &str = match option_env!("HOLDFAST_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

async fn readyz(State((_, ready)): State<AppState>) -> impl IntoResponse {
    if ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let resp = router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn serves_described_metrics_and_readiness() {
        let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = ready.clone();
        install(); // before anything records, as a process does at start
        let app = router(Arc::new(move || r2.load(std::sync::atomic::Ordering::SeqCst)));
        metrics::counter!(names::ADMIN_BREAK, "ns" => "pay").increment(2);
        let (_, text) = get(&app, "/metrics").await;
        assert!(text.contains("# TYPE lock_admin_break_total counter"), "{text}");
        assert!(text.contains("lock_admin_break_total{ns=\"pay\"} 2"), "{text}");
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        ready.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    }
}
