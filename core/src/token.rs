//! Fencing tokens: `epoch << 40 | seq`.
//!
//! `epoch` is the shard's ownership epoch (24 bits), bumped by the registry on every
//! transfer; `seq` is the shard's grant counter (40 bits) kept in the cell's
//! replicated state. Because the epoch sits in the high bits, every token issued after
//! a transfer compares greater than every token issued before it, whatever the seq.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bits of a token that hold the seq.
pub const SEQ_BITS: u32 = 40;
/// Bits of a token that hold the epoch.
pub const EPOCH_BITS: u32 = 24;

/// A shard's ownership epoch. Only the registry makes a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Epoch(pub u32);

/// A shard's grant counter within one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Seq(pub u64);

/// A fencing token. Compare tokens of the same lock with `<`: larger is newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct FencingToken(pub u64);

/// A token could not be formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("epoch {0} does not fit in {EPOCH_BITS} bits")]
    EpochOverflow(u32),
    #[error("seq {0} does not fit in {SEQ_BITS} bits; the shard needs an epoch bump")]
    SeqOverflow(u64),
}

impl Epoch {
    /// The largest epoch a token can carry.
    pub const MAX: Epoch = Epoch((1 << EPOCH_BITS) - 1);

    /// The epoch after this one, if there is one.
    pub fn next(self) -> Option<Epoch> {
        (self < Epoch::MAX).then_some(Epoch(self.0 + 1))
    }
}

impl Seq {
    /// The largest seq a token can carry.
    pub const MAX: Seq = Seq((1 << SEQ_BITS) - 1);
    /// When a shard's seq reaches this, the cell asks the registry for an epoch bump
    /// while there is still ample room to keep granting.
    pub const BUMP_THRESHOLD: Seq = Seq(Self::MAX.0 - (1 << 30));
}

impl FencingToken {
    /// The token `epoch << 40 | seq`.
    pub fn new(epoch: Epoch, seq: Seq) -> Result<FencingToken, TokenError> {
        if epoch > Epoch::MAX {
            return Err(TokenError::EpochOverflow(epoch.0));
        }
        if seq > Seq::MAX {
            return Err(TokenError::SeqOverflow(seq.0));
        }
        Ok(FencingToken((u64::from(epoch.0) << SEQ_BITS) | seq.0))
    }

    pub fn epoch(self) -> Epoch {
        Epoch((self.0 >> SEQ_BITS) as u32)
    }

    pub fn seq(self) -> Seq {
        Seq(self.0 & Seq::MAX.0)
    }

    /// The smallest token of an epoch: every token of that epoch is `>=` it.
    pub fn floor_of(epoch: Epoch) -> FencingToken {
        FencingToken(u64::from(epoch.0) << SEQ_BITS)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The raw number is what resources compare; epoch/seq helps a human.
        write!(f, "{} (e{}:{})", self.0, self.epoch().0, self.seq().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn token_layout() {
        let t = FencingToken::new(Epoch(3), Seq(7)).unwrap();
        assert_eq!(t.0, (3u64 << 40) | 7);
        assert_eq!(t.epoch(), Epoch(3));
        assert_eq!(t.seq(), Seq(7));
        assert!(FencingToken::new(Epoch(1 << 24), Seq(0)).is_err());
        assert!(FencingToken::new(Epoch(0), Seq(1 << 40)).is_err());
        assert_eq!(Epoch::MAX.next(), None);
    }

    proptest! {
        /// Any token of a later epoch beats any token of an earlier one: the property
        /// that keeps tokens growing across transfers.
        #[test]
        fn later_epoch_always_larger(e in 0u32..Epoch::MAX.0, s1 in 0u64..=Seq::MAX.0, s2 in 0u64..=Seq::MAX.0) {
            let old = FencingToken::new(Epoch(e), Seq(s1)).unwrap();
            let new = FencingToken::new(Epoch(e + 1), Seq(s2)).unwrap();
            prop_assert!(new > old);
            prop_assert!(new >= FencingToken::floor_of(Epoch(e + 1)));
        }

        #[test]
        fn round_trip(e in 0u32..=Epoch::MAX.0, s in 0u64..=Seq::MAX.0) {
            let t = FencingToken::new(Epoch(e), Seq(s)).unwrap();
            prop_assert_eq!((t.epoch(), t.seq()), (Epoch(e), Seq(s)));
        }
    }
}
