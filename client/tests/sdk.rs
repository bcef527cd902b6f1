//! The SDK against a real 3-node cell over gRPC on loopback. Each test reads as
//! phases; its name says which failure it pins.

mod common;

use common::*;
use holdfast_client::{AcquireOptions, Client, ErrorCode, LossReason, SessionOptions};
use holdfast_core::metric_names::LEASE_EXPIRED_WHILE_HELD;
use holdfast_fence::{FenceError, FencedStore, LockId, MemoryFence};
use std::time::{Duration, Instant};
use tracing::info;

fn opts(ttl: Duration) -> SessionOptions {
    SessionOptions::new("pay", "default", ttl).label("sdk-test")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_session_outlives_its_ttl_and_reacquire_gets_a_larger_token() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    // 3 s, not 2: the window between renewals (TTL/3) must absorb a slow commit on a
    // 2-core machine that is also compiling.
    let ttl = Duration::from_secs(3);
    let expired_before = counter(LEASE_EXPIRED_WHILE_HELD);

    info!("--- acquire");
    let session = client.create_session(opts(ttl)).await.unwrap();
    let lock = session.acquire("settle", AcquireOptions::new().value("worker-a")).await.unwrap();
    let t1 = lock.token();
    assert_eq!(lock.value(), b"worker-a");
    assert_eq!(cell.holders("settle").await, vec![(session.id().0, t1.0)]);

    info!("--- hold for three TTLs: the renewal task keeps the session, no loss is reported");
    let quiet = tokio::time::timeout(ttl * 3, lock.lost()).await;
    assert!(quiet.is_err(), "the session reported a loss while renewing: {quiet:?}");
    assert!(!lock.is_lost() && lock.check().is_ok());
    assert!(session.time_left().unwrap() > ttl / 3, "a renewed session has most of its window left");
    assert_eq!(cell.holders("settle").await, vec![(session.id().0, t1.0)], "the cell still lists the holder");

    info!("--- release, re-acquire: the token grows");
    lock.release().await.unwrap();
    assert_eq!(cell.holders("settle").await, vec![]);
    let again = session.acquire("settle", AcquireOptions::new()).await.unwrap();
    assert!(again.token() > t1, "{} should exceed {}", again.token(), t1);
    again.release().await.unwrap();

    info!("--- a held lock answers LOCK_HELD to another session that does not wait");
    let other = client.create_session(opts(ttl)).await.unwrap();
    let held = session.acquire("settle", AcquireOptions::new()).await.unwrap();
    let refused = other.acquire("settle", AcquireOptions::new()).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LockHeld), "{refused}");
    held.release().await.unwrap();

    info!("--- close: the loss signal fires as Closed and counts no expiry");
    session.close().await.unwrap();
    assert!(session.is_lost());
    assert_eq!(session.loss_reason(), Some(LossReason::Closed));
    assert_eq!(counter(LEASE_EXPIRED_WHILE_HELD), expired_before);
    drop(other);
    cell.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_holder_is_told_before_expiry_and_its_stale_write_is_fenced() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    let ttl = Duration::from_secs(2);
    let ledger = MemoryFence::new("ledger");
    let expired_before = counter(LEASE_EXPIRED_WHILE_HELD);

    info!("--- A acquires and writes through the fence");
    let a = client.create_session(opts(ttl).progress_timeout(Duration::from_millis(300))).await.unwrap();
    let lock_a = a.acquire("settle", AcquireOptions::new().value("worker-a")).await.unwrap();
    let ta = lock_a.token();
    let settle = LockId::new(lock_a.shard().clone(), lock_a.name().clone());
    ledger.write(&settle, ta, b"batch-7", b"PAYING by A").unwrap();
    a.progress();

    info!("--- A's worker stalls (stuck I/O): it stops reporting progress, so the SDK stops renewing");
    let reason = tokio::time::timeout(WAIT, lock_a.lost()).await.expect("A never reported the loss");
    assert_eq!(reason, LossReason::NoProgress);
    info!("--- the loss is reported before the cell's expiry: the cell still lists A");
    assert_eq!(cell.holders("settle").await, vec![(a.id().0, ta.0)]);
    assert!(lock_a.is_lost() && lock_a.check().is_err());
    assert_eq!(counter(LEASE_EXPIRED_WHILE_HELD), expired_before + 1.0, "lock_lease_expired_while_held_total counts it");

    info!("--- B waits in the cell's queue and gets the lock after A expires, with a larger token");
    let b = client.create_session(opts(ttl)).await.unwrap();
    let lock_b = b.acquire("settle", AcquireOptions::new().wait(WAIT).value("worker-b")).await.unwrap();
    assert!(lock_b.token() > ta, "{} should exceed {}", lock_b.token(), ta);
    ledger.write(&settle, lock_b.token(), b"batch-7", b"PAID by B").unwrap();

    info!("--- A wakes up and writes with its old token: the fence rejects it");
    let err = ledger.write(&settle, ta, b"batch-7", b"PAID by A").unwrap_err();
    assert!(matches!(err, FenceError::Stale { presented, highest, .. } if presented == ta && highest == lock_b.token()), "{err}");
    assert_eq!(ledger.read(b"batch-7").unwrap().unwrap().value, b"PAID by B");

    info!("--- A's late release cannot touch B's hold");
    let late = lock_a.release().await.unwrap_err();
    assert_eq!(late.code(), Some(ErrorCode::NotHolder), "{late}");
    assert_eq!(cell.holders("settle").await, vec![(b.id().0, lock_b.token().0)]);
    lock_b.release().await.unwrap();
    cell.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_retried_across_a_leader_kill_never_grants_twice() {
    let _g = serial().await;
    let mut cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    // The SDK keeps a session through an outage of at most 2/3 TTL minus the time
    // since the last renewal (up to TTL/3). A leader kill here costs about 3 s (the
    // followers wait out the leader lease, then elect), so the TTL must exceed ~10 s.
    let ttl = Duration::from_secs(15);
    let a = client.create_session(opts(ttl)).await.unwrap();
    let b = client.create_session(opts(ttl)).await.unwrap();

    info!("--- A acquires under a request id of its own");
    let first = a.acquire("job", AcquireOptions::new().request_id("job-42")).await.unwrap();
    let t1 = first.token();

    info!("--- kill the leader");
    let l1 = cell.leader().await;
    cell.stop_node(l1).await;

    info!("--- B acquires during the election: retried through the dead node and NOT_LEADER, granted once");
    let started = Instant::now();
    let lock_b = b.acquire("other", AcquireOptions::new()).await.unwrap();
    info!(elapsed = ?started.elapsed(), "B granted");
    // Tokens of a shard count every grant: exactly one grant happened since A's.
    assert_eq!(lock_b.token().0, t1.0 + 1, "one grant for B, however many attempts");

    info!("--- A sends its request id again: the same token, not a second hold");
    let again = a.acquire("job", AcquireOptions::new().request_id("job-42")).await.unwrap();
    assert_eq!(again.token(), t1);
    assert_eq!(cell.holders("job").await, vec![(a.id().0, t1.0)]);
    assert_eq!(cell.holders("other").await, vec![(b.id().0, lock_b.token().0)]);

    info!("--- both sessions survived the leader change");
    assert!(!a.is_lost() && !b.is_lost());
    again.release().await.unwrap();
    drop(first); // the same hold: its background release is a harmless repeat
    lock_b.release().await.unwrap();
    cell.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lock_is_released_without_waiting_for_the_ttl() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    let ttl = Duration::from_secs(3);
    let a = client.create_session(opts(ttl)).await.unwrap();
    let b = client.create_session(opts(ttl)).await.unwrap();

    info!("--- A acquires and drops the guard; A's session stays alive");
    let lock = a.acquire("drop-me", AcquireOptions::new()).await.unwrap();
    let ta = lock.token();
    let dropped = Instant::now();
    drop(lock);

    info!("--- B, waiting in the queue, is granted long before A's TTL could matter");
    let lock_b = b.acquire("drop-me", AcquireOptions::new().wait(WAIT)).await.unwrap();
    assert!(lock_b.token() > ta);
    assert!(dropped.elapsed() < ttl, "granted after {:?}: that was an expiry, not the drop", dropped.elapsed());
    assert!(!a.is_lost(), "dropping a lock does not end its session");
    lock_b.release().await.unwrap();

    info!("--- dropping a session and its lock closes the session, which frees its locks at once");
    let c = client.create_session(opts(ttl)).await.unwrap();
    let lock_c = c.acquire("drop-me-too", AcquireOptions::new()).await.unwrap();
    let c_id = c.id().0;
    drop(c);
    assert_eq!(cell.holders("drop-me-too").await, vec![(c_id, lock_c.token().0)], "the lock keeps its session");
    let dropped = Instant::now();
    drop(lock_c);
    let lock_a = a.acquire("drop-me-too", AcquireOptions::new().wait(WAIT)).await.unwrap();
    assert!(dropped.elapsed() < ttl, "granted after {:?}", dropped.elapsed());
    lock_a.release().await.unwrap();
    cell.shutdown().await;
}

/// The value of `lock_held_without_progress_seconds{ns="pay"}` in this process.
fn without_progress() -> Option<f64> {
    let text = holdfast_telemetry::install().render();
    text.lines().find(|l| l.starts_with("lock_held_without_progress_seconds{") && l.contains("ns=\"pay\"")).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_worker_stops_reporting_progress_shows_in_the_gauge() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    let session = client.create_session(opts(Duration::from_secs(3)).progress_timeout(Duration::from_secs(30))).await.unwrap();
    let lock = session.acquire("reindex", AcquireOptions::new()).await.unwrap();
    session.progress();

    info!("--- no progress for 2.5 s while holding: the gauge climbs (refreshed at each renewal)");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let stalled = without_progress().expect("the gauge is set for a holder that reports progress");
    assert!(stalled >= 0.9, "{stalled}");

    info!("--- progress again: the gauge falls at the next renewal");
    session.progress();
    let end = Instant::now() + Duration::from_secs(5);
    while without_progress().is_none_or(|v| v >= 0.9) {
        assert!(Instant::now() < end, "the gauge did not fall after progress: {:?}", without_progress());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    info!("--- released: the session holds nothing, and the gauge is back to 0 when it ends");
    lock.release().await.unwrap();
    session.close().await.unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while without_progress() != Some(0.0) {
        assert!(Instant::now() < end, "{:?}", without_progress());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cell.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_cell_ends_is_signalled_to_its_holder_while_its_session_lives() {
    let _g = serial().await;
    let max_hold = Duration::from_millis(2_500);
    let cell = TestCell::start_with(0, max_hold.as_millis() as u64).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    let session = client.create_session(opts(Duration::from_secs(3))).await.unwrap();

    info!("--- broken by an administrator: the holder is told Broken");
    let lock = session.acquire("broken", AcquireOptions::new()).await.unwrap();
    let told = lock.loss_token();
    assert!(tokio::time::timeout(Duration::from_millis(500), lock.lost()).await.is_err(), "a live hold reported lost");
    cell.break_lock("broken").await;
    let reason = tokio::time::timeout(Duration::from_secs(10), lock.lost()).await.expect("the break was not signalled");
    assert_eq!(reason, LossReason::Broken);
    assert!(told.is_cancelled() && lock.is_lost());
    assert!(matches!(lock.check(), Err(holdfast_client::Error::HoldEnded { reason: LossReason::Broken, .. })), "{:?}", lock.check());
    assert!(!session.is_lost() && session.check().is_ok(), "the session lives on");

    info!("--- the namespace's max hold: quiet before it, MaxHold after");
    let long = session.acquire("long", AcquireOptions::new()).await.unwrap();
    let granted = Instant::now();
    assert!(tokio::time::timeout(max_hold / 2, long.lost()).await.is_err(), "lost before the max hold");
    let reason = tokio::time::timeout(Duration::from_secs(15), long.lost()).await.expect("the max hold's end was not signalled");
    assert_eq!(reason, LossReason::MaxHold);
    assert!(granted.elapsed() >= max_hold - Duration::from_millis(100), "ended after {:?}", granted.elapsed());
    assert_eq!(long.loss_reason(), Some(LossReason::MaxHold));
    assert!(!session.is_lost());

    info!("--- an end before anyone listened is still told, by the token's status");
    let early = session.acquire("early", AcquireOptions::new()).await.unwrap();
    cell.break_lock("early").await;
    let reason = tokio::time::timeout(Duration::from_secs(10), early.lost()).await.expect("an end before the watch was not told");
    assert_eq!(reason, LossReason::Broken);

    drop((lock, long, early));
    session.close().await.unwrap();
    cell.shutdown().await;
}

/// A client's sessions of one shard renew in batched messages on one KeepAlive stream
/// (`client/src/renewals.rs`), not one stream or message per renewal; when the leader
/// dies the stream ends, and every session renews at the new leader on a new stream,
/// none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_renew_on_one_stream_per_shard_and_move_with_the_leader() {
    let _g = serial().await;
    let mut cell = TestCell::start(0).await;
    let client = Client::connect(&cell.endpoints()).await.unwrap();
    // As in the leader-kill test: the outage (~3 s) must fit in 2/3 TTL minus TTL/3.
    let ttl = Duration::from_secs(15);
    let mut sessions = Vec::new();
    for _ in 0..20 {
        sessions.push(client.create_session(opts(ttl)).await.unwrap());
    }
    // A session's deadline is 2/3 TTL after its last confirmed renewal was sent, so a
    // deadline beyond `at + 2/3 TTL` means a renewal sent after `at`.
    let all_renewed_after = |sessions: &[holdfast_client::Session], at: Instant| {
        sessions.iter().all(|s| s.time_left().is_some_and(|left| Instant::now() + left > at + ttl * 2 / 3))
    };
    let created = Instant::now();

    info!("--- each session renews; all renewals on one stream, in a few batched messages");
    eventually("every session renewed", || async { all_renewed_after(&sessions, created) }).await;
    assert_eq!(client.renewal_streams(), 1, "one stream for the shard's sessions");
    // Created within a step or two of the renewal grid (TTL/60 = 250 ms), the 20
    // sessions renew in one message per step, not one each.
    let messages = client.renewal_messages();
    assert!((1..=4).contains(&messages), "{messages} KeepAlive messages for the first renewal of 20 sessions");

    info!("--- kill the leader: the stream ends, the renewals go to the new leader on a new one");
    let l1 = cell.leader().await;
    cell.stop_node(l1).await;
    let killed = Instant::now();
    let deadline = killed + ttl;
    while !all_renewed_after(&sessions, killed) {
        assert!(Instant::now() < deadline, "the sessions did not renew at the new leader within a TTL");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(cell.leader().await, l1);
    assert!(sessions.iter().all(|s| !s.is_lost()), "no session was lost across the leader change");
    assert_eq!(client.renewal_streams(), 1, "one stream again, at the new leader");
    for s in &sessions {
        s.close().await.unwrap();
    }
    cell.shutdown().await;
}

/// Against a cell released before batched renewals (a test double that drops `more`,
/// as such a cell ignores it), the SDK learns from the first answer that the batch was
/// not renewed, renews the rest one session a message from then on, and loses none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_cell_older_than_batching_renewals_go_one_a_message_and_no_session_is_lost() {
    let _g = serial().await;
    let cell = TestCell::start(0).await;
    let old = PredatesBatching::start(&cell.leader_endpoint().await).await;
    let client = Client::connect(&[old.addr.to_string()]).await.unwrap();
    let ttl = Duration::from_secs(3);
    let mut sessions = Vec::new();
    for _ in 0..20 {
        sessions.push(client.create_session(opts(ttl)).await.unwrap());
    }
    let renewed_after = |at: Instant| sessions.iter().all(|s| s.time_left().is_some_and(|left| Instant::now() + left > at + ttl * 2 / 3));

    info!("--- the first renewals go batched; the double answers the first session of each only");
    let created = Instant::now();
    eventually("every session renewed once", || async { renewed_after(created) }).await;
    let batched = old.counts.batched();
    assert!(batched >= 1, "the first renewals were not batched");

    info!("--- two more rounds: one session a message, none batched, none lost");
    let learned = Instant::now();
    let singles_before = old.counts.messages();
    tokio::time::sleep(ttl).await;
    eventually("every session renewed twice more", || async { renewed_after(learned + ttl / 3) }).await;
    assert_eq!(old.counts.batched(), batched, "the client kept sending batches the cell does not answer");
    let singles = old.counts.messages() - singles_before;
    assert!(singles >= 2 * 20, "{singles} messages for two rounds of 20 sessions, one a message");
    assert!(sessions.iter().all(|s| !s.is_lost()), "a session was lost against the old cell");
    for s in &sessions {
        s.close().await.unwrap();
    }
    drop(old);
    cell.shutdown().await;
}
