//! The randomness holdfast's processes draw — ids of sessions and requests, retry
//! jitter — in one place: from the thread's OS-seeded generator, or, on a thread the
//! deterministic simulation has seeded ([`seed_this_thread`]), from the seed, so that
//! one seed replays one run exactly (docs/simulation.md).
//!
//! Secrets (bearer tokens, keys) never come from here: they use `ring`'s system
//! generator.

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::cell::RefCell;

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// From now on, this thread draws from `seed` (a simulation runs every simulated host
/// on its one thread). `None` returns it to the OS-seeded generator.
pub fn seed_this_thread(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// A random `u64`.
pub fn random_u64() -> u64 {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(seeded) => seeded.next_u64(),
        None => rand::rng().next_u64(),
    })
}

/// A random number in `0..=max`.
pub fn up_to(max: u64) -> u64 {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(seeded) => seeded.random_range(0..=max),
        None => rand::rng().random_range(0..=max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_thread_repeats_its_draws_and_an_unseeded_one_does_not() {
        seed_this_thread(Some(7));
        let a: Vec<u64> = (0..4).map(|_| random_u64()).chain([up_to(1000)]).collect();
        seed_this_thread(Some(7));
        let b: Vec<u64> = (0..4).map(|_| random_u64()).chain([up_to(1000)]).collect();
        assert_eq!(a, b);
        assert!(b[4] <= 1000);
        seed_this_thread(None);
        let c: Vec<u64> = (0..4).map(|_| random_u64()).collect();
        assert_ne!(&a[..4], &c[..], "the OS-seeded generator came back seeded");
    }
}
