//! [`Upstream`]: the one leader-following caller. It calls a replicated group (a cell,
//! the registry) — or a set of interchangeable front doors (gateways) — through any of
//! its members:
//!
//! - a *pass* tries the member that answered last first, then the others in their
//!   configured order; a member that just failed (refused the connection, reset it,
//!   did not answer in time) is tried last for a while, so a paused or dead leader does
//!   not cost every call a timeout;
//! - a `NOT_LEADER` answer's hint is followed at once, once per pass — to a configured
//!   member only ([`Hints::Members`]: a caller reaches a group the way its operator
//!   configured, so a partitioned path stays partitioned), or anywhere
//!   ([`Hints::Anywhere`]: a client given one node of a cell finds its leader);
//! - any other answer with a holdfast code is the group's answer and ends the pass;
//! - [`Upstream::call_retrying`] repeats passes with backoff and full jitter while the
//!   failure is retryable.
//!
//! Every failure is typed ([`CallError`]): nobody compares codes as strings.

use crate::retry::{Backoff, RetryPolicy};
use crate::status::{self, Answer};
use crate::transport::Transport;
use holdfast_core::ErrorCode;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Status;
use tracing::debug;

/// The longest pause between passes while members answer NOT_LEADER or UNAVAILABLE
/// (a failover under way).
const FAILOVER_POLL: Duration = Duration::from_millis(100);
/// The last pass starts this long before a retrying call gives up.
const LAST_PASS_LEAD: Duration = Duration::from_millis(20);
/// How long a member that failed is tried after the others.
const DEMOTED_FOR: Duration = Duration::from_secs(3);

/// Where a `NOT_LEADER` hint may lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hints {
    /// Only to a configured member.
    Members,
    /// To any address the group names.
    Anywhere,
}

/// Why a call failed.
#[derive(Debug, Clone)]
pub enum CallError {
    /// A member answered with a stable code: the group's answer. `NOT_LEADER` here
    /// means no member that could be reached leads (an election is under way).
    Refused { code: ErrorCode, status: Status },
    /// A member answered with a status no holdfast server makes and no retry changes
    /// (an unimplemented method, a message over the size limit).
    Failed(Status),
    /// No member answered: every one was unreachable, reset the call, or did not
    /// answer in time. For a write the outcome is unknown.
    Unreachable(String),
}

impl CallError {
    /// The stable code, when a member gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            CallError::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// May the same request (the same request id) be sent again and succeed?
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Refused { code, .. } => code.is_retryable(),
            CallError::Failed(_) => false,
            CallError::Unreachable(_) => true,
        }
    }

    /// The status to answer a caller with: the group's own, or `UNAVAILABLE`.
    pub fn into_status(self) -> Status {
        match self {
            CallError::Refused { status, .. } | CallError::Failed(status) => status,
            CallError::Unreachable(m) => status::status(ErrorCode::Unavailable, m),
        }
    }

    /// The same failure without a leader hint: what a proxy (the gateway) passes on,
    /// since the hint names a node its own clients are not meant to call.
    pub fn without_hint(self) -> CallError {
        match self {
            CallError::Refused { code, status } => CallError::Refused { code, status: status::without_hint(status) },
            other => other,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            CallError::Refused { status, .. } | CallError::Failed(status) => status.message(),
            CallError::Unreachable(m) => m,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Refused { code, status } => write!(f, "{code}: {}", status.message()),
            CallError::Failed(s) => write!(f, "{:?}: {}", s.code(), s.message()),
            CallError::Unreachable(m) => write!(f, "UNAVAILABLE: {m}"),
        }
    }
}

impl std::error::Error for CallError {}

/// A successful call: its answer, when the attempt that got it was sent (deadlines
/// count from sending), and the member that answered.
#[derive(Debug)]
pub struct Called<T> {
    pub value: T,
    pub sent: Instant,
    pub member: String,
}

/// How long one pass may take.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Each member's attempt ends after this.
    pub per_attempt: Duration,
    /// The pass ends here, whatever is left untried.
    pub until: Option<Instant>,
}

impl Budget {
    pub fn per_attempt(d: Duration) -> Budget {
        Budget { per_attempt: d, until: None }
    }

    pub fn until(self, t: Instant) -> Budget {
        Budget { until: Some(self.until.map_or(t, |u| u.min(t))), ..self }
    }
}

/// How [`Upstream::call_retrying`] keeps trying.
#[derive(Debug, Clone, Copy)]
pub struct Retry<'a> {
    pub policy: RetryPolicy,
    /// No pass starts after this.
    pub give_up: Instant,
    /// Fires: the call ends at once with `Err(None)`.
    pub stop: Option<&'a CancellationToken>,
}

impl Retry<'_> {
    /// Retries with `policy` for its `give_up_after`, from now.
    pub fn by(policy: RetryPolicy) -> Retry<'static> {
        Retry { policy, give_up: Instant::now() + policy.give_up_after, stop: None }
    }
}

/// The members of one group and what this caller learned about them.
#[derive(Debug)]
pub struct Upstream {
    transport: Transport,
    hints: Hints,
    members: Mutex<Vec<String>>,
    /// The member that answered last (the leader, usually).
    preferred: Mutex<Option<String>>,
    /// Members that failed recently, and when.
    demoted: Mutex<HashMap<String, Instant>>,
}

impl Upstream {
    pub fn new(transport: &Transport, members: Vec<String>, hints: Hints) -> Upstream {
        Upstream { transport: transport.clone(), hints, members: Mutex::new(members), preferred: Mutex::new(None), demoted: Mutex::new(HashMap::new()) }
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Replaces the member list (a cell's membership changed in the registry).
    pub fn set_members(&self, members: Vec<String>) {
        *self.members.lock().unwrap_or_else(|e| e.into_inner()) = members;
    }

    pub fn members(&self) -> Vec<String> {
        self.members.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn is_demoted(&self, addr: &str, now: Instant) -> bool {
        self.demoted.lock().unwrap_or_else(|e| e.into_inner()).get(addr).is_some_and(|at| now.saturating_duration_since(*at) < DEMOTED_FOR)
    }

    fn demote(&self, addr: &str) {
        let mut preferred = self.preferred.lock().unwrap_or_else(|e| e.into_inner());
        if preferred.as_deref() == Some(addr) {
            *preferred = None;
        }
        self.demoted.lock().unwrap_or_else(|e| e.into_inner()).insert(addr.to_owned(), Instant::now());
    }

    fn answered(&self, addr: &str) {
        *self.preferred.lock().unwrap_or_else(|e| e.into_inner()) = Some(addr.to_owned());
        self.demoted.lock().unwrap_or_else(|e| e.into_inner()).remove(addr);
    }

    /// The order of one pass: the preferred member, then the rest, recently failed
    /// members last.
    fn order(&self) -> Vec<String> {
        let members = self.members();
        let now = Instant::now();
        let preferred = self.preferred.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let preferred = preferred.filter(|p| self.hints == Hints::Anywhere || members.contains(p));
        let mut order: Vec<String> = preferred.iter().cloned().collect();
        order.extend(members.into_iter().filter(|m| preferred.as_ref() != Some(m)));
        let (fresh, failed): (Vec<String>, Vec<String>) = order.into_iter().partition(|m| !self.is_demoted(m, now));
        fresh.into_iter().chain(failed).collect()
    }

    /// One pass over the members (see the module doc). `f` makes the call on a
    /// member's channel; it is called once per attempt and must make the same request
    /// each time.
    pub async fn call<T, F, Fut>(&self, budget: Budget, mut f: F) -> Result<Called<T>, CallError>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut order = self.order();
        let mut last = if order.is_empty() { "no member is known".to_owned() } else { String::new() };
        let mut not_leader: Option<Status> = None;
        let mut hinted = false;
        let mut i = 0;
        while i < order.len() {
            let addr = order[i].clone();
            i += 1;
            let now = Instant::now();
            let timeout = match budget.until {
                Some(until) if until <= now => break,
                Some(until) => budget.per_attempt.min(until - now),
                None => budget.per_attempt,
            };
            let ch = match self.transport.channel(&addr) {
                Ok(c) => c,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            let sent = Instant::now();
            let s = match tokio::time::timeout(timeout, f(ch)).await {
                Ok(Ok(r)) => {
                    self.answered(&addr);
                    return Ok(Called { value: r.into_inner(), sent, member: addr });
                }
                Ok(Err(s)) => s,
                Err(_) => {
                    debug!(member = %addr, ?timeout, "no answer in time; trying the next member");
                    self.demote(&addr);
                    last = format!("{addr}: no answer within {timeout:?}");
                    continue;
                }
            };
            match Answer::of(&s) {
                Answer::Coded { code: ErrorCode::NotLeader, leader } => {
                    last = format!("{addr}: {}", s.message());
                    let allowed = |h: &String| *h != addr && (self.hints == Hints::Anywhere || self.members().contains(h));
                    if let Some(h) = leader.filter(|h| !hinted && allowed(h)) {
                        hinted = true;
                        debug!(from = %addr, to = %h, "following the leader hint");
                        order.retain(|o| *o != h);
                        // A member that failed a moment ago keeps its place at the end.
                        let at = if self.is_demoted(&h, Instant::now()) { order.len() } else { i.min(order.len()) };
                        order.insert(at, h);
                    }
                    not_leader = Some(s);
                }
                Answer::Coded { code, .. } => return Err(CallError::Refused { code, status: s }),
                Answer::Transport => {
                    self.demote(&addr);
                    last = format!("{addr}: {}", s.message());
                }
                Answer::Failed => return Err(CallError::Failed(s)),
            }
        }
        match not_leader {
            Some(status) => Err(CallError::Refused { code: ErrorCode::NotLeader, status }),
            None => Err(CallError::Unreachable(if last.is_empty() { "the call's deadline passed".into() } else { last })),
        }
    }

    /// Passes until one succeeds, the failure is not retryable, `retry.give_up`
    /// passes, or `retry.stop` fires (`Err(None)`). `per_attempt` is asked before each
    /// pass (a wait that shrinks as time goes by); `on_retry` hears each retryable
    /// failure and the pause before the next pass.
    pub async fn call_retrying<T, F, Fut>(
        &self,
        mut per_attempt: impl FnMut() -> Duration,
        retry: Retry<'_>,
        mut on_retry: impl FnMut(&CallError, Duration),
        mut f: F,
    ) -> Result<Called<T>, Option<CallError>>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let never = CancellationToken::new();
        let stop = retry.stop.unwrap_or(&never);
        let mut backoff = Backoff::new(retry.policy);
        let mut last_pass = false;
        loop {
            let budget = Budget::per_attempt(per_attempt());
            let outcome = tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(None),
                r = self.call(budget, &mut f) => r,
            };
            let error = match outcome {
                Ok(c) => return Ok(c),
                Err(e) if !e.is_retryable() => return Err(Some(e)),
                Err(e) => e,
            };
            // NOT_LEADER or UNAVAILABLE from a member that answered: the group is alive
            // and busy with a failover (an election; a new leader that has not yet
            // renewed its ownership lease). That is over within about an election
            // timeout, and these answers cost the group next to nothing: polling every
            // ≤ 100 ms finds the end without adding the exponential backoff's seconds
            // to the outage. Members that do not answer back off as usual.
            let delay = match &error {
                CallError::Refused { code: ErrorCode::NotLeader | ErrorCode::Unavailable, .. } => backoff.next_delay().min(FAILOVER_POLL),
                _ => backoff.next_delay(),
            };
            let Some(pause) = pause_before(delay, retry.give_up.saturating_duration_since(Instant::now()), &mut last_pass) else {
                return Err(Some(error));
            };
            on_retry(&error, pause);
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(None),
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// How long to pause before the next pass, with `remaining`
/// until `give_up` — or `None`: give up now. A backoff `delay` that would reach
/// `give_up` is cut short of it, and the pass after it is the last (`last_pass`
/// set): a wait of N seconds keeps trying for N seconds, not N minus the backoff's
/// last pause (up to `RetryPolicy::max`).
fn pause_before(delay: Duration, remaining: Duration, last_pass: &mut bool) -> Option<Duration> {
    if *last_pass || remaining <= LAST_PASS_LEAD {
        return None;
    }
    if delay + LAST_PASS_LEAD < remaining {
        return Some(delay);
    }
    *last_pass = true;
    Some(remaining - LAST_PASS_LEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_that_would_reach_give_up_is_cut_and_one_last_pass_follows() {
        let ms = Duration::from_millis;
        let mut last = false;
        assert_eq!(pause_before(ms(100), ms(1000), &mut last), Some(ms(100)));
        assert!(!last);
        // A 2 s pause with 1 s left: cut to end a lead before give-up, then one pass.
        assert_eq!(pause_before(ms(2000), ms(1000), &mut last), Some(ms(1000) - LAST_PASS_LEAD));
        assert!(last);
        assert_eq!(pause_before(ms(0), ms(1000), &mut last), None, "after the last pass, give up");
        let mut last = false;
        assert_eq!(pause_before(ms(10), LAST_PASS_LEAD, &mut last), None, "no time left for a pass");
    }

    /// A member that never answers, and a backoff of up to 2 s against a 300 ms wait:
    /// the call keeps passing until its give-up, not until the first long pause.
    #[tokio::test(flavor = "current_thread")]
    async fn a_retrying_call_tries_until_it_gives_up_not_until_a_pause_would_pass_it() {
        crate::entropy::seed_this_thread(Some(7));
        let wait = Duration::from_millis(300);
        let policy = RetryPolicy { initial: Duration::from_secs(2), max: Duration::from_secs(2), give_up_after: wait };
        let upstream = Upstream::new(&Transport::insecure(), vec!["127.0.0.1:9".to_owned()], Hints::Members);
        let passes = std::cell::Cell::new(0);
        let mut pauses = Vec::new();
        let started = Instant::now();
        let outcome = upstream
            .call_retrying(
                || Duration::from_secs(1),
                Retry::by(policy),
                |_, pause| pauses.push(pause),
                |_| {
                    passes.set(passes.get() + 1);
                    async { Err::<tonic::Response<()>, _>(Status::unavailable("no answer")) }
                },
            )
            .await;
        crate::entropy::seed_this_thread(None);
        assert!(matches!(outcome, Err(Some(CallError::Unreachable(_)))), "{outcome:?}");
        assert!(started.elapsed() >= wait - LAST_PASS_LEAD, "gave up after {:?} of a {wait:?} wait (pauses {pauses:?})", started.elapsed());
        assert!(passes.get() >= 2, "{} passes (pauses {pauses:?})", passes.get());
    }
}
