use super::*;
use crate::conformance::{self, lock};
use crate::record::strip_data_key;
use crate::test_recorder::TestRecorder;
use crate::REJECTIONS_METRIC;
use rocksdb::WriteBatchIterator;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use tempfile::TempDir;

fn open(dir: &TempDir, resource: &str) -> RocksFence {
    RocksFence::open(dir.path(), resource, &RocksFenceOptions::default()).unwrap()
}

#[test]
fn rocks_fence_keeps_the_contract() {
    conformance::run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        (open(&dir, "ledger"), dir)
    });
}

#[test]
fn fence_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let settle = lock("payments/default/settle:2026-10-01");

    tracing::info!("--- B writes with 34, then the resource restarts");
    {
        let store = open(&dir, "ledger");
        store.write(&settle, FencingToken(34), b"batch-7", b"B: PAID").unwrap();
    }

    tracing::info!("--- after the restart, A's 33 is still stale");
    let store = open(&dir, "ledger");
    assert_eq!(store.highest(&settle).unwrap(), Some(FencingToken(34)));
    assert!(store.write(&settle, FencingToken(33), b"batch-7", b"A: PAID").unwrap_err().is_stale());
    assert_eq!(store.read(b"batch-7").unwrap(), Some(Stored { value: b"B: PAID".to_vec(), token: FencingToken(34) }));
    store.write(&settle, FencingToken(34), b"batch-7", b"B: PAID again").unwrap();
}

#[test]
fn rejections_are_counted_per_resource() {
    let recorder = TestRecorder::default();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let l = lock("payments/default/settle");
    let count = |resource: &str| recorder.counter(REJECTIONS_METRIC, &[("resource", resource)]);

    metrics::with_local_recorder(&recorder, || {
        let ledger = open(&dir_a, "ledger");
        let inventory = open(&dir_b, "inventory");
        ledger.write(&l, FencingToken(34), b"k", b"v").unwrap();
        ledger.write(&l, FencingToken(34), b"k", b"v").unwrap();
        assert!(ledger.write(&l, FencingToken(33), b"k", b"v").unwrap_err().is_stale());
        assert!(ledger.claim(&l, FencingToken(2)).unwrap_err().is_stale());
        inventory.claim(&l, FencingToken(9)).unwrap();
        assert!(inventory.write(&l, FencingToken(8), b"k", b"v").unwrap_err().is_stale());
    });

    assert_eq!(count("ledger"), 2, "two stale writes, accepted ones not counted");
    assert_eq!(count("inventory"), 1);
    assert!(recorder.is_described(REJECTIONS_METRIC), "opening a store describes the metric");
}

#[test]
fn a_write_of_an_older_holder_after_the_newer_ones_first_is_an_overlap() {
    let recorder = TestRecorder::default();
    let dir = tempfile::tempdir().unwrap();
    let l = lock("payments/default/overlap");
    metrics::with_local_recorder(&recorder, || {
        let ledger = open(&dir, "overlap-ledger");
        ledger.write(&l, FencingToken(40), b"k", b"A").unwrap();
        ledger.write(&l, FencingToken(41), b"k", b"B").unwrap();
        thread::sleep(std::time::Duration::from_millis(30));
        ledger.write(&l, FencingToken(41), b"k", b"B again").unwrap();
        assert!(ledger.write(&l, FencingToken(40), b"k", b"A, late").unwrap_err().is_stale());
    });
    let overlaps = recorder.histogram(crate::OVERLAP_METRIC, &[("ns", "payments")]);
    assert_eq!(overlaps.len(), 1, "one late write, one overlap: {overlaps:?}");
    assert!(overlaps[0] >= 0.03, "measured from token 41's first write, not its last: {overlaps:?}");
    assert!(recorder.is_described(crate::OVERLAP_METRIC));
}

#[test]
fn record_from_a_newer_release_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, "ledger");
    let l = lock("ns/default/l");
    store.db.put(fence_key(&l), [2, 0, 0, 0, 0, 0, 0, 0, 1]).unwrap();

    assert!(matches!(store.highest(&l), Err(FenceError::UnknownVersion { what: "fence", version: 2 })));
    assert!(matches!(store.write(&l, FencingToken(u64::MAX), b"k", b"v"), Err(FenceError::UnknownVersion { .. })));
    assert_eq!(store.read(b"k").unwrap(), None, "nothing written past an unreadable fence");
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = RocksFenceOptions { write_buffer_bytes: 1024, ..RocksFenceOptions::default() };
    assert!(matches!(RocksFence::open(dir.path(), "ledger", &tiny), Err(FenceError::InvalidConfig { field: "write_buffer_bytes", .. })));
    let no_jobs = RocksFenceOptions { max_background_jobs: 0, ..RocksFenceOptions::default() };
    assert!(no_jobs.validate().is_err());
    assert!(matches!(RocksFence::open(dir.path(), "", &RocksFenceOptions::default()), Err(FenceError::InvalidConfig { field: "resource", .. })));
}

#[test]
fn second_open_of_the_same_store_fails() {
    // The in-process mutexes are enough only because no other process can write.
    let dir = tempfile::tempdir().unwrap();
    let _first = open(&dir, "ledger");
    assert!(matches!(RocksFence::open(dir.path(), "ledger", &RocksFenceOptions::default()), Err(FenceError::Storage { op: "open", .. })));
}

/// What one write call returned.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Accepted(FencingToken),
    Rejected { presented: FencingToken, highest: FencingToken },
}

/// The puts of one write batch, in batch order.
#[derive(Default)]
struct Puts(Vec<(Vec<u8>, Vec<u8>)>);

impl WriteBatchIterator for Puts {
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.0.push((key.to_vec(), value.to_vec()));
    }
    fn delete(&mut self, _key: &[u8]) {}
}

/// The tokens of the data and fence records of `data_key`/`lock`, in the order
/// RocksDB committed them: read back from its write-ahead log, so the order is the
/// store's own, not one the test reconstructs.
fn committed_history(db: &DB, data: &[u8], lock: &LockId) -> (Vec<FencingToken>, Vec<FencingToken>) {
    let fkey = fence_key(lock);
    let (mut writes, mut fences) = (Vec::new(), Vec::new());
    for item in db.get_updates_since(0).unwrap() {
        let (_seq, batch) = item.unwrap();
        let mut puts = Puts::default();
        batch.iterate(&mut puts);
        for (key, value) in puts.0 {
            if strip_data_key(&key) == Some(data) {
                writes.push(decode_data(&value).unwrap().token);
            } else if key == fkey {
                fences.push(decode_fence(&value).unwrap());
            }
        }
    }
    (writes, fences)
}

/// Many holders race on one lock: tokens come from one counter like grants from a
/// cell, each holder writes several times with its token, pausing between writes,
/// so older holders keep writing while newer ones have started. The history of
/// accepted writes, in the order they landed, must be ordered by token.
#[test]
fn concurrent_holders_land_in_token_order() {
    const HOLDERS: u64 = 8;
    const ROUNDS: u64 = 30;
    const WRITES_PER_TOKEN: usize = 8;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir, "ledger"));
    let issuer = Arc::new(AtomicU64::new(1));
    let settle = lock("payments/default/settle");

    tracing::info!("--- {HOLDERS} holders race");
    let threads: Vec<_> = (0..HOLDERS)
        .map(|holder| {
            let (store, issuer, settle) = (Arc::clone(&store), Arc::clone(&issuer), settle.clone());
            thread::Builder::new()
                .name(format!("holder-{holder}"))
                .spawn(move || {
                    let mut outcomes = Vec::new();
                    let mut record = |presented: FencingToken, value: String| {
                        outcomes.push(match store.write(&settle, presented, b"ledger", value.as_bytes()) {
                            Ok(a) => Outcome::Accepted(a.token),
                            Err(FenceError::Stale { presented, highest, .. }) => Outcome::Rejected { presented, highest },
                            Err(other) => panic!("unexpected error: {other}"),
                        });
                    };
                    for round in 0..ROUNDS {
                        let token = FencingToken(issuer.fetch_add(1, Ordering::SeqCst));
                        for i in 0..WRITES_PER_TOKEN {
                            record(token, format!("holder {holder} round {round} write {i}"));
                            thread::yield_now();
                        }
                        // A holder certain to be stale: the fence is already at least
                        // `token`, so this must be rejected whatever the interleaving.
                        record(FencingToken(token.0 - 1), format!("holder {holder} round {round} zombie"));
                    }
                    outcomes
                })
                .unwrap()
        })
        .collect();
    let outcomes: Vec<Outcome> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();

    tracing::info!("--- check the committed history");
    let mut accepted: Vec<FencingToken> = Vec::new();
    let mut rejected = Vec::new();
    for o in &outcomes {
        match *o {
            Outcome::Accepted(t) => accepted.push(t),
            Outcome::Rejected { presented, highest } => rejected.push((presented, highest)),
        }
    }
    let (landed, fences) = committed_history(&store.db, b"ledger", &settle);

    // Honest oracle: the log must hold every accepted write, or the check below
    // would be vacuous.
    let mut landed_sorted = landed.clone();
    landed_sorted.sort();
    accepted.sort();
    assert_eq!(landed_sorted, accepted, "the log holds exactly the accepted writes");
    assert!(accepted.len() >= (HOLDERS * ROUNDS) as usize, "each holder lands at least one write");

    // The contract: no accepted write has a lower token than one accepted before it.
    if let Some(i) = landed.windows(2).position(|w| w[1] < w[0]) {
        panic!(
            "write #{} landed with token {} after a write with token {}: an old holder's write \
             landed after a newer one's",
            i + 1,
            landed[i + 1].0,
            landed[i].0
        );
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "the fence only ever rises: {fences:?}");

    let accepted_set: HashSet<FencingToken> = accepted.iter().copied().collect();
    for (presented, highest) in &rejected {
        assert!(presented < highest, "rejected {presented} although the fence was {highest}");
        assert!(accepted_set.contains(highest), "a fence of {highest} that no accepted write set");
    }
    assert!(rejected.len() >= (HOLDERS * ROUNDS) as usize, "every zombie write is rejected");

    let max = *accepted.last().unwrap();
    assert_eq!(store.highest(&settle).unwrap(), Some(max));
    assert_eq!(store.read(b"ledger").unwrap().unwrap().token, max);
    let racing = rejected.len() - (HOLDERS * ROUNDS) as usize;
    tracing::info!(accepted = accepted.len(), rejected = rejected.len(), racing, "history checked");
    eprintln!("{} writes accepted, {} rejected ({racing} of them by racing holders, not planted zombies)", accepted.len(), rejected.len());
}
