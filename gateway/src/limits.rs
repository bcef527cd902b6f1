//! Per-namespace rate limits: a token bucket per namespace, refilled at the namespace's
//! `acquires_per_second` with one second of burst. Buckets are independent; the only
//! shared step is finding the bucket, so a namespace at its limit never slows another.

use holdfast_core::NamespaceName;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant, rate: f64) -> Result<(), Duration> {
        if (self.rate - rate).abs() > f64::EPSILON {
            // The namespace's config changed: keep the tokens, cap them at the new burst.
            self.rate = rate;
            self.tokens = self.tokens.min(rate);
        }
        self.tokens = (self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * self.rate).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// The rate limits of one gateway. Limits are per gateway: N gateways in a region
/// admit up to N × the rate (documented in docs/gateway.md).
#[derive(Debug, Default)]
pub struct Limits {
    buckets: Mutex<HashMap<NamespaceName, Arc<Mutex<Bucket>>>>,
}

impl Limits {
    /// May one more acquire in `ns` pass now, at `per_second`? If not, how long until
    /// one may (the caller's `Retry-After`).
    pub fn admit(&self, ns: &NamespaceName, per_second: u32, now: Instant) -> Result<(), Duration> {
        let rate = f64::from(per_second.max(1));
        let bucket = {
            let mut all = self.buckets.lock().expect("buckets lock");
            all.entry(ns.clone()).or_insert_with(|| Arc::new(Mutex::new(Bucket { rate, tokens: rate, last: now }))).clone()
        };
        let mut b = bucket.lock().expect("bucket lock");
        b.take(now, rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_its_rate_and_no_more_and_others_are_untouched() {
        let limits = Limits::default();
        let t0 = Instant::now();
        let busy = NamespaceName::new("busy").unwrap();
        let quiet = NamespaceName::new("quiet").unwrap();
        let admitted = (0..50).filter(|_| limits.admit(&busy, 10, t0).is_ok()).count();
        assert_eq!(admitted, 10, "one second of burst");
        assert!(limits.admit(&quiet, 10, t0).is_ok(), "another namespace is not slowed");
        let wait = limits.admit(&busy, 10, t0 + Duration::from_millis(50)).unwrap_err();
        assert!((Duration::from_millis(45)..=Duration::from_millis(55)).contains(&wait), "half a token refilled, half to go: {wait:?}");
        assert!(limits.admit(&busy, 10, t0 + Duration::from_millis(100)).is_ok(), "refilled at 10/s");
        // Over 10 s at a steady push, about 10/s pass.
        let mut now = t0 + Duration::from_secs(1);
        let mut passed = 0;
        for _ in 0..1_000 {
            now += Duration::from_millis(10);
            passed += usize::from(limits.admit(&busy, 10, now).is_ok());
        }
        assert!((95..=110).contains(&passed), "{passed}");
    }
}
