//! The contract of [`FencedStore`], as tests every implementation must pass.
//! Each case gets a fresh, empty store.

use crate::{FenceError, FencedStore, LockId, Mutation, Stored};
use holdfast_core::FencingToken;

/// Runs every case against stores made by `make`. `make` returns the store and a
/// guard that must outlive it (a temporary directory, say); the store drops first.
pub(crate) fn run_all<S: FencedStore, G>(make: impl Fn() -> (S, G)) {
    type Case = fn(&dyn FencedStore);
    let cases: [(&str, Case); 6] = [
        ("zombie_holder_is_fenced", zombie_holder_is_fenced),
        ("lower_token_is_rejected_and_writes_nothing", lower_token_is_rejected_and_writes_nothing),
        ("equal_and_higher_tokens_are_accepted", equal_and_higher_tokens_are_accepted),
        ("fences_are_per_lock", fences_are_per_lock),
        ("apply_is_all_or_nothing", apply_is_all_or_nothing),
        ("claim_fences_out_older_holders", claim_fences_out_older_holders),
    ];
    for (name, case) in cases {
        tracing::info!("--- conformance case {name}");
        let (store, guard) = make();
        case(&store);
        drop(store);
        drop(guard);
    }
}

pub(crate) fn lock(s: &str) -> LockId {
    LockId::parse(s).unwrap()
}

fn stored(value: &[u8], token: u64) -> Option<Stored> {
    Some(Stored { value: value.to_vec(), token: FencingToken(token) })
}

/// The timeline of docs/design.md: A gets 33 and pauses, B gets 34 and writes, A wakes.
fn zombie_holder_is_fenced(store: &dyn FencedStore) {
    let settle = lock("payments/default/settle:2026-10-01");
    let (a, b) = (FencingToken(33), FencingToken(34));

    let first = store.write(&settle, a, b"batch-7", b"A: PAYING").unwrap();
    assert!(first.raised() && first.previous.is_none());
    // A pauses past its lease; B acquires 34 and writes.
    let taken = store.write(&settle, b, b"batch-7", b"B: PAID").unwrap();
    assert_eq!(taken.previous, Some(a));
    // A wakes, still believing it holds the lock.
    match store.write(&settle, a, b"batch-7", b"A: PAID") {
        Err(FenceError::Stale { lock, presented, highest }) => {
            assert_eq!((lock, presented, highest), (settle.clone(), a, b));
        }
        other => panic!("a zombie's write must be rejected, got {other:?}"),
    }
    assert_eq!(store.read(b"batch-7").unwrap(), stored(b"B: PAID", 34));
    assert_eq!(store.highest(&settle).unwrap(), Some(b));
}

fn lower_token_is_rejected_and_writes_nothing(store: &dyn FencedStore) {
    let l = lock("ns/default/l");
    store.write(&l, FencingToken(10), b"k", b"ten").unwrap();

    let err = store.write(&l, FencingToken(9), b"k", b"nine").unwrap_err();
    assert!(err.is_stale() && !err.is_retryable(), "{err}");
    // Nor on a key the lock never wrote: the check is per lock, not per key.
    assert!(store.write(&l, FencingToken(9), b"other", b"nine").unwrap_err().is_stale());
    assert!(store.claim(&l, FencingToken(0)).unwrap_err().is_stale());

    assert_eq!(store.read(b"k").unwrap(), stored(b"ten", 10));
    assert_eq!(store.read(b"other").unwrap(), None);
    assert_eq!(store.highest(&l).unwrap(), Some(FencingToken(10)), "a rejection must not move the fence");
}

fn equal_and_higher_tokens_are_accepted(store: &dyn FencedStore) {
    let l = lock("ns/default/l");
    assert_eq!(store.highest(&l).unwrap(), None);

    let w1 = store.write(&l, FencingToken(5), b"k", b"1").unwrap();
    // The same holder writes again under the same token.
    let w2 = store.write(&l, FencingToken(5), b"k", b"2").unwrap();
    assert!(w1.raised());
    assert!(!w2.raised());
    assert_eq!(w2.previous, Some(FencingToken(5)));

    let w3 = store.write(&l, FencingToken(6), b"k", b"3").unwrap();
    assert!(w3.raised());
    // A token of a later epoch is larger than any of an earlier one.
    let later_epoch = FencingToken(1 << 40);
    store.write(&l, later_epoch, b"k", b"4").unwrap();

    assert_eq!(store.read(b"k").unwrap(), stored(b"4", 1 << 40));
    assert_eq!(store.highest(&l).unwrap(), Some(later_epoch));
    assert!(store.write(&l, FencingToken(6), b"k", b"late").unwrap_err().is_stale());
}

fn fences_are_per_lock(store: &dyn FencedStore) {
    let a = lock("payments/default/settle");
    let same_name_other_ns = lock("search/default/settle");
    let same_name_other_shard = lock("payments/s2/settle");

    store.claim(&a, FencingToken(50)).unwrap();
    store.write(&same_name_other_ns, FencingToken(3), b"x", b"x").unwrap();
    store.write(&same_name_other_shard, FencingToken(4), b"y", b"y").unwrap();

    assert_eq!(store.highest(&a).unwrap(), Some(FencingToken(50)));
    assert_eq!(store.highest(&same_name_other_ns).unwrap(), Some(FencingToken(3)));
    assert_eq!(store.highest(&same_name_other_shard).unwrap(), Some(FencingToken(4)));
}

fn apply_is_all_or_nothing(store: &dyn FencedStore) {
    let l = lock("ns/default/l");
    store
        .apply(
            &l,
            FencingToken(7),
            &[Mutation::Put { key: b"a", value: b"1" }, Mutation::Put { key: b"b", value: b"1" }, Mutation::Put { key: b"c", value: b"1" }],
        )
        .unwrap();
    let many = [Mutation::Put { key: b"a", value: b"2" }, Mutation::Delete { key: b"b" }, Mutation::Put { key: b"d", value: b"2" }];

    assert!(store.apply(&l, FencingToken(6), &many).unwrap_err().is_stale());
    assert_eq!(store.read(b"a").unwrap(), stored(b"1", 7));
    assert_eq!(store.read(b"b").unwrap(), stored(b"1", 7));
    assert_eq!(store.read(b"d").unwrap(), None);

    store.apply(&l, FencingToken(8), &many).unwrap();
    assert_eq!(store.read(b"a").unwrap(), stored(b"2", 8));
    assert_eq!(store.read(b"b").unwrap(), None);
    assert_eq!(store.read(b"c").unwrap(), stored(b"1", 7));
    assert_eq!(store.read(b"d").unwrap(), stored(b"2", 8));
    // Deleting what is not there is fine.
    store.apply(&l, FencingToken(8), &[Mutation::Delete { key: b"never" }]).unwrap();
}

fn claim_fences_out_older_holders(store: &dyn FencedStore) {
    let l = lock("ns/default/l");
    store.write(&l, FencingToken(1), b"k", b"old").unwrap();

    let claimed = store.claim(&l, FencingToken(2)).unwrap();
    assert!(claimed.raised());
    assert!(store.write(&l, FencingToken(1), b"k", b"zombie").unwrap_err().is_stale());
    assert_eq!(store.read(b"k").unwrap(), stored(b"old", 1), "a claim writes no data");
    // Claiming again with the same token is a no-op that succeeds.
    assert!(!store.claim(&l, FencingToken(2)).unwrap().raised());
}
