//! Ownership leases, as the registry leader sees them: volatile leader state measured
//! on the monotonic clock, never replicated.
//!
//! A renewal lists the shards a cell may serve; the cell may serve them until
//! `lease` after it sent the renewal. The leader records, per shard, the latest end of
//! a lease that listed it (`now + lease` when it answered, which is no earlier than the
//! cell's own deadline). An unplanned move may complete only once that moment (plus a
//! grace for clock-rate differences) has passed: from `BeginMove` on, renewals stop
//! listing the shard, so its recorded end stops moving.
//!
//! A new leader does not know what its predecessors granted. It treats every shard as
//! covered until its own election time plus one full lease (docs/design.md, "Ownership leases": "a new registry
//! leader waits one full lease before it moves any shard whose cell it cannot reach").
//! The predecessor could only grant while it held openraft's leader lease, which ends
//! before a new leader can be elected.

use crate::leader::LeaseTimings;
use holdfast_core::{CellId, ShardKey};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// The leader's record of the ownership leases it granted.
#[derive(Debug, Clone)]
pub struct OwnershipLeases {
    lease: Duration,
    renew: Duration,
    grace: Duration,
    /// [`LeaseTimings::fence_window`]: how long a live cell leader's renewals may pause.
    fence_window: Duration,
    /// Leases granted by earlier leaders may run until here.
    inherited_until: Instant,
    /// From here on this leader has heard every live cell leader (they renew every
    /// `renew`): its fence of deposed cell leaders is settled.
    settled_at: Instant,
    /// Per shard: the latest end of a lease this leader granted that listed it.
    granted_until: HashMap<ShardKey, Instant>,
    /// Per cell: when this leader last answered its renewal.
    renewed_at: HashMap<CellId, Instant>,
}

impl OwnershipLeases {
    /// The leases of a leader that took office at `elected` (or later: a later instant
    /// only makes it wait longer).
    pub fn on_election(elected: Instant, t: LeaseTimings) -> OwnershipLeases {
        OwnershipLeases {
            lease: t.lease,
            renew: t.renew,
            grace: t.grace,
            fence_window: t.fence_window(),
            inherited_until: elected + t.lease,
            settled_at: elected + t.fence_window(),
            granted_until: HashMap::new(),
            renewed_at: HashMap::new(),
        }
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often cells are told to renew.
    pub fn renew(&self) -> Duration {
        self.renew
    }

    /// Several renewal periods ([`LeaseTimings::fence_window`]): a cell leader silent
    /// for longer is not renewing, and its term is forgotten.
    pub fn fence_window(&self) -> Duration {
        self.fence_window
    }

    /// Records `cell`'s renewal answered at `now`, which lists `shards`.
    pub fn granted<'a>(&mut self, now: Instant, cell: &CellId, shards: impl IntoIterator<Item = &'a ShardKey>) {
        self.renewed_at.insert(cell.clone(), now);
        let until = now + self.lease;
        for shard in shards {
            let e = self.granted_until.entry(shard.clone()).or_insert(until);
            *e = (*e).max(until);
        }
    }

    /// Has this leader led long enough to have heard every live cell leader (a few of
    /// their renewals)? Before, a renewal from a deposed cell leader (a lower term than
    /// the live one's, which it has not heard yet) cannot be told apart.
    pub fn settled(&self, now: Instant) -> bool {
        now >= self.settled_at
    }

    /// The cells whose renewals this leader answered within the last fence window: those
    /// alive and reaching the registry (automatic failover moves shards only to them).
    pub fn renewing(&self, now: Instant) -> BTreeSet<CellId> {
        self.renewed_at.iter().filter(|(_, at)| now.saturating_duration_since(**at) <= self.fence_window).map(|(c, _)| c.clone()).collect()
    }

    /// Until when some cell may still serve `shard` under a lease.
    pub fn covered_until(&self, shard: &ShardKey) -> Instant {
        self.granted_until.get(shard).map_or(self.inherited_until, |u| (*u).max(self.inherited_until))
    }

    /// Is every lease that covered `shard` known to have run out at `now`?
    pub fn expired(&self, now: Instant, shard: &ShardKey) -> bool {
        now >= self.covered_until(shard) + self.grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_core::{NamespaceName, ShardName};

    fn key(s: &str) -> ShardKey {
        ShardKey::new(NamespaceName::new("pay").unwrap(), ShardName::new(s).unwrap())
    }

    fn cell() -> CellId {
        CellId::new("east-1").unwrap()
    }

    const LEASE: Duration = Duration::from_millis(3_000);
    const GRACE: Duration = Duration::from_millis(200);
    const TIMINGS: LeaseTimings = LeaseTimings { lease: LEASE, renew: Duration::from_millis(1_000), grace: GRACE };

    #[test]
    fn new_leader_waits_one_full_lease_for_every_shard() {
        let t0 = Instant::now();
        let l = OwnershipLeases::on_election(t0, TIMINGS);
        assert!(!l.expired(t0 + LEASE, &key("a")), "within the inherited lease");
        assert!(!l.expired(t0 + LEASE + GRACE - Duration::from_millis(1), &key("a")));
        assert!(l.expired(t0 + LEASE + GRACE, &key("a")));
    }

    #[test]
    fn a_renewal_extends_only_the_shards_it_listed() {
        let t0 = Instant::now();
        let mut l = OwnershipLeases::on_election(t0, TIMINGS);
        let t1 = t0 + Duration::from_millis(2_000);
        l.granted(t1, &cell(), [&key("a")]);
        let end_b = t0 + LEASE + GRACE;
        assert!(l.expired(end_b, &key("b")), "b was not listed: only the inherited lease covers it");
        assert!(!l.expired(end_b, &key("a")));
        assert!(l.expired(t1 + LEASE + GRACE, &key("a")));
    }

    #[test]
    fn an_older_renewal_never_shortens_a_lease() {
        let t0 = Instant::now();
        let mut l = OwnershipLeases::on_election(t0, TIMINGS);
        let late = t0 + Duration::from_millis(5_000);
        l.granted(late, &cell(), [&key("a")]);
        l.granted(t0 + Duration::from_millis(4_000), &cell(), [&key("a")]);
        assert_eq!(l.covered_until(&key("a")), late + LEASE);
    }

    #[test]
    fn a_cell_is_renewing_for_three_renewal_periods_after_its_last_renewal() {
        let t0 = Instant::now();
        let mut l = OwnershipLeases::on_election(t0, TIMINGS);
        assert!(l.renewing(t0).is_empty(), "a new leader has heard no cell");
        l.granted(t0, &cell(), []);
        assert!(l.renewing(t0 + Duration::from_millis(3_000)).contains(&cell()));
        assert!(l.renewing(t0 + Duration::from_millis(3_001)).is_empty());
    }
}
