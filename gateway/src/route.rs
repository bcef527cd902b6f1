//! The one routing path of every shard-addressed call: find the shard's cell in the
//! placement cache, call its leader with the epoch the gateway believes in, and when
//! the cell says the belief is stale (`STALE_EPOCH`, `NOT_OWNER`, `UNKNOWN_SHARD`),
//! ask the registry once and retry once. Leader hints are the upstream's business.

use crate::placement::{Owner, Placement};
use holdfast_client::upstream::CallError;
use holdfast_core::metric_names as m;
use holdfast_core::{ErrorCode, ShardKey};
use holdfast_proto::status::{code_of, status};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;
use tracing::debug;

/// The cell does not serve the shard as the gateway believed.
fn disowned(s: &tonic::Status) -> bool {
    matches!(code_of(s), Some(ErrorCode::StaleEpoch | ErrorCode::NotOwner | ErrorCode::UnknownShard | ErrorCode::UnknownNamespace))
}

/// Calls `f(channel, owner)` on the leader of `key`'s cell (see the module doc).
pub async fn on_shard<T, F, Fut>(placement: &Arc<Placement>, key: &ShardKey, budget: Duration, f: F) -> Result<T, CallError>
where
    F: Fn(Channel, Owner) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut owner = match placement.owner(key) {
        Some(o) => o,
        None => placement.refresh_shard(key).await?,
    };
    let mut refreshed = false;
    loop {
        let Some(cell) = placement.cell(&owner.cell) else {
            return Err(CallError::Unreachable(format!("cell {} of shard {key} has no known members", owner.cell)));
        };
        let o = owner.clone();
        match cell.call(budget, |ch| f(ch, o.clone())).await {
            Err(CallError::Answered(s)) if disowned(&s) && !refreshed => {
                metrics::counter!(m::GATEWAY_STALE_ROUTES, "ns" => key.ns.to_string()).increment(1);
                debug!(shard = %key, cell = %owner.cell, epoch = owner.epoch, answer = %s.message(), "stale placement; asking the registry");
                owner = placement.refresh_shard(key).await?;
                refreshed = true;
            }
            // The registry, asked just now, places the shard on this very cell, which
            // does not serve it yet: it is adopting it (its next ownership renewal).
            Err(CallError::Answered(s)) if disowned(&s) => {
                return Err(CallError::Answered(status(
                    ErrorCode::Moving,
                    format!("shard {key} is being adopted by cell {} at epoch {} ({}); retry", owner.cell, owner.epoch, s.message()),
                    None,
                )))
            }
            other => return other,
        }
    }
}
