//! The one routing path of every shard-addressed call: find the shard's cell in the
//! placement cache, call its leader with the epoch the gateway believes in, and when
//! the cell says the belief is stale (`STALE_EPOCH`, `NOT_OWNER`, `UNKNOWN_SHARD`),
//! ask the registry once and retry once. Leader hints are the wire edge's business
//! (`holdfast_rpc::Upstream`, configured members only); a hint never leaves the
//! gateway, since it names a cell node the gateway's clients are not meant to call.

use crate::placement::{Owner, Placement};
use holdfast_core::metric_names as m;
use holdfast_core::{ErrorCode, ShardKey};
use holdfast_rpc::status::status;
use holdfast_rpc::{Budget, CallError, Channel};
use std::future::Future;
use std::sync::Arc;
use tracing::{debug, Instrument};

/// The cell does not serve the shard as the gateway believed.
fn disowned(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::StaleEpoch | ErrorCode::NotOwner | ErrorCode::UnknownShard | ErrorCode::UnknownNamespace)
}

/// Calls `f(channel, owner)` on the leader of `key`'s cell (see the module doc).
pub async fn on_shard<T, F, Fut>(placement: &Arc<Placement>, key: &ShardKey, budget: Budget, f: F) -> Result<T, CallError>
where
    F: Fn(Channel, Owner) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    route(placement, key, budget, true, f).await.map_err(CallError::without_hint)
}

/// Like [`on_shard`], but the cell's answer stands as it is: for a renewal, a cell
/// that does not serve the session's shard at its epoch means the session was left
/// behind by a move (`NOT_OWNER`), which its client must hear, not a stale route.
pub async fn at_owner<T, F, Fut>(placement: &Arc<Placement>, key: &ShardKey, budget: Budget, f: F) -> Result<T, CallError>
where
    F: Fn(Channel, Owner) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    route(placement, key, budget, false, f).await.map_err(CallError::without_hint)
}

/// One upstream attempt, timed (`holdfast_gateway_upstream_duration_seconds{target}`).
pub async fn timed<T>(target: &'static str, attempt: impl Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let answer = attempt.await;
    metrics::histogram!(m::GATEWAY_UPSTREAM_DURATION, "target" => target).record(started.elapsed().as_secs_f64());
    answer
}

async fn route<T, F, Fut>(placement: &Arc<Placement>, key: &ShardKey, budget: Budget, refresh: bool, f: F) -> Result<T, CallError>
where
    F: Fn(Channel, Owner) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut owner = match placement.owner(key) {
        Some(o) => o,
        None => placement.refresh_shard(key).await?,
    };
    let mut refreshed = !refresh;
    loop {
        let Some(cell) = placement.cell(&owner.cell) else {
            return Err(CallError::Unreachable(format!("cell {} of shard {key} has no known members", owner.cell)));
        };
        let o = owner.clone();
        let called = cell
            .call(budget, |ch| timed("cell", f(ch, o.clone())))
            .instrument(tracing::info_span!("gateway.upstream", cell = %owner.cell, epoch = owner.epoch))
            .await;
        match called {
            Ok(called) => return Ok(called.value),
            Err(CallError::Refused { code, status: s }) if disowned(code) && !refreshed => {
                metrics::counter!(m::GATEWAY_STALE_ROUTES, "ns" => key.ns.to_string()).increment(1);
                debug!(shard = %key, cell = %owner.cell, epoch = owner.epoch, answer = %s.message(), "stale placement; asking the registry");
                owner = placement.refresh_shard(key).await?;
                refreshed = true;
            }
            // The registry, asked just now, places the shard on this very cell, which
            // does not serve it yet: it is adopting it (its next ownership renewal).
            Err(CallError::Refused { code, status: s }) if disowned(code) && refresh => {
                return Err(CallError::Refused {
                    code: ErrorCode::Moving,
                    status: status(
                        ErrorCode::Moving,
                        format!("shard {key} is being adopted by cell {} at epoch {} ({}); retry", owner.cell, owner.epoch, s.message()),
                    ),
                })
            }
            Err(e) => return Err(e),
        }
    }
}
