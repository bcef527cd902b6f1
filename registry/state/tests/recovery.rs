//! A registry recovered from a copy (a snapshot, or a lone survivor's data) raises every
//! epoch past any the lost group could have served: `src/recovery.rs`.

mod common;

use common::*;
use holdfast_core::{Epoch, FencingToken, Revision, Seq};
use holdfast_registry_state::{Command, HistoryError, RegistryError, RegistryState, ShardState, RECOVERY_EPOCH_GAP, RECOVERY_REVISION_GAP};

/// The largest token a cell can issue for a shard at `epoch`.
fn highest_token(epoch: Epoch) -> FencingToken {
    FencingToken::new(epoch, Seq::MAX).unwrap()
}

/// `moves` unplanned moves of `pay/default` back and forth between east-1 and west-1.
fn moved(st: &mut RegistryState, moves: u32) {
    for _ in 0..moves {
        let r = st.get_owner(&key("pay", "default")).unwrap().clone();
        let to = if r.cell.as_str() == "east-1" { "west-1" } else { "east-1" };
        ok(st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell(to), planned: false });
        ok(st, Command::CompleteMove { shard: key("pay", "default"), epoch: r.epoch });
    }
}

#[test]
fn a_recovery_from_a_copy_of_the_current_epoch_serves_only_larger_tokens() {
    let mut st = world();
    ok(&mut st, Command::Adopted { shard: key("pay", "default"), epoch: Epoch(1) });
    let before = st.get_owner(&key("pay", "default")).unwrap().clone();
    let r = st.recover(RECOVERY_EPOCH_GAP, 2_000, "root", "snapshot x").unwrap();
    let after = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!(after.cell, before.cell, "the owner in the copy keeps the shard");
    assert!(after.epoch > before.epoch, "a recovery that keeps the epoch reissues its tokens");
    assert!(FencingToken::floor_of(after.epoch) > highest_token(before.epoch), "every token of the new epoch is above every token of the old one");
    assert!(!after.adopted, "the cell must report serving the new epoch before it grants in it");
    let handover = after.handover.as_ref().expect("a handover");
    assert_eq!((handover.from_epoch, handover.seal.is_none()), (Epoch(1), true), "unsealed: every lock starts in lock-delay");
    assert_eq!((r.shards, r.moves_dropped, r.highest_epoch_before, r.highest_epoch), (1, 0, 1, 1 + RECOVERY_EPOCH_GAP));
    let owned = st.shards_of_cell(&cell("east-1"));
    assert_eq!((owned.len(), owned[0].epoch), (1, Epoch(1 + RECOVERY_EPOCH_GAP)), "the owner's renewals list the new epoch");
    let audit = st.access().audit_after(0, 10);
    assert!(audit.iter().any(|a| a.action == "recover" && a.by == "root" && a.detail.contains("snapshot x")), "audited: {audit:?}");
}

#[test]
fn a_stale_copy_still_lands_above_every_epoch_the_lost_group_served() {
    // The copy is taken, then the lost group moves the shard 7 times more.
    let copy = world();
    let mut lost = copy.clone();
    moved(&mut lost, 7);
    let lost_epoch = lost.get_owner(&key("pay", "default")).unwrap().epoch;
    assert_eq!(lost_epoch, Epoch(8));
    let mut recovered = copy.clone();
    recovered.recover(RECOVERY_EPOCH_GAP, 2_000, "root", "survivor").unwrap();
    let epoch = recovered.get_owner(&key("pay", "default")).unwrap().epoch;
    assert!(FencingToken::floor_of(epoch) > highest_token(lost_epoch), "epoch {epoch:?} against the lost group's {lost_epoch:?}");
}

#[test]
fn a_move_in_flight_is_dropped_and_its_source_keeps_the_shard() {
    let mut st = world();
    ok(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("west-1"), planned: true });
    let r = st.recover(5, 2_000, "root", "survivor").unwrap();
    let rec = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((rec.cell.as_str(), rec.epoch, &rec.state), ("east-1", Epoch(6), &ShardState::Active));
    assert_eq!(r.moves_dropped, 1);
    assert!(st.shards_of_cell(&cell("west-1")).is_empty());
}

#[test]
fn watchers_of_the_lost_group_are_told_to_list_again() {
    let copy = world();
    let mut lost = copy.clone();
    moved(&mut lost, 3);
    let seen = lost.revision();
    let mut st = copy.clone();
    let r = st.recover(RECOVERY_EPOCH_GAP, 2_000, "root", "survivor").unwrap();
    assert_eq!(r.revision_before, Revision(1));
    assert_eq!(st.revision(), Revision(1 + RECOVERY_REVISION_GAP + 1), "the jump, then one event per shard");
    assert!(seen < st.revision());
    assert!(matches!(st.events_after(seen), Err(HistoryError::Compacted { .. })), "a watcher at the lost group's revision lists again");
    let current = st.events_after(Revision(st.revision().0 - 1)).unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(current[0].record.epoch, Epoch(1 + RECOVERY_EPOCH_GAP));
}

#[test]
fn a_gap_of_zero_or_past_the_last_epoch_is_refused_and_changes_nothing() {
    let mut st = world();
    let before = st.clone();
    assert!(matches!(st.recover(0, 2_000, "root", "x"), Err(RegistryError::InvalidConfig(_))));
    assert!(matches!(st.recover(Epoch::MAX.0, 2_000, "root", "x"), Err(RegistryError::EpochExhausted { .. })));
    assert_eq!(st, before);
    // The largest gap that fits is taken.
    st.recover(Epoch::MAX.0 - 1, 2_000, "root", "x").unwrap();
    assert_eq!(st.get_owner(&key("pay", "default")).unwrap().epoch, Epoch::MAX);
}

#[test]
fn the_recovered_state_survives_a_snapshot() {
    let mut st = world();
    st.recover(RECOVERY_EPOCH_GAP, 2_000, "root", "survivor").unwrap();
    assert_eq!(RegistryState::restore(&st.snapshot()).unwrap(), st);
}
