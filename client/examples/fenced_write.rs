//! Take a lock and write through the fencing helper, the way a worker should.
//!
//! Needs the playground running (`scripts/run.sh`); it talks to the east gateway's gRPC
//! port 127.0.0.1:7000 and namespace `demo`:
//!
//! ```text
//! cargo run --example fenced_write            # HOLDFAST_ENDPOINTS, HOLDFAST_NS to override
//! ```
//!
//! It writes a batch under its lock, checking the lease before each step and
//! reporting progress after it; then shows what a zombie holder meets: after a newer
//! holder has written, a write with the old token is refused with `FenceError::Stale`.

use holdfast_client::{AcquireOptions, Client, SessionOptions};
use holdfast_fence::{FenceError, FencedStore, LockId, MemoryFence};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints = std::env::var("HOLDFAST_ENDPOINTS").unwrap_or_else(|_| "127.0.0.1:7000".into());
    let ns = std::env::var("HOLDFAST_NS").unwrap_or_else(|_| "demo".into());
    let endpoints: Vec<&str> = endpoints.split(',').collect();

    // The resource: in a real service, a RocksFence or a SQL table with a fence column.
    let ledger = MemoryFence::new("ledger");

    let client = Client::connect(&endpoints).await?;
    let ttl = Duration::from_secs(10);
    let session = client.create_session(SessionOptions::new(ns.as_str(), "default", ttl).label("fenced-write-example").progress_timeout(ttl)).await?;
    let lock = session.acquire("settle:batch-7", AcquireOptions::new().wait(Duration::from_secs(30)).value("example")).await?;
    let settle = LockId::new(lock.shard().clone(), lock.name().clone());
    println!("acquired {settle} with token {}", lock.token());

    // Fence out every older holder before the first real write.
    ledger.claim(&settle, lock.token())?;
    for item in 0..5u32 {
        // Stop at once if the lease is lost; the fence catches what slips through.
        lock.check()?;
        let key = format!("batch-7/item-{item}");
        ledger.write(&settle, lock.token(), key.as_bytes(), b"PAID")?;
        session.progress();
    }
    let old_token = lock.token();
    lock.release().await?;
    println!("wrote 5 items and released");

    // A newer holder writes; a write with the old token is then refused.
    let newer = session.acquire("settle:batch-7", AcquireOptions::new().wait(Duration::from_secs(30))).await?;
    ledger.write(&settle, newer.token(), b"batch-7/item-0", b"REFUNDED")?;
    match ledger.write(&settle, old_token, b"batch-7/item-0", b"PAID again") {
        Err(FenceError::Stale { presented, highest, .. }) => {
            println!("a write with the old token {presented} was refused: the resource has seen {highest}");
        }
        other => return Err(format!("expected a stale-token rejection, got {other:?}").into()),
    }
    newer.release().await?;
    session.close().await?;
    Ok(())
}
