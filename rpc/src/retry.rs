//! Retry policy: exponential backoff with full jitter (50 ms → 2 s), so a group that
//! comes back is not hit by every caller at once.

use std::time::Duration;

/// How a caller retries retryable failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first backoff's ceiling. Default 50 ms.
    pub initial: Duration,
    /// The largest backoff ceiling; doubling stops here. Default 2 s.
    pub max: Duration,
    /// How long a call keeps retrying before it returns its last error (for Acquire,
    /// counted after its wait timeout). Default 30 s.
    pub give_up_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { initial: Duration::from_millis(50), max: Duration::from_secs(2), give_up_after: Duration::from_secs(30) }
    }
}

/// The backoff state of one call (or of one renewal loop).
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    attempt: u32,
}

impl Backoff {
    pub fn new(policy: RetryPolicy) -> Backoff {
        Backoff { policy, attempt: 0 }
    }

    /// The ceiling of the next sleep: `initial * 2^n`, capped at `max`.
    fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(20)).unwrap_or(u32::MAX);
        self.policy.initial.saturating_mul(factor).min(self.policy.max)
    }

    /// The next sleep: uniform in `[0, ceiling]` ("full jitter").
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let ms = ceiling.as_millis() as u64;
        Duration::from_millis(crate::entropy::up_to(ms))
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_from_50ms_and_stop_at_2s() {
        let mut b = Backoff::new(RetryPolicy::default());
        let mut ceilings = Vec::new();
        for _ in 0..8 {
            ceilings.push(b.ceiling().as_millis());
            b.next_delay();
        }
        assert_eq!(ceilings, vec![50, 100, 200, 400, 800, 1600, 2000, 2000]);
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(2));
        }
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(50));
    }

    #[test]
    fn jitter_is_full_not_around_the_ceiling() {
        let mut lows = 0;
        for _ in 0..200 {
            let mut b = Backoff::new(RetryPolicy { initial: Duration::from_secs(1), ..RetryPolicy::default() });
            if b.next_delay() < Duration::from_millis(500) {
                lows += 1;
            }
        }
        // Uniform in [0, 1 s]: about half below 500 ms.
        assert!((50..150).contains(&lows), "{lows} of 200 below half the ceiling");
    }
}
