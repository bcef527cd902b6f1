//! What a cell measures, under the names of `holdfast_core::metric_names`. Recording
//! is through the `metrics` facade; `holdfast-telemetry` renders `/metrics`.
//!
//! Per-call metrics are recorded by the node that answered the call. Gauges of the lock
//! table (keys, waiters, oldest hold, shard epochs) are the leader's: a follower sets
//! them to zero, so summing a cell's nodes counts each lock once. They count the locks
//! of the log's table and of the leader's volatile table (efficiency namespaces).

use crate::cell::{wall_clock_ms, Cell};
use holdfast_core::metric_names as m;
use holdfast_core::NamespaceName;
use holdfast_rpc::CancellationToken;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;

const REFRESH: Duration = Duration::from_secs(1);

/// An Acquire call was answered, after `queued` in the lock's queue: a grant's
/// latency is its service time (arrival to answer, less the queue), so the in-region
/// envelope ("p99 under 10 ms") is read from it however long locks are held; the
/// queue is `lock_acquire_wait_seconds` ([`waited`]).
pub fn acquire_answered<T>(ns: &NamespaceName, started: Instant, queued: Duration, result: &Result<T, Status>) {
    match result {
        Ok(_) => metrics::histogram!(m::ACQUIRE_LATENCY, "ns" => ns.to_string()).record(started.elapsed().saturating_sub(queued).as_secs_f64()),
        Err(s) => {
            let code = holdfast_rpc::status::code_of(s).unwrap_or(holdfast_core::ErrorCode::Unavailable);
            metrics::counter!(m::ACQUIRE_ERRORS, "ns" => ns.to_string(), "code" => code.as_str()).increment(1);
        }
    }
}

/// A queued acquire was granted after waiting this long.
pub fn waited(ns: &NamespaceName, queued_for: Duration) {
    metrics::histogram!(m::ACQUIRE_WAIT, "ns" => ns.to_string()).record(queued_for.as_secs_f64());
}

pub fn lock_broken(ns: &NamespaceName) {
    metrics::counter!(m::ADMIN_BREAK, "ns" => ns.to_string()).increment(1);
}

pub fn session_expired(ns: &NamespaceName) {
    metrics::counter!(m::SESSIONS_EXPIRED, "ns" => ns.to_string()).increment(1);
}

/// Refreshes the Raft and lock-table gauges every second until `shutdown`.
pub async fn refresh(cell: Arc<Cell>, cell_name: String, shutdown: CancellationToken) {
    // Series this node has set, so it can zero them when they go away.
    let mut waiters_seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut ns_seen: BTreeSet<String> = BTreeSet::new();
    let mut shards_seen: BTreeSet<(String, String)> = BTreeSet::new();
    loop {
        cell.group.record_health(&cell_name);
        let leads = cell.assume_leader().is_ok();
        // How long this leader's ownership lease has left (0 on a follower, and on a
        // leader that has not renewed): the clock a registry outage runs against.
        if let Some(left) = cell.ownership_lease_left() {
            metrics::gauge!(m::OWNERSHIP_LEASE_REMAINING, "cell" => cell_name.clone()).set(left.as_secs_f64());
        }

        let stats = cell.lock_stats();
        let shards = cell.group.state().read(|mach| mach.state().shards().collect::<Vec<_>>());
        let now_ms = wall_clock_ms();
        let mut waiters_now = BTreeSet::new();
        let mut ns_now = BTreeSet::new();
        let mut shards_now = BTreeSet::new();
        if leads {
            for (ns, st) in &stats {
                let ns = ns.to_string();
                metrics::gauge!(m::NAMESPACE_KEYS, "ns" => ns.clone()).set(st.keys as f64);
                let age = st.oldest_grant_unix_ms.map_or(0, |g| now_ms.saturating_sub(g));
                metrics::gauge!(m::AGE_MAX, "ns" => ns.clone()).set(age as f64 / 1000.0);
                for (name, n) in &st.waiting {
                    metrics::gauge!(m::WAITERS, "ns" => ns.clone(), "name" => name.to_string()).set(*n as f64);
                    waiters_now.insert((ns.clone(), name.to_string()));
                }
                ns_now.insert(ns);
            }
            for s in &shards {
                let key = (s.key.ns.to_string(), s.key.shard.to_string());
                let epoch = if s.sealed { 0.0 } else { f64::from(s.epoch.0) };
                metrics::gauge!(m::SHARD_EPOCH, "ns" => key.0.clone(), "shard" => key.1.clone()).set(epoch);
                shards_now.insert(key);
            }
        }
        for (ns, name) in waiters_seen.difference(&waiters_now) {
            metrics::gauge!(m::WAITERS, "ns" => ns.clone(), "name" => name.clone()).set(0.0);
        }
        for ns in ns_seen.difference(&ns_now) {
            metrics::gauge!(m::NAMESPACE_KEYS, "ns" => ns.clone()).set(0.0);
            metrics::gauge!(m::AGE_MAX, "ns" => ns.clone()).set(0.0);
        }
        for (ns, shard) in shards_seen.difference(&shards_now) {
            metrics::gauge!(m::SHARD_EPOCH, "ns" => ns.clone(), "shard" => shard.clone()).set(0.0);
        }
        // A series that went away is zeroed once; the recorder keeps it at zero.
        waiters_seen = waiters_now;
        ns_seen.extend(ns_now);
        shards_seen.extend(shards_now);
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
