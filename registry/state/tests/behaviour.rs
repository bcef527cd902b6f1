//! One test per behaviour and per refusal of the registry state machine. Every refusal
//! is checked to change nothing: the state after equals the state before.

mod common;

use common::*;
use holdfast_core::{Epoch, ErrorCode, FencingToken, LockName, Revision};
use holdfast_registry_state::{Command, Entry, HistoryError, Outcome, RegionState, RegistryError, RegistryState, ShardState, HISTORY_CAP};

/// Applies `cmd`, asserts it is refused with `code`, and that nothing changed.
fn refused(st: &mut RegistryState, cmd: Command, code: ErrorCode) -> RegistryError {
    let before = st.clone();
    let a = apply(st, cmd.clone());
    let err = a.result.expect_err(&format!("{cmd:?} should be refused"));
    assert_eq!(err.code(), code, "{cmd:?}: {err}");
    assert!(a.events.is_empty(), "a refusal emitted events");
    assert_eq!(*st, before, "{cmd:?} was refused but changed the state");
    err
}

fn begin(st: &mut RegistryState, to: &str, planned: bool) {
    ok(st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell(to), planned });
}

fn seal(highest: u64) -> Command {
    Command::Sealed { shard: key("pay", "default"), epoch: Epoch(1), highest: Some(FencingToken(highest)), held_locks: vec![LockName::new("settle").unwrap()] }
}

#[test]
fn placement_starts_at_epoch_one_in_the_cells_region() {
    let st = world();
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.region.as_str(), r.cell.as_str(), r.epoch), ("east", "east-1", Epoch(1)));
    assert_eq!(r.state, ShardState::Active);
    assert_eq!(st.revision(), Revision(1));
    let owned = st.shards_of_cell(&cell("east-1"));
    assert_eq!(owned.len(), 1);
    assert_eq!((owned[0].epoch, owned[0].draining), (Epoch(1), false));
    assert!(st.shards_of_cell(&cell("west-1")).is_empty());
}

#[test]
fn planned_move_drains_waits_for_the_seal_then_bumps_the_epoch() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    let owned = st.shards_of_cell(&cell("east-1"));
    assert!(owned[0].draining, "the source drains during a planned move");
    assert!(st.shards_of_cell(&cell("west-1")).is_empty(), "the target gets nothing before the epoch bump");
    refused(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) }, ErrorCode::Moving);
    ok(&mut st, seal(42));
    let a = ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    assert_eq!(a.events.len(), 1);
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.region.as_str(), r.cell.as_str(), r.epoch), ("west", "west-1", Epoch(2)));
    let owned = st.shards_of_cell(&cell("west-1"));
    let handover = owned[0].handover.as_ref().unwrap();
    assert_eq!(handover.from_epoch, Epoch(1));
    let seal = handover.seal.as_ref().unwrap();
    assert_eq!(seal.highest, Some(FencingToken(42)));
    assert_eq!(seal.held_locks, vec![LockName::new("settle").unwrap()]);
    assert!(st.shards_of_cell(&cell("east-1")).is_empty());
}

#[test]
fn unplanned_move_stops_covering_the_source_and_completes_without_a_seal() {
    let mut st = world();
    begin(&mut st, "west-1", false);
    assert!(st.shards_of_cell(&cell("east-1")).is_empty(), "renewals stop covering the shard at the source");
    ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    let owned = st.shards_of_cell(&cell("west-1"));
    assert_eq!(owned[0].epoch, Epoch(2));
    assert_eq!(owned[0].handover.as_ref().unwrap().seal, None, "unplanned: every lock must be treated as held");
}

#[test]
fn abort_before_the_seal_keeps_the_epoch_and_after_it_bumps() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    ok(&mut st, Command::AbortMove { shard: key("pay", "default"), epoch: Epoch(1) });
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.cell.as_str(), r.epoch, &r.state), ("east-1", Epoch(1), &ShardState::Active));

    begin(&mut st, "west-1", true);
    ok(&mut st, seal(7));
    ok(&mut st, Command::AbortMove { shard: key("pay", "default"), epoch: Epoch(1) });
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.cell.as_str(), r.epoch), ("east-1", Epoch(2)), "a sealed source gets the shard back only at a new epoch");
}

#[test]
fn seal_of_an_active_shard_is_an_epoch_bump_in_place() {
    let mut st = world();
    ok(&mut st, seal(9));
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.cell.as_str(), r.epoch), ("east-1", Epoch(2)));
}

#[test]
fn repeated_seal_report_is_idempotent_and_a_different_one_is_refused() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    ok(&mut st, seal(5));
    let before = st.clone();
    let a = ok(&mut st, seal(5));
    assert!(a.events.is_empty());
    assert_eq!(st, before);
    refused(&mut st, seal(6), ErrorCode::InvalidArgument);
}

#[test]
fn stale_epoch_on_sealed_complete_and_abort() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    ok(&mut st, seal(5));
    ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    refused(&mut st, seal(5), ErrorCode::StaleEpoch);
    refused(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) }, ErrorCode::StaleEpoch);
    refused(&mut st, Command::AbortMove { shard: key("pay", "default"), epoch: Epoch(1) }, ErrorCode::StaleEpoch);
}

#[test]
fn complete_or_abort_of_a_shard_not_moving_is_refused() {
    let mut st = world();
    refused(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::AbortMove { shard: key("pay", "default"), epoch: Epoch(1) }, ErrorCode::InvalidArgument);
}

#[test]
fn move_of_a_shard_already_moving_is_moving() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    let e = refused(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("west-2"), planned: false }, ErrorCode::Moving);
    assert!(e.to_string().contains("already moving to cell west-1"), "{e}");
}

#[test]
fn move_to_the_same_cell_is_refused() {
    let mut st = world();
    refused(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("east-1"), planned: true }, ErrorCode::InvalidArgument);
}

#[test]
fn move_into_a_draining_or_evacuated_region_is_refused() {
    let mut st = world();
    ok(&mut st, Command::SetRegionState { region: region("west"), state: RegionState::Draining });
    let e = refused(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("west-1"), planned: true }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("draining"), "{e}");
    ok(&mut st, Command::SetRegionState { region: region("west"), state: RegionState::Evacuated });
    let e = refused(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("west-1"), planned: false }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("evacuated"), "{e}");
    refused(&mut st, Command::PlaceShard { shard: key("pay", "other"), cell: cell("west-1") }, ErrorCode::InvalidArgument);
}

#[test]
fn evacuated_only_once_no_shard_is_homed_there_or_moving_in() {
    let mut st = world();
    let e = refused(&mut st, Command::SetRegionState { region: region("east"), state: RegionState::Evacuated }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("still owns 1 shard"), "{e}");
    begin(&mut st, "west-1", false);
    refused(&mut st, Command::SetRegionState { region: region("west"), state: RegionState::Evacuated }, ErrorCode::InvalidArgument);
    ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    ok(&mut st, Command::SetRegionState { region: region("east"), state: RegionState::Evacuated });
    assert_eq!(st.region(&region("east")), Some(RegionState::Evacuated));
    // Rollback of an evacuation.
    ok(&mut st, Command::SetRegionState { region: region("east"), state: RegionState::Active });
}

#[test]
fn unknown_region_cell_namespace_shard() {
    let mut st = world();
    refused(&mut st, Command::SetRegionState { region: region("mars"), state: RegionState::Draining }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::RegisterCell { cell: cell("mars-1"), region: region("mars"), members: members(1) }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::PlaceShard { shard: key("pay", "s2"), cell: cell("nope") }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::BeginMove { shard: key("pay", "default"), to_cell: cell("nope"), planned: true }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::PlaceShard { shard: key("ghost", "default"), cell: cell("east-1") }, ErrorCode::UnknownNamespace);
    refused(&mut st, Command::BeginMove { shard: key("pay", "nope"), to_cell: cell("west-1"), planned: true }, ErrorCode::UnknownShard);
    refused(&mut st, Command::CompleteMove { shard: key("ghost", "default"), epoch: Epoch(1) }, ErrorCode::UnknownNamespace);
    let mut cfg = ns_config("ghost");
    cfg.version = 1;
    refused(&mut st, Command::UpdateNamespace { config: cfg, expected_version: 1 }, ErrorCode::UnknownNamespace);
    assert_eq!(st.get_owner(&key("pay", "nope")).unwrap_err().code(), ErrorCode::UnknownShard);
}

#[test]
fn duplicates_are_refused_as_already_exists() {
    let mut st = world();
    let e = refused(&mut st, Command::CreateNamespace { config: ns_config("pay") }, ErrorCode::AlreadyExists);
    assert!(e.to_string().contains("already exists"), "{e}");
    refused(&mut st, Command::CreateRegion { region: region("east") }, ErrorCode::AlreadyExists);
    refused(&mut st, Command::PlaceShard { shard: key("pay", "default"), cell: cell("west-1") }, ErrorCode::AlreadyExists);
}

#[test]
fn inverted_ttl_bounds_are_refused_on_create_and_update() {
    let mut st = world();
    let mut bad = ns_config("fresh");
    bad.ttl_min_ms = 10_000;
    bad.ttl_max_ms = 5_000;
    let e = refused(&mut st, Command::CreateNamespace { config: bad.clone() }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("inverted"), "{e}");
    bad.name = holdfast_core::NamespaceName::new("pay").unwrap();
    refused(&mut st, Command::UpdateNamespace { config: bad, expected_version: 1 }, ErrorCode::InvalidArgument);
}

#[test]
fn namespace_versions_start_at_one_and_updates_need_the_current_version() {
    let mut st = world();
    let stored = st.namespace(&holdfast_core::NamespaceName::new("pay").unwrap()).unwrap().clone();
    assert_eq!(stored.version, 1);
    let mut next = stored.clone();
    next.lock_delay_ms = 1_000;
    let a = ok(&mut st, Command::UpdateNamespace { config: next.clone(), expected_version: 1 });
    assert!(matches!(a.result, Ok(Outcome::Namespace { ref config }) if config.version == 2 && config.lock_delay_ms == 1_000));
    let e = refused(&mut st, Command::UpdateNamespace { config: next, expected_version: 1 }, ErrorCode::Conflict);
    assert!(e.to_string().contains("version 2"), "{e}");
}

#[test]
fn a_namespace_keeps_the_intent_it_was_created_with() {
    let mut st = world();
    let stored = st.namespace(&holdfast_core::NamespaceName::new("pay").unwrap()).unwrap().clone();
    let mut other = stored.clone();
    other.intent = if stored.intent == holdfast_core::Intent::Efficiency { holdfast_core::Intent::Correctness } else { holdfast_core::Intent::Efficiency };
    let e = refused(&mut st, Command::UpdateNamespace { config: other, expected_version: 1 }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("cannot change"), "{e}");
}

#[test]
fn cells_are_re_registered_in_their_region_only_and_need_members() {
    let mut st = world();
    ok(&mut st, Command::RegisterCell { cell: cell("east-1"), region: region("east"), members: members(5) });
    assert_eq!(st.cell(&cell("east-1")).unwrap().members.len(), 5);
    refused(&mut st, Command::RegisterCell { cell: cell("east-1"), region: region("west"), members: members(3) }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::RegisterCell { cell: cell("new-1"), region: region("east"), members: vec![] }, ErrorCode::InvalidArgument);
    let mut dup = members(2);
    dup[1].node_id = dup[0].node_id;
    refused(&mut st, Command::RegisterCell { cell: cell("new-1"), region: region("east"), members: dup }, ErrorCode::InvalidArgument);
}

#[test]
fn events_after_resumes_and_reports_compaction_and_future_revisions() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    ok(&mut st, seal(3));
    ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    let all = st.events_after(Revision(0)).unwrap();
    assert_eq!(all.iter().map(|e| e.revision.0).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    let tail = st.events_after(Revision(2)).unwrap();
    assert_eq!(tail.iter().map(|e| (e.revision.0, e.epoch().0)).collect::<Vec<_>>(), vec![(3, 1), (4, 2)]);
    assert!(st.events_after(Revision(4)).unwrap().is_empty());
    assert!(matches!(st.events_after(Revision(9)), Err(HistoryError::Ahead { .. })));

    // Fill the bounded history past its cap with move/abort pairs.
    for _ in 0..=HISTORY_CAP / 2 {
        begin(&mut st, "west-2", false);
        let e = st.get_owner(&key("pay", "default")).unwrap().epoch;
        ok(&mut st, Command::AbortMove { shard: key("pay", "default"), epoch: e });
    }
    assert!(matches!(st.events_after(Revision(0)), Err(HistoryError::Compacted { .. })));
    let current = st.revision();
    let recent = st.events_after(Revision(current.0 - 10)).unwrap();
    assert_eq!(recent.len(), 10);
}

#[test]
fn codec_round_trips_and_refuses_foreign_bytes() {
    let mut st = world();
    begin(&mut st, "west-1", true);
    let restored = RegistryState::restore(&st.snapshot()).unwrap();
    assert_eq!(restored, st);
    let entry = Entry::new(5, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
    let applied = st.apply(&entry);
    assert_eq!(holdfast_registry_state::Applied::decode(&applied.encode()).unwrap(), applied);
    assert!(RegistryState::restore(b"HFCS\x01\x00junk").is_err(), "a cell snapshot is not a registry snapshot");
    let mut future = st.snapshot();
    future[4] = 99;
    assert!(RegistryState::restore(&future).is_err());
}

#[test]
fn a_cell_that_lost_an_adopted_epoch_gets_the_shard_back_at_the_next_one() {
    let mut st = world();
    let restart = Command::Restarted { shard: key("pay", "default"), epoch: Epoch(1) };
    // Never reported adopted: a missing report proves nothing yet.
    refused(&mut st, restart.clone(), ErrorCode::InvalidArgument);
    let a = ok(&mut st, Command::Adopted { shard: key("pay", "default"), epoch: Epoch(1) });
    assert!(a.events.is_empty(), "adoption bookkeeping is not an ownership change");
    assert!(st.is_adopted(&key("pay", "default")));
    // A repeated or stale report changes nothing.
    let before = st.clone();
    ok(&mut st, Command::Adopted { shard: key("pay", "default"), epoch: Epoch(1) });
    assert_eq!(st, before);
    refused(&mut st, Command::Adopted { shard: key("pay", "default"), epoch: Epoch(7) }, ErrorCode::StaleEpoch);

    let a = ok(&mut st, restart.clone());
    assert_eq!(a.events.len(), 1);
    let r = st.get_owner(&key("pay", "default")).unwrap();
    assert_eq!((r.cell.as_str(), r.epoch), ("east-1", Epoch(2)));
    assert!(!st.is_adopted(&key("pay", "default")), "the new epoch must be reported again");
    let owned = st.shards_of_cell(&cell("east-1"));
    assert_eq!(owned[0].handover.as_ref().unwrap().seal, None, "nobody reported the holders: every lock is delayed");
    // The old epoch is gone for good.
    refused(&mut st, restart, ErrorCode::StaleEpoch);
}

#[test]
fn every_epoch_change_forgets_the_adoption() {
    let mut st = world();
    ok(&mut st, Command::Adopted { shard: key("pay", "default"), epoch: Epoch(1) });
    begin(&mut st, "west-1", false);
    ok(&mut st, Command::CompleteMove { shard: key("pay", "default"), epoch: Epoch(1) });
    assert!(!st.is_adopted(&key("pay", "default")), "west-1 has not reported epoch 2 yet");
    refused(&mut st, Command::Restarted { shard: key("pay", "default"), epoch: Epoch(2) }, ErrorCode::InvalidArgument);
}

fn alice(role: holdfast_core::Role, ns: Option<&str>) -> holdfast_core::Grant {
    holdfast_core::Grant { principal: "user:alice".into(), role, ns: ns.map(|n| holdfast_core::NamespaceName::new(n).unwrap()) }
}

#[test]
fn an_audited_command_is_applied_and_recorded_in_one_entry_and_a_refused_one_is_not() {
    use holdfast_core::Role;
    let mut st = world();
    let before = st.access().audit_after(0, 100).len();
    let a = ok(&mut st, Command::Audited { by: "user:ops".into(), cmd: Box::new(Command::Grant { grant: alice(Role::Holder, Some("pay")) }) });
    assert!(matches!(a.result, Ok(Outcome::Access { .. })));
    ok(
        &mut st,
        Command::Audited { by: "user:ops".into(), cmd: Box::new(Command::BeginMove { shard: key("pay", "default"), to_cell: cell("west-1"), planned: true }) },
    );
    let log = st.access().audit_after(0, 100);
    assert_eq!(log.len(), before + 2);
    assert_eq!((log[before].by.as_str(), log[before].action.as_str(), log[before].detail.as_str()), ("user:ops", "grant", "user:alice holder in pay"));
    assert_eq!(log[before + 1].action, "begin_move");
    // A refused command is not recorded, and changes nothing (the audit log included).
    let dup = Command::Audited { by: "user:ops".into(), cmd: Box::new(Command::CreateRegion { region: region("east") }) };
    refused(&mut st, dup, ErrorCode::AlreadyExists);
    assert_eq!(st.access().audit_after(0, 100).len(), before + 2);
    // Access survives a snapshot, and a version 1 snapshot (none) still loads.
    assert_eq!(RegistryState::restore(&st.snapshot()).unwrap(), st);
    let plain = world();
    let v1 = holdfast_core::codec::encode_versioned(b"HFRS", 1, &plain);
    assert_eq!(RegistryState::restore(&v1).unwrap(), plain);
}

#[test]
fn grants_and_tokens_are_checked_and_versioned() {
    use holdfast_core::Role;
    use holdfast_registry_state::TokenRecord;
    let mut st = world();
    refused(&mut st, Command::Grant { grant: alice(Role::Operator, Some("pay")) }, ErrorCode::InvalidArgument);
    refused(&mut st, Command::Revoke { grant: alice(Role::Reader, Some("pay")) }, ErrorCode::InvalidArgument);
    let v1 = st.access().version();
    ok(&mut st, Command::Grant { grant: alice(Role::Reader, Some("pay")) });
    let t = TokenRecord { name: "ci".into(), sha256: "0f".repeat(32), created_at_unix_ms: 1, created_by: "user:root".into() };
    ok(&mut st, Command::CreateToken { token: t.clone() });
    refused(&mut st, Command::CreateToken { token: t }, ErrorCode::InvalidArgument);
    ok(&mut st, Command::RevokeToken { name: "ci".into() });
    refused(&mut st, Command::RevokeToken { name: "ci".into() }, ErrorCode::InvalidArgument);
    assert_eq!(st.access().version(), v1 + 3);
    assert_eq!(st.access().grants().count(), 1);
}

#[test]
fn a_cell_is_retired_only_once_it_owns_and_receives_nothing() {
    let mut st = world();
    let e = refused(&mut st, Command::RetireCell { cell: cell("east-1") }, ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("still owns"), "{e}");
    refused(&mut st, Command::RetireCell { cell: cell("mars-1") }, ErrorCode::InvalidArgument);
    // A move's target is not retired while the move is in flight.
    begin(&mut st, "west-1", false);
    refused(&mut st, Command::RetireCell { cell: cell("west-1") }, ErrorCode::InvalidArgument);

    let a = ok(&mut st, Command::RetireCell { cell: cell("west-2") });
    assert!(matches!(a.result, Ok(Outcome::Retired { .. })), "{:?}", a.result);
    assert!(st.cells().all(|(c, _)| c != &cell("west-2")), "retired but still listed");
    // Nothing can name it any more; its name can be registered again.
    refused(&mut st, Command::PlaceShard { shard: key("pay", "other"), cell: cell("west-2") }, ErrorCode::InvalidArgument);
    ok(&mut st, Command::RegisterCell { cell: cell("west-2"), region: region("west"), members: members(3) });
}

#[test]
fn automatic_failover_moves_only_opted_in_lapsed_shards_of_silent_cells_spread_over_renewing_ones() {
    use holdfast_registry_state::FailoverPolicy;
    use std::collections::BTreeSet;
    let mut st = world();
    ok(&mut st, Command::CreateNamespace { config: ns_config("ads") });
    for i in 0..6 {
        ok(&mut st, Command::PlaceShard { shard: key("pay", &format!("s{i}")), cell: cell("east-1") });
        ok(&mut st, Command::PlaceShard { shard: key("ads", &format!("s{i}")), cell: cell("east-1") });
    }
    let renewing: BTreeSet<_> = [cell("west-1"), cell("west-2")].into();
    let all_lapsed = |_: &holdfast_core::ShardKey| true;
    // Off by default: nothing moves, however long east-1 has been silent.
    assert!(st.auto_failover_moves(all_lapsed, &renewing, 100).is_empty());

    refused(&mut st, Command::SetAutoFailover { ns: ns("nope"), policy: Some(FailoverPolicy { fallback: None }) }, ErrorCode::UnknownNamespace);
    refused(&mut st, Command::SetAutoFailover { ns: ns("pay"), policy: Some(FailoverPolicy { fallback: Some(region("mars")) }) }, ErrorCode::InvalidArgument);
    ok(&mut st, Command::SetAutoFailover { ns: ns("pay"), policy: Some(FailoverPolicy { fallback: None }) });
    assert_eq!(st.auto_failover(&ns("pay")), Some(&FailoverPolicy { fallback: None }));

    // Only pay's shards (7 with pay/default), spread evenly over the renewing cells.
    let moves = st.auto_failover_moves(all_lapsed, &renewing, 100);
    assert_eq!(moves.len(), 7, "{moves:?}");
    assert!(moves.iter().all(|m| m.shard.ns.as_str() == "pay" && m.from_cell == cell("east-1")));
    let to_w1 = moves.iter().filter(|m| m.to_cell == cell("west-1")).count();
    assert!((3..=4).contains(&to_w1), "{moves:?}");
    // At most `limit` at a time; none while the lease still covers a shard; none off a
    // cell that renews (its lease lapsed for another reason: a shard it lost); none
    // with no renewing cell to go to.
    assert_eq!(st.auto_failover_moves(all_lapsed, &renewing, 2).len(), 2);
    assert!(st.auto_failover_moves(|_: &holdfast_core::ShardKey| false, &renewing, 100).is_empty());
    let everyone: BTreeSet<_> = [cell("east-1"), cell("west-1"), cell("west-2")].into();
    assert!(st.auto_failover_moves(all_lapsed, &everyone, 100).is_empty());
    assert!(st.auto_failover_moves(all_lapsed, &BTreeSet::new(), 100).is_empty());
    // A shard already moving is left to its move.
    ok(&mut st, Command::BeginMove { shard: key("pay", "s0"), to_cell: cell("west-2"), planned: false });
    assert!(!st.auto_failover_moves(all_lapsed, &renewing, 100).iter().any(|m| m.shard == key("pay", "s0")));

    // A fallback region is taken first; a draining region's cells never.
    ok(&mut st, Command::CreateRegion { region: region("south") });
    ok(&mut st, Command::RegisterCell { cell: cell("south-1"), region: region("south"), members: members(3) });
    ok(&mut st, Command::SetAutoFailover { ns: ns("pay"), policy: Some(FailoverPolicy { fallback: Some(region("south")) }) });
    let renewing: BTreeSet<_> = [cell("west-1"), cell("west-2"), cell("south-1")].into();
    let moves = st.auto_failover_moves(all_lapsed, &renewing, 100);
    assert!(!moves.is_empty() && moves.iter().all(|m| m.to_cell == cell("south-1")), "{moves:?}");
    ok(&mut st, Command::SetRegionState { region: region("south"), state: RegionState::Draining });
    assert!(st.auto_failover_moves(all_lapsed, &renewing, 100).iter().all(|m| m.to_cell.as_str().starts_with("west")));

    // The policy survives a snapshot; opting out stops it.
    assert_eq!(RegistryState::restore(&st.snapshot()).unwrap(), st);
    ok(&mut st, Command::SetAutoFailover { ns: ns("pay"), policy: None });
    assert!(st.auto_failover_moves(all_lapsed, &renewing, 100).is_empty());
    // A version 2 snapshot (before automatic failover) still loads, with none.
    let plain = world();
    let v2 = holdfast_core::codec::encode_versioned(b"HFRS", 2, &(&plain, plain.access()));
    assert_eq!(RegistryState::restore(&v2).unwrap(), plain);
}
