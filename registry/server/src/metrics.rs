//! What a registry voter measures, under the names of `holdfast_core::metric_names`:
//! its Raft health, and on the leader the moves in progress and the age of the oldest
//! (`holdfast_registry_moves_in_progress`, `holdfast_registry_move_age_seconds_max`).
//! A move's age is counted from when this leader first saw it in progress: the state
//! records no start time, so a new leader starts the count again (an alert on a stuck
//! evacuation fires later after an election, never falsely). Ownership lease lapses
//! are counted where the transfer they cause is committed (`leader.rs`).

use crate::registry::Registry;
use holdfast_core::metric_names as m;
use holdfast_core::ShardKey;
use holdfast_rpc::CancellationToken;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REFRESH: Duration = Duration::from_secs(1);

/// Refreshes the gauges every second until `shutdown`.
pub async fn refresh(reg: Arc<Registry>, shutdown: CancellationToken) {
    let mut first_seen: HashMap<ShardKey, Instant> = HashMap::new();
    loop {
        reg.group.record_health("registry");
        let now = Instant::now();
        if reg.assume_leader().is_ok() {
            let moving: Vec<ShardKey> =
                reg.group.state().read(|mach| mach.state().list_shards().filter(|(_, r)| r.moving().is_some()).map(|(k, _)| k.clone()).collect());
            first_seen.retain(|k, _| moving.contains(k));
            for k in moving {
                first_seen.entry(k).or_insert(now);
            }
        } else {
            first_seen.clear();
        }
        let oldest = first_seen.values().map(|t| now.duration_since(*t)).max().unwrap_or_default();
        metrics::gauge!(m::MOVES_IN_PROGRESS).set(first_seen.len() as f64);
        metrics::gauge!(m::MOVE_AGE_MAX).set(oldest.as_secs_f64());
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
