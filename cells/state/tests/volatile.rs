//! The leader's volatile table of an efficiency namespace (`src/volatile.rs`): tokens
//! only from reservations the log committed, larger with every later leader, and
//! sessions that end in the log ending their volatile holds.

mod common;

use common::*;
use holdfast_cell_state::{CellState, Command, Entry, EventKind, Outcome, RESERVE_BLOCK};
use holdfast_core::{EndReason, Epoch, ErrorCode, FencingToken, Intent, Mode, NamespaceConfig, Seq, SessionId};

fn efficiency() -> Cell {
    let mut c = NamespaceConfig::with_defaults(ns(), "team-cache", Intent::Efficiency);
    c.version = 1;
    Cell::with_config(c)
}

fn apply(table: &mut CellState, cmd: Command) -> holdfast_cell_state::Applied {
    table.apply(&Entry::new(5_000, cmd))
}

fn acquire(table: &mut CellState, s: SessionId, r: &str) -> Result<Outcome, holdfast_cell_state::CellError> {
    let cmd = Command::Acquire {
        shard: key(),
        epoch: Some(Epoch(1)),
        name: name("l"),
        session: s,
        mode: Mode::Exclusive,
        request_id: rid(r),
        value: vec![],
        wait: false,
    };
    apply(table, cmd).result
}

/// Takes a committed reservation of `count` into `table`.
fn reserve(c: &mut Cell, table: &mut CellState, count: u64) -> (Seq, Seq) {
    let Outcome::Reserved { epoch, from, through } = c.ok(Command::ReserveTokens { shard: key(), epoch: Epoch(1), count }) else { panic!("not reserved") };
    assert!(table.take_reservation(&key(), epoch, from, through));
    (from, through)
}

/// Cycles lock `l` in `table` until it runs out of reserved tokens; the tokens granted.
fn drain(table: &mut CellState, s: SessionId, tag: &str) -> Vec<FencingToken> {
    let mut tokens = Vec::new();
    for i in 0..1_000 {
        match acquire(table, s, &format!("{tag}-{i}")) {
            Ok(Outcome::Granted { token }) => {
                tokens.push(token);
                assert!(apply(table, Command::Release { shard: key(), name: name("l"), token }).result.is_ok());
            }
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
                return tokens;
            }
            Ok(other) => panic!("{other:?}"),
        }
    }
    panic!("granted {} tokens and never ran out of its reservation", tokens.len())
}

#[test]
fn a_volatile_table_grants_only_reserved_tokens_and_a_later_leader_grants_larger_ones() {
    let mut c = efficiency();
    let s = c.session(1);
    assert!(c.state.served_from_memory(&ns()));

    // Leader A: nothing to grant until the log reserved tokens for it.
    let mut a = c.state.volatile();
    assert_eq!(a.headroom(&key()), Some((Epoch(1), 0)));
    let before = a.clone();
    assert_eq!(acquire(&mut a, s, "first").unwrap_err().code(), ErrorCode::Unavailable);
    assert_eq!(a, before, "a refused acquire changed the volatile table");

    let (from, through) = reserve(&mut c, &mut a, 3);
    assert_eq!((from, through), (Seq(1), Seq(3)));
    let first = drain(&mut a, s, "a");
    assert_eq!(first.iter().map(|t| t.seq().0).collect::<Vec<_>>(), vec![1, 2, 3], "exactly the reserved block, in order");
    assert!(c.state.describe(&key(), &name("l")).unwrap().holders.is_empty(), "the replicated table never saw the lock");

    // A second block of A's, then A stops leading without using it all.
    reserve(&mut c, &mut a, 5);
    let Ok(Outcome::Granted { token: last_of_a }) = acquire(&mut a, s, "a-more") else { panic!() };

    // Leader B, elected afterwards, starts from the replicated state: above every
    // block A was given, used or not.
    let mut b = c.state.volatile();
    let (from_b, _) = reserve(&mut c, &mut b, 4);
    assert_eq!(from_b, Seq(9));
    let second = drain(&mut b, s, "b");
    assert_eq!(second.len(), 4);
    assert!(second.iter().all(|t| *t > last_of_a && first.iter().all(|f| t > f)), "{second:?} not above {first:?} and {last_of_a:?}");
    // Lost on failover: B knows nothing of A's hold.
    assert_eq!(b.holder_session(&key(), &name("l"), last_of_a), None);
}

/// A leader times a delay that an adoption began with the log's number for it, and
/// sends the lift to its volatile table, which numbers its own delays: the table
/// lifts it all the same (it never gets a late copy of a lift: no log brings one).
#[test]
fn a_volatile_table_lifts_an_adopted_lock_delay_by_the_name_the_log_gave_it() {
    let mut config = NamespaceConfig::with_defaults(ns(), "team-cache", Intent::Efficiency);
    config.version = 1;
    config.lock_delay_ms = 1_000;
    let mut c = Cell::with_config(config);
    let s = c.session(1);
    let mut v = c.state.volatile();
    reserve(&mut c, &mut v, 1);
    // A delay of the volatile table's own, which the log never sees.
    assert!(matches!(acquire(&mut v, s, "r"), Ok(Outcome::Granted { .. })));
    let expire = Command::ExpireSession { session: s };
    c.ok(expire.clone());
    assert!(apply(&mut v, expire).result.is_ok());
    let own = v.delay_begun(&key(), &name("l")).expect("delayed in memory");
    // The shard's epoch moves on with `l` delayed (an adoption, mirrored into both).
    let adopt = Command::AdoptShard { shard: key(), epoch: Epoch(2), delayed_locks: vec![name("l")] };
    c.ok(adopt.clone());
    assert!(apply(&mut v, adopt).result.is_ok());
    assert!(c.state.delay_begun(&key(), &name("l")).is_some(), "delayed in the log");
    // A lift named for another delay (here the table's own earlier one): the volatile
    // table, which never gets a late copy, ends its delay all the same.
    let lift = Command::EndLockDelayAt { shard: key(), name: name("l"), begun: own };
    assert!(apply(&mut v, lift).result.is_ok());
    assert_eq!(v.delay_begun(&key(), &name("l")), None, "the volatile table kept the delay");
    assert!(!v.lock_delayed(&key(), &name("l")));
}

#[test]
fn a_reservation_of_another_epoch_is_not_taken() {
    let mut c = efficiency();
    let mut v = c.state.volatile();
    let Outcome::Reserved { from, through, .. } = c.ok(Command::ReserveTokens { shard: key(), epoch: Epoch(1), count: 10 }) else { panic!() };
    // The shard was bumped to epoch 2 (mirrored into the volatile table) before the
    // leader took the reservation of epoch 1.
    let bump = Command::AdoptShard { shard: key(), epoch: Epoch(2), delayed_locks: vec![] };
    c.ok(bump.clone());
    assert!(apply(&mut v, bump).result.is_ok());
    assert!(!v.take_reservation(&key(), Epoch(1), from, through));
    assert_eq!(v.headroom(&key()), Some((Epoch(2), 0)));
}

#[test]
fn bad_reservations_are_refused_and_change_nothing() {
    let mut c = efficiency();
    for cmd in [
        Command::ReserveTokens { shard: key(), epoch: Epoch(1), count: 0 },
        Command::ReserveTokens { shard: key(), epoch: Epoch(1), count: RESERVE_BLOCK + 1 },
        Command::ReserveTokens { shard: key(), epoch: Epoch(2), count: 1 },
    ] {
        c.refused(cmd);
    }
    // Only the replicated table reserves.
    let mut v = c.state.volatile();
    assert_eq!(apply(&mut v, Command::ReserveTokens { shard: key(), epoch: Epoch(1), count: 1 }).result.unwrap_err().code(), ErrorCode::InvalidArgument);
    c.ok(Command::SealShard { shard: key(), epoch: Epoch(1) });
    assert_eq!(c.refused(Command::ReserveTokens { shard: key(), epoch: Epoch(1), count: 1 }).code(), ErrorCode::NotOwner);
}

#[test]
fn a_session_that_ends_in_the_log_ends_its_volatile_holds_and_waits() {
    let mut c = efficiency();
    let (s1, s2) = (c.session(1), c.session(2));
    let mut v = c.state.volatile();
    reserve(&mut c, &mut v, 10);
    let Ok(Outcome::Granted { token }) = acquire(&mut v, s1, "r") else { panic!() };
    let wait =
        Command::Acquire { shard: key(), epoch: None, name: name("l"), session: s2, mode: Mode::Exclusive, request_id: rid("w"), value: vec![], wait: true };
    assert_eq!(apply(&mut v, wait).result, Ok(Outcome::Queued { position: 0 }));
    assert_eq!(v.waiting_shard(s2, &rid("w")), Some(&key()));

    // The expiry commits in the log; the leader applies it to both tables.
    let expire = Command::ExpireSession { session: s1 };
    c.ok(expire.clone());
    let applied = apply(&mut v, expire);
    let kinds: Vec<_> = applied.events.iter().map(|e| (e.session, e.kind.clone())).collect();
    assert_eq!(
        kinds,
        vec![
            (s1, EventKind::Ended { token, reason: EndReason::Expired }),
            (s2, EventKind::Acquired { mode: Mode::Exclusive, token: FencingToken(token.0 + 1) })
        ],
        "the hold ends and the waiter is granted from the reservation"
    );
    assert_eq!(v.waiting_shard(s2, &rid("w")), None);
    assert_eq!(acquire(&mut v, s1, "again").unwrap_err().code(), ErrorCode::SessionExpired);
}

#[test]
fn a_namespace_config_cannot_change_its_intent() {
    let mut c = efficiency();
    let mut next = NamespaceConfig::with_defaults(ns(), "team-cache", Intent::Correctness);
    next.version = 2;
    assert_eq!(c.refused(Command::ApplyConfig { config: next }).code(), ErrorCode::InvalidArgument);
    assert!(c.state.served_from_memory(&ns()));
}
