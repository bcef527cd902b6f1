//! The cell leader's ownership lease from the registry, and what to commit to follow it.
//!
//! docs/design.md, "Ownership leases": a cell may grant for a shard only while it holds the
//! registry's ownership lease; each renewal answer lists the `(shard, epoch)` pairs it
//! covers and the cell serves exactly those; a new cell leader grants nothing until it
//! has renewed; a cell that cannot renew stops granting before its lease runs out,
//! measured on its monotonic clock with a margin.
//!
//! This file is the pure part — [`OwnershipLease`] (the gate every grant path asks) and
//! [`plan`] (what the leader must commit to match an answer) — with `now` passed in,
//! so it is unit-tested without a registry. The loop that calls the registry is in
//! `follow.rs`. Only the leader has an `OwnershipLease`; a new leader starts with an
//! empty one.

use holdfast_cell_state::{CellState, Command, ShardView};
use holdfast_core::{Epoch, ErrorCode, LockName, NamespaceConfig, Seq, ShardKey};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// One shard as a renewal answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub shard: ShardKey,
    pub epoch: Epoch,
    /// A planned move away is in progress: seal, report, grant nothing new.
    pub draining: bool,
    /// For adoption: locks that had holders at the source.
    pub delayed_locks: Vec<LockName>,
    /// The previous owner never sealed (unplanned move): every lock may have a holder
    /// somewhere, so the whole shard stays quiet for the namespace's lock-delay.
    pub previous_unsealed: bool,
    /// The registry has recorded that this cell serves the epoch. Until then the cell
    /// grants nothing in it: were its data lost before the record, it would adopt the
    /// same epoch again and issue the same tokens twice.
    pub adopted: bool,
}

#[derive(Debug, Clone)]
struct Covered {
    epoch: Epoch,
    draining: bool,
    adopted: bool,
    /// No grants before this instant (lock-delay after an unplanned move).
    quiet_until: Option<Instant>,
}

/// Why a grant path must refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

/// The leader's ownership lease.
#[derive(Debug)]
pub struct OwnershipLease {
    margin: Duration,
    /// End of the lease minus the margin; `None` until the first renewal.
    until: Option<Instant>,
    shards: HashMap<ShardKey, Covered>,
}

impl OwnershipLease {
    /// An empty lease: a new leader grants nothing until its first renewal.
    pub fn new(margin: Duration) -> OwnershipLease {
        OwnershipLease { margin, until: None, shards: HashMap::new() }
    }

    /// Records an answer to a renewal *sent* at `sent` and received at `now`.
    /// `lock_delay` gives a namespace's lock-delay (for unsealed handovers).
    pub fn renewed(&mut self, sent: Instant, now: Instant, lease: Duration, listed: &[Listed], lock_delay: impl Fn(&ShardKey) -> Duration) {
        // Counted from the send: the registry counts from a later instant, so the
        // cell's view always ends first. The margin, and 0.1 % of the lease, cover
        // clock-rate differences (a 35-minute lease: 2.1 s more).
        let margin = self.margin + holdfast_core::clock_rate_allowance(lease);
        self.until = lease.checked_sub(margin).map(|l| sent + l);
        let mut next = HashMap::new();
        for l in listed {
            let quiet_until = match self.shards.get(&l.shard) {
                // Same epoch as before: keep the quiet period already running.
                Some(c) if c.epoch == l.epoch => c.quiet_until,
                _ => l.previous_unsealed.then(|| now + lock_delay(&l.shard)),
            };
            next.insert(l.shard.clone(), Covered { epoch: l.epoch, draining: l.draining, adopted: l.adopted, quiet_until });
        }
        self.shards = next;
    }

    /// May this leader grant (or change holds) in `shard`, which its state serves at
    /// `epoch`? Asked before every Acquire and Release is proposed.
    pub fn may_grant(&self, now: Instant, shard: &ShardKey, epoch: Epoch) -> Result<(), Refusal> {
        let refuse = |code, message: String| Err(Refusal { code, message });
        match self.until {
            None => return refuse(ErrorCode::Unavailable, "this cell leader has not yet renewed its ownership lease with the registry".into()),
            Some(until) if now >= until => {
                return refuse(ErrorCode::Unavailable, "this cell's ownership lease ran out (registry unreachable?); it grants nothing until it renews".into())
            }
            Some(_) => {}
        }
        let Some(c) = self.shards.get(shard) else {
            return refuse(ErrorCode::NotOwner, format!("the registry does not place shard {shard} in this cell"));
        };
        if c.draining {
            return refuse(ErrorCode::Moving, format!("shard {shard} is moving to another cell; retry"));
        }
        if c.epoch != epoch {
            return refuse(ErrorCode::Moving, format!("shard {shard} is being adopted at epoch {} (serving {}); retry", c.epoch.0, epoch.0));
        }
        if !c.adopted {
            return refuse(ErrorCode::Moving, format!("shard {shard} is being adopted at epoch {}: the registry has not recorded it yet; retry", c.epoch.0));
        }
        if let Some(q) = c.quiet_until.filter(|q| now < *q) {
            return refuse(
                ErrorCode::Moving,
                format!("shard {shard} arrived without a seal; lock-delay for {} ms more", q.saturating_duration_since(now).as_millis()),
            );
        }
        Ok(())
    }

    /// Why a shard the lock table does not serve (unknown, or sealed) must still be
    /// refused with a retryable code: the latest answer lists it, so it is being
    /// adopted, or it is draining away after its seal. `None` if not listed.
    pub fn unserved(&self, shard: &ShardKey) -> Option<Refusal> {
        let c = self.shards.get(shard)?;
        let message = if c.draining {
            format!("shard {shard} is sealed here and moving to another cell; retry")
        } else {
            format!("shard {shard} is being adopted by this cell at epoch {}; retry", c.epoch.0)
        };
        Some(Refusal { code: ErrorCode::Moving, message })
    }

    /// How long until the lease (less its margin) ends; zero once it has, or before
    /// the first renewal.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.until.map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
    }

    /// Still inside the lease (any shard)?
    pub fn held(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// May a grant of `shard` at `epoch`, committed under this lease, be answered now?
    /// Only while the lease (less its margin) lasts and still lists the shard at that
    /// epoch: past it, the registry may already let another cell grant at the next
    /// epoch. A draining shard is still covered: its seal, later in the log, ends the
    /// hold with `MOVED`, and the registry waits for that seal.
    pub fn covers(&self, now: Instant, shard: &ShardKey, epoch: Epoch) -> bool {
        self.held(now) && self.shards.get(shard).is_some_and(|c| c.epoch == epoch)
    }

    /// How long the lease still covers `shard` at `epoch` (zero if it does not).
    pub fn left(&self, now: Instant, shard: &ShardKey, epoch: Epoch) -> Duration {
        match self.until {
            Some(until) if self.covers(now, shard, epoch) => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }
}

/// What a renewal reports as served: every unsealed shard and its epoch — except a
/// shard whose seq reached [`Seq::BUMP_THRESHOLD`]. Left out, it reads to the registry
/// like a lost epoch: it commits `Restarted`, lists the shard at the next epoch, and
/// the cell adopts that in place (sealing the old one), so tokens go on growing with
/// 2^30 grants of room to spare.
pub fn served(shards: impl Iterator<Item = ShardView>) -> Vec<(ShardKey, Epoch)> {
    shards.filter(|s| !s.sealed && s.seq < Seq::BUMP_THRESHOLD).map(|s| (s.key, s.epoch)).collect()
}

/// What the leader does to follow one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Commit this command.
    Commit(Command),
    /// Commit `SealShard` for a draining shard, then report the seal to the registry.
    SealAndReport { shard: ShardKey, epoch: Epoch },
}

/// The commands that make `state` serve exactly what `listed` says, with `configs`.
/// Order matters and is kept: configs first (adoption needs them), then seals of
/// shards that left, then adoptions, then seals of draining shards.
pub fn plan(state: &CellState, listed: &[Listed], configs: &[NamespaceConfig]) -> Vec<Step> {
    let mut steps = Vec::new();
    for cfg in configs {
        if state.namespace(&cfg.name).is_none_or(|c| c.version < cfg.version) {
            steps.push(Step::Commit(Command::ApplyConfig { config: cfg.clone() }));
        }
    }
    let served: HashMap<ShardKey, (Epoch, bool)> = state.shards().map(|s| (s.key, (s.epoch, s.sealed))).collect();
    // Shards this cell still serves that the registry no longer lists here (an
    // unplanned move away, or a lost and restored cell): seal them, so their holders
    // are told MOVED and nothing more is granted.
    let mut gone: Vec<_> =
        served.iter().filter(|(key, (_, sealed))| !sealed && !listed.iter().any(|l| &l.shard == *key)).map(|(key, (epoch, _))| (key.clone(), *epoch)).collect();
    gone.sort();
    for (shard, epoch) in gone {
        steps.push(Step::Commit(Command::SealShard { shard, epoch }));
    }
    for l in listed {
        match served.get(&l.shard) {
            Some((epoch, _)) if *epoch >= l.epoch => {}
            _ => steps.push(Step::Commit(Command::AdoptShard { shard: l.shard.clone(), epoch: l.epoch, delayed_locks: l.delayed_locks.clone() })),
        }
    }
    for l in listed.iter().filter(|l| l.draining) {
        // Sealing twice is answered with the same report, so a lost report is simply
        // retried at the next renewal.
        steps.push(Step::SealAndReport { shard: l.shard.clone(), epoch: l.epoch });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_cell_state::Entry;
    use holdfast_core::{Intent, NamespaceName, ShardName};

    const LEASE: Duration = Duration::from_millis(3_000);
    const MARGIN: Duration = Duration::from_millis(500);

    fn key(s: &str) -> ShardKey {
        ShardKey::new(NamespaceName::new("pay").unwrap(), ShardName::new(s).unwrap())
    }

    fn listed(s: &str, epoch: u32) -> Listed {
        Listed { shard: key(s), epoch: Epoch(epoch), draining: false, delayed_locks: vec![], previous_unsealed: false, adopted: true }
    }

    fn config(version: u64) -> NamespaceConfig {
        let mut c = NamespaceConfig::with_defaults(NamespaceName::new("pay").unwrap(), "o", Intent::Correctness);
        c.version = version;
        c
    }

    #[test]
    fn new_leader_grants_nothing_until_it_renews() {
        let t0 = Instant::now();
        let lease = OwnershipLease::new(MARGIN);
        assert_eq!(lease.may_grant(t0, &key("a"), Epoch(1)).unwrap_err().code, ErrorCode::Unavailable);
    }

    #[test]
    fn lease_counts_from_the_send_and_ends_a_margin_early() {
        let t0 = Instant::now();
        let mut lease = OwnershipLease::new(MARGIN);
        // The answer took 1 s to arrive: the lease still counts from the send.
        lease.renewed(t0, t0 + Duration::from_secs(1), LEASE, &[listed("a", 1)], |_| Duration::ZERO);
        // The margin, and 0.1 % of the lease for clock rates.
        let end = t0 + LEASE - MARGIN - LEASE / 1_000;
        assert!(lease.may_grant(end - Duration::from_millis(1), &key("a"), Epoch(1)).is_ok());
        let late = lease.may_grant(end, &key("a"), Epoch(1)).unwrap_err();
        assert_eq!(late.code, ErrorCode::Unavailable);
        assert!(!lease.held(end));
        assert_eq!(lease.left(end - Duration::from_millis(10), &key("a"), Epoch(1)), Duration::from_millis(10));
        // A 35-minute lease ends 2.1 s earlier for clock rates.
        let mut long = OwnershipLease::new(MARGIN);
        let thirty = Duration::from_secs(1_800);
        long.renewed(t0, t0, thirty, &[listed("a", 1)], |_| Duration::ZERO);
        assert!(long.held(t0 + thirty - MARGIN - Duration::from_millis(1_801)));
        assert!(!long.held(t0 + thirty - MARGIN - Duration::from_millis(1_800)));
    }

    #[test]
    fn serves_exactly_the_listed_pairs() {
        let t0 = Instant::now();
        let mut lease = OwnershipLease::new(MARGIN);
        let mut draining = listed("b", 4);
        draining.draining = true;
        lease.renewed(t0, t0, LEASE, &[listed("a", 2), draining], |_| Duration::ZERO);
        assert!(lease.may_grant(t0, &key("a"), Epoch(2)).is_ok());
        assert_eq!(lease.may_grant(t0, &key("a"), Epoch(1)).unwrap_err().code, ErrorCode::Moving, "adoption pending");
        assert_eq!(lease.may_grant(t0, &key("b"), Epoch(4)).unwrap_err().code, ErrorCode::Moving, "draining");
        assert_eq!(lease.may_grant(t0, &key("c"), Epoch(1)).unwrap_err().code, ErrorCode::NotOwner);
        // The next answer no longer lists a: it is not served any more.
        lease.renewed(t0 + Duration::from_secs(1), t0 + Duration::from_secs(1), LEASE, &[], |_| Duration::ZERO);
        assert_eq!(lease.may_grant(t0 + Duration::from_secs(1), &key("a"), Epoch(2)).unwrap_err().code, ErrorCode::NotOwner);
    }

    /// Issue #15, item 5: an epoch the registry lists as not yet adopted is served
    /// (adopted in the lock table) but not granted in, until an answer says the
    /// registry recorded it; otherwise a cell wiped in between re-issues its tokens.
    #[test]
    fn an_epoch_is_granted_in_only_once_the_registry_recorded_its_adoption() {
        let t0 = Instant::now();
        let mut lease = OwnershipLease::new(MARGIN);
        let mut fresh = listed("a", 3);
        fresh.adopted = false;
        lease.renewed(t0, t0, LEASE, &[fresh], |_| Duration::ZERO);
        let r = lease.may_grant(t0, &key("a"), Epoch(3)).unwrap_err();
        assert_eq!(r.code, ErrorCode::Moving);
        assert!(r.message.contains("not recorded"), "{}", r.message);
        lease.renewed(t0, t0, LEASE, &[listed("a", 3)], |_| Duration::ZERO);
        assert!(lease.may_grant(t0, &key("a"), Epoch(3)).is_ok());
    }

    /// Issue #15, item 6: a shard near the end of its seq asks for the next epoch by
    /// leaving itself out of the report (docs/registry.md, epoch bumps).
    #[test]
    fn a_shard_near_its_last_seq_is_left_out_of_the_report_to_get_the_next_epoch() {
        let view = |s: &str, seq: u64, sealed: bool| ShardView { key: key(s), epoch: Epoch(7), seq: Seq(seq), sealed, keys: 0 };
        let report = served(
            [view("fresh", 5, false), view("sealed", 5, true), view("nearly", Seq::BUMP_THRESHOLD.0 - 1, false), view("full", Seq::BUMP_THRESHOLD.0, false)]
                .into_iter(),
        );
        assert_eq!(report, vec![(key("fresh"), Epoch(7)), (key("nearly"), Epoch(7))]);
    }

    #[test]
    fn unsealed_handover_keeps_the_shard_quiet_for_the_lock_delay() {
        let t0 = Instant::now();
        let delay = Duration::from_millis(1_000);
        let mut lease = OwnershipLease::new(MARGIN);
        let mut l = listed("a", 3);
        l.previous_unsealed = true;
        lease.renewed(t0, t0, LEASE, std::slice::from_ref(&l), |_| delay);
        assert_eq!(lease.may_grant(t0 + delay - Duration::from_millis(1), &key("a"), Epoch(3)).unwrap_err().code, ErrorCode::Moving);
        // A later renewal of the same epoch does not restart the quiet period.
        lease.renewed(t0 + Duration::from_millis(900), t0 + Duration::from_millis(900), LEASE, &[l], |_| delay);
        assert!(lease.may_grant(t0 + delay, &key("a"), Epoch(3)).is_ok());
    }

    #[test]
    fn plan_applies_configs_adopts_seals_what_left_and_reports_drains() {
        let mut st = CellState::new();
        for cmd in [
            Command::ApplyConfig { config: config(1) },
            Command::AdoptShard { shard: key("old"), epoch: Epoch(1), delayed_locks: vec![] },
            Command::AdoptShard { shard: key("kept"), epoch: Epoch(2), delayed_locks: vec![] },
            Command::AdoptShard { shard: key("leaving"), epoch: Epoch(5), delayed_locks: vec![] },
        ] {
            st.apply(&Entry::new(0, cmd)).result.unwrap();
        }
        let mut leaving = listed("leaving", 5);
        leaving.draining = true;
        let mut new = listed("new", 7);
        new.delayed_locks = vec![LockName::new("l").unwrap()];
        let steps = plan(&st, &[listed("kept", 2), leaving, new], &[config(2)]);
        assert_eq!(
            steps,
            vec![
                Step::Commit(Command::ApplyConfig { config: config(2) }),
                Step::Commit(Command::SealShard { shard: key("old"), epoch: Epoch(1) }),
                Step::Commit(Command::AdoptShard { shard: key("new"), epoch: Epoch(7), delayed_locks: vec![LockName::new("l").unwrap()] }),
                Step::SealAndReport { shard: key("leaving"), epoch: Epoch(5) },
            ]
        );
        // Once followed, the same answer plans nothing but the (idempotent) report.
        for s in &steps {
            if let Step::Commit(cmd) = s {
                st.apply(&Entry::new(0, cmd.clone())).result.unwrap();
            }
        }
        let mut leaving = listed("leaving", 5);
        leaving.draining = true;
        let again = plan(&st, &[listed("kept", 2), leaving, listed("new", 7)], &[config(2)]);
        assert_eq!(again, vec![Step::SealAndReport { shard: key("leaving"), epoch: Epoch(5) }]);
    }
}
