//! What a drill's observers fold their polls into (pure; the polling is the runtime's):
//! - [`Owners`]: which cell owned a shard at an epoch, as the registry said, and the
//!   `OwnerObserved` line each answer makes;
//! - [`Serving`]: each cell's served shards, polled, folded into `CellServing`
//!   intervals, so the checker can tell two cells serving one shard at one epoch.
//!
//! The playground's drills (`holdfast drill`) and the simulation (`drills/sim`) both
//! use them.

use crate::history::EventKind;
use holdfast_core::{CellId, Epoch, NamespaceName, ShardName};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Who owned which shard at which epoch, as the registry said. Shared by the observer
/// that learns it and the workers that ask it (which cell a token's epoch came from).
#[derive(Debug, Default, Clone)]
pub struct Owners {
    inner: Arc<Mutex<OwnersInner>>,
}

#[derive(Debug, Default)]
struct OwnersInner {
    /// (ns, shard) → (cell, region, epoch) now.
    now: BTreeMap<(String, String), (String, String, u32)>,
    /// (ns, shard, epoch) → (cell, region): one cell per epoch.
    at: BTreeMap<(String, String, u32), (String, String)>,
}

/// One answer of the registry about a shard's owner (the fields a listed owner and a
/// watch event share).
#[derive(Debug, Clone, Copy)]
pub struct OwnerSeen<'a> {
    pub ns: &'a str,
    pub shard: &'a str,
    pub region: &'a str,
    pub cell: &'a str,
    pub epoch: u32,
    /// The move's destination while moving; empty otherwise.
    pub to_cell: &'a str,
}

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, OwnersInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in what the registry said; returns the `OwnerObserved` line to record
    /// (`None` if a name is invalid).
    pub fn saw(&self, o: OwnerSeen<'_>) -> Option<EventKind> {
        {
            let mut g = self.lock();
            g.now.insert((o.ns.to_owned(), o.shard.to_owned()), (o.cell.to_owned(), o.region.to_owned(), o.epoch));
            g.at.insert((o.ns.to_owned(), o.shard.to_owned(), o.epoch), (o.cell.to_owned(), o.region.to_owned()));
        }
        let (ns, shard) = (NamespaceName::new(o.ns).ok()?, ShardName::new(o.shard).ok()?);
        Some(EventKind::OwnerObserved {
            ns,
            shard,
            cell: CellId::new(o.cell).ok(),
            epoch: Epoch(o.epoch),
            moving_to: if o.to_cell.is_empty() { None } else { CellId::new(o.to_cell).ok() },
        })
    }

    /// The cell owning the shard now, as far as the registry has told.
    pub fn cell_now(&self, ns: &str, shard: &str) -> String {
        self.lock().now.get(&(ns.to_owned(), shard.to_owned())).map(|o| o.0.clone()).unwrap_or_else(|| "unknown".into())
    }

    /// The cell and region that owned the shard at `epoch` (`unknown` if never told).
    pub fn at(&self, ns: &str, shard: &str, epoch: u32) -> (String, String) {
        self.lock().at.get(&(ns.to_owned(), shard.to_owned(), epoch)).cloned().unwrap_or_else(|| ("unknown".into(), "unknown".into()))
    }
}

#[derive(Debug, Clone)]
struct Interval {
    from_ms: u64,
    last_ms: u64,
    open: bool,
}

/// Every cell's served shards, from repeated polls. An interval runs from the send
/// time of the first poll that showed the shard at an epoch to the answer time of the
/// last one (open if still served at the end).
#[derive(Debug, Default)]
pub struct Serving {
    seen: BTreeMap<(String, String, String, u32), Interval>,
}

impl Serving {
    /// One poll of `cell`, sent at `sent_ms` and answered at `answered_ms`: it served
    /// `served` (ns, shard, epoch), unsealed.
    pub fn polled(&mut self, cell: &str, sent_ms: u64, answered_ms: u64, served: &[(String, String, u32)]) {
        for ((c, ns, shard, epoch), iv) in self.seen.iter_mut() {
            if c == cell && iv.open && !served.iter().any(|(n, s, e)| n == ns && s == shard && e == epoch) {
                iv.open = false;
            }
        }
        for (ns, shard, epoch) in served {
            let iv = self.seen.entry((cell.to_owned(), ns.clone(), shard.clone(), *epoch)).or_insert(Interval {
                from_ms: sent_ms,
                last_ms: answered_ms,
                open: true,
            });
            if iv.open {
                iv.last_ms = answered_ms;
            }
        }
    }

    /// The intervals as `CellServing` lines (`until_ms: None` if still served).
    pub fn into_events(self) -> Vec<EventKind> {
        self.seen
            .into_iter()
            .filter_map(|((cell, ns, shard, epoch), iv)| {
                Some(EventKind::CellServing {
                    cell: CellId::new(cell).ok()?,
                    ns: NamespaceName::new(ns).ok()?,
                    shard: ShardName::new(shard).ok()?,
                    epoch: Epoch(epoch),
                    from_ms: iv.from_ms,
                    until_ms: (!iv.open).then_some(iv.last_ms),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(epoch: u32) -> Vec<(String, String, u32)> {
        vec![("ns".into(), "s0".into(), epoch)]
    }

    #[test]
    fn an_interval_runs_from_the_first_poll_sent_to_the_last_answer() {
        let mut s = Serving::default();
        s.polled("a", 100, 110, &served(1));
        s.polled("a", 400, 410, &served(1));
        s.polled("a", 700, 710, &[]);
        s.polled("a", 1000, 1010, &served(2));
        let lines = s.into_events();
        let spans: Vec<(u32, u64, Option<u64>)> = lines
            .iter()
            .map(|e| match e {
                EventKind::CellServing { epoch, from_ms, until_ms, .. } => (epoch.0, *from_ms, *until_ms),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(spans, vec![(1, 100, Some(410)), (2, 1000, None)]);
    }

    #[test]
    fn owners_answer_by_epoch_and_make_the_line() {
        let o = Owners::default();
        let line = o.saw(OwnerSeen { ns: "ns", shard: "s0", region: "east", cell: "a", epoch: 3, to_cell: "b" });
        assert!(matches!(line, Some(EventKind::OwnerObserved { epoch: Epoch(3), moving_to: Some(_), .. })));
        assert_eq!(o.at("ns", "s0", 3), ("a".to_owned(), "east".to_owned()));
        assert_eq!(o.at("ns", "s0", 4).0, "unknown");
        assert_eq!(o.cell_now("ns", "s0"), "a");
    }
}
