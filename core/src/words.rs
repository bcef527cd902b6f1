//! The one spelling of holdfast's enum words — `exclusive`, `fail-closed`,
//! `leadership` — for every human-facing surface: HTTP JSON, the command line, config
//! files and docs. (Protobuf has its own numbers, mapped in `holdfast-proto`.)

use crate::{Intent, Mode, Posture};
use std::fmt;
use std::str::FromStr;

/// A word that is not one of its enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {given:?} is not one of: {expected}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub given: String,
    pub expected: String,
}

macro_rules! words {
    ($ty:ident, $what:literal, $($variant:ident => $word:literal),+ $(,)?) => {
        impl $ty {
            /// Every value, in the order docs list them.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The stable word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownWord;

            fn from_str(s: &str) -> Result<$ty, UnknownWord> {
                $ty::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| UnknownWord {
                    what: $what,
                    given: s.to_owned(),
                    expected: $ty::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", "),
                })
            }
        }
    };
}

words!(Mode, "mode", Exclusive => "exclusive", Shared => "shared");
words!(Intent, "intent", Efficiency => "efficiency", Correctness => "correctness", Leadership => "leadership");
words!(Posture, "posture", FailClosed => "fail-closed", FailOpen => "fail-open");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_round_trips_and_matches_serde() {
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>(), Ok(*m));
            assert_eq!(serde_json::to_string(m).unwrap(), format!("\"{m}\""));
        }
        for i in Intent::ALL {
            assert_eq!(i.as_str().parse::<Intent>(), Ok(*i));
            assert_eq!(serde_json::to_string(i).unwrap(), format!("\"{i}\""));
        }
        for p in Posture::ALL {
            assert_eq!(p.as_str().parse::<Posture>(), Ok(*p));
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{p}\""));
        }
        let e = "Leadership".parse::<Intent>().unwrap_err();
        assert_eq!(e.to_string(), "intent \"Leadership\" is not one of: efficiency, correctness, leadership");
    }

    #[test]
    fn the_persisted_encoding_is_the_variant_index() {
        // Renaming words must never change what snapshots and log entries hold.
        assert_eq!(bincode::serialize(&Intent::Leadership).unwrap(), 2u32.to_le_bytes());
        assert_eq!(bincode::serialize(&Posture::FailOpen).unwrap(), 1u32.to_le_bytes());
        assert_eq!(bincode::serialize(&Mode::Shared).unwrap(), 1u32.to_le_bytes());
    }
}
