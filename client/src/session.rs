//! [`Session`]: a lease in one cell, renewed by a background task, with a loss signal
//! that fires **before** the cell can expire the lease.
//!
//! The deadline arithmetic (docs/sessions.md): the cell answers each
//! renewal with `ttl_remaining`; the SDK counts it from when it **sent** that renewal,
//! on its own monotonic clock, so its deadline is never later than the cell's
//! (`sent <= confirmed`). It renews every TTL/3 and declares the session lost at
//! `sent + ttl_remaining - TTL/3` — 2/3 of the TTL after the last confirmed renewal
//! was sent — leaving the worker a third of the TTL to stop before the cell may
//! expire the session and grant its locks to someone else.

use crate::client::{traced, Client};
use crate::error::{Error, LossReason};
use crate::lock::Lock;
use holdfast_core::metric_names::{HELD_WITHOUT_PROGRESS, LEASE_EXPIRED_WHILE_HELD, RENEW_FAILURES};
use holdfast_core::{validate_value, Epoch, ErrorCode, FencingToken, LockName, Mode, NamespaceName, RequestId, SessionId, ShardKey, ShardName};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_rpc::{Backoff, Channel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

/// What [`Client::create_session`] creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    ns: String,
    shard: String,
    ttl: Duration,
    label: String,
    progress_timeout: Option<Duration>,
}

impl SessionOptions {
    /// A session in shard `shard` (`default` for a single-shard namespace) of
    /// namespace `ns`, with lease `ttl` (within the namespace's TTL bounds; at least
    /// 1 s by default).
    pub fn new(ns: impl Into<String>, shard: impl Into<String>, ttl: Duration) -> SessionOptions {
        SessionOptions { ns: ns.into(), shard: shard.into(), ttl, label: String::new(), progress_timeout: None }
    }

    /// Free text shown by ListSessions (host, pid, service).
    pub fn label(mut self, label: impl Into<String>) -> SessionOptions {
        self.label = label.into();
        self
    }

    /// Renew only while the worker reports progress: if [`Session::progress`] has not
    /// been called for `timeout`, the SDK stops renewing, the session is reported lost
    /// (`NoProgress`) at most 2/3 TTL after the last renewal, and the cell expires it
    /// at its TTL. A renewal task proves the process is alive, not that the work is
    /// moving (the stuck holder of docs/design.md). Unset: renew unconditionally.
    pub fn progress_timeout(mut self, timeout: Duration) -> SessionOptions {
        self.progress_timeout = Some(timeout);
        self
    }
}

/// How [`Session::acquire`] asks for a lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    mode: Option<Mode>,
    wait: Duration,
    value: Vec<u8>,
    request_id: Option<String>,
}

impl AcquireOptions {
    /// Exclusive, no waiting, empty value, a fresh request id.
    pub fn new() -> AcquireOptions {
        AcquireOptions::default()
    }

    pub fn shared(mut self) -> AcquireOptions {
        self.mode = Some(Mode::Shared);
        self
    }

    /// Wait up to `wait` in the cell's FIFO queue if the lock is held (the cell
    /// answers when the grant commits; the SDK never polls). Zero: `LOCK_HELD` at once.
    pub fn wait(mut self, wait: Duration) -> AcquireOptions {
        self.wait = wait;
        self
    }

    /// The holder's payload (≤ 1 KiB), shown by Describe and Watch.
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> AcquireOptions {
        self.value = value.into();
        self
    }

    /// The idempotency key, if the caller keeps its own across its retries (a
    /// persisted job id, say). Within one session the same request id always gets
    /// the original outcome: the same token while that hold lasts. Unset: the SDK
    /// draws a random one per `acquire` call and reuses it for that call's retries.
    pub fn request_id(mut self, id: impl Into<String>) -> AcquireOptions {
        self.request_id = Some(id.into());
        self
    }
}

/// A session: a lease in the cell that owns its shard. Locks hang off it and end
/// with it. Cheap to clone; the session is closed (its locks released) when the last
/// clone and the last [`Lock`] from it are dropped, or by [`Session::close`].
///
/// The worker's contract: watch [`Session::lost`] (or [`Session::loss_token`]), check
/// [`Session::check`] before each effectful step, and call [`Session::progress`] as
/// work advances if a progress timeout is set. Fencing tokens, checked by the
/// resource, are what makes a late write harmless; the loss signal only narrows the
/// window.
#[derive(Debug, Clone)]
pub struct Session {
    owner: Arc<Owner>,
}

/// Dropping the last owner stops the renewal task, which then closes the session.
#[derive(Debug)]
struct Owner {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) shard: ShardKey,
    pub(crate) id: SessionId,
    /// The shard's epoch where the session was created: renewals carry it, so a
    /// renewal that reaches the shard's next owner is told NOT_OWNER (moved).
    epoch: u32,
    ttl: Duration,
    progress_timeout: Option<Duration>,
    lost: CancellationToken,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the session counts as lost unless a renewal is confirmed first.
    lose_at: Instant,
    last_progress: Instant,
    /// Renewals are paused because the worker stopped reporting progress.
    stalled: bool,
    loss: Option<LossReason>,
    /// Locks granted through this session and not yet released.
    held: usize,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn margin(&self) -> Duration {
        self.ttl / 3
    }

    /// A renewal sent at `sent` was confirmed with `remaining` left.
    fn renewed(&self, sent: Instant, remaining: Duration) {
        self.state().lose_at = sent + remaining.saturating_sub(self.margin());
    }

    fn lose_at(&self) -> Instant {
        self.state().lose_at
    }

    fn overdue_reason(&self) -> LossReason {
        if self.state().stalled {
            LossReason::NoProgress
        } else {
            LossReason::RenewTimedOut
        }
    }

    /// Marks the session lost (once) and fires the signal.
    pub(crate) fn signal_lost(&self, reason: LossReason) {
        let held = {
            let mut st = self.state();
            if st.loss.is_some() {
                return;
            }
            st.loss = Some(reason);
            st.held
        };
        self.lost.cancel();
        let ns = self.shard.ns.as_str();
        if reason.is_unplanned() {
            // WARN: recovered (the worker is told), but the holder lost its lease.
            warn!(session = %self.id, ns, held, %reason, "session lost; workers under its locks must stop");
            if held > 0 {
                metrics::counter!(LEASE_EXPIRED_WHILE_HELD, "ns" => ns.to_owned()).increment(1);
            }
        } else {
            info!(session = %self.id, ns, held, "session closed");
        }
    }

    pub(crate) fn loss(&self) -> Option<LossReason> {
        self.state().loss
    }

    /// Lost, by the signal or by the clock (the clock also covers a renewal task
    /// that has not been scheduled in time).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        if Instant::now() >= self.lose_at() {
            self.signal_lost(self.overdue_reason());
            return true;
        }
        false
    }

    pub(crate) fn lost_error(&self) -> Error {
        Error::SessionLost { session: self.id, reason: self.loss().unwrap_or(LossReason::RenewTimedOut) }
    }

    pub(crate) async fn lost(&self) -> LossReason {
        loop {
            if self.is_lost() {
                return self.loss().unwrap_or(LossReason::RenewTimedOut);
            }
            let at = self.lose_at();
            tokio::select! {
                _ = self.lost.cancelled() => {}
                _ = sleep_until(at) => {}
            }
        }
    }

    pub(crate) fn hold_started(&self) {
        self.state().held += 1;
    }

    pub(crate) fn hold_ended(&self) {
        let mut st = self.state();
        st.held = st.held.saturating_sub(1);
    }

    /// Closes the session at the cell. Its locks are released.
    async fn close_at_cell(&self, budget: Duration) -> Result<(), Error> {
        let req = pb::CloseSessionRequest { session_id: self.id.0, shard: Some(shard_ref(&self.shard)) };
        let timeout = self.client.config().request_timeout;
        let r = self
            .client
            .call(
                "close_session",
                Instant::now() + budget,
                None,
                || timeout,
                |mut svc| {
                    let req = req.clone();
                    async move { svc.close_session(traced(req)).await }
                },
            )
            .await;
        match r {
            Ok(_) => Ok(()),
            // Already gone at the cell: closed is closed.
            Err(Some(e)) if matches!(e.code(), Some(ErrorCode::UnknownSession | ErrorCode::SessionExpired)) => Ok(()),
            Err(e) => Err(e.unwrap_or_else(|| self.lost_error())),
        }
    }
}

impl Session {
    pub(crate) async fn create(client: Client, opts: SessionOptions) -> Result<Session, Error> {
        let shard = ShardKey::new(NamespaceName::new(opts.ns)?, ShardName::new(opts.shard)?);
        let ttl_ms = u64::try_from(opts.ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms < 3 {
            return Err(Error::InvalidArgument(format!("ttl {:?} is too short to renew", opts.ttl)));
        }
        if opts.progress_timeout.is_some_and(|d| d.is_zero()) {
            return Err(Error::InvalidArgument("progress timeout must be positive".into()));
        }
        let req = pb::CreateSessionRequest { shard: Some(shard_ref(&shard)), ttl_ms, client_label: opts.label };
        // Not idempotent: if an answer is lost, the retry makes a second session and
        // the first one expires unused after its TTL.
        let (resp, sent) = client.unary("create_session", req, |mut svc, req| async move { svc.create_session(req).await }).await?;
        let remaining = Duration::from_millis(resp.ttl_remaining_ms);
        // The TTL granted; a cell that does not send it answered the TTL as the time
        // remaining. (The time remaining may be less than the TTL: the cell's lease of
        // the shard ends sooner. The margin, TTL/3, is the TTL's.)
        let granted = if resp.ttl_ms > 0 { Duration::from_millis(resp.ttl_ms) } else { remaining };
        let ttl = opts.ttl.min(granted.max(Duration::from_millis(3)));
        let now = Instant::now();
        let shared = Arc::new(Shared {
            client,
            shard,
            id: SessionId(resp.session_id),
            epoch: resp.epoch,
            ttl,
            progress_timeout: opts.progress_timeout,
            lost: CancellationToken::new(),
            state: Mutex::new(State { lose_at: now, last_progress: now, stalled: false, loss: None, held: 0 }),
        });
        shared.renewed(sent, remaining);
        let stop = CancellationToken::new();
        info!(session = %shared.id, shard = %shared.shard, ttl_ms = ttl.as_millis() as u64, "session created");
        let span = tracing::info_span!("renew", session = %shared.id);
        tokio::spawn(renew_loop(shared.clone(), stop.clone(), sent).instrument(span));
        Ok(Session { owner: Arc::new(Owner { shared, stop }) })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    pub fn id(&self) -> SessionId {
        self.owner.shared.id
    }

    pub fn shard(&self) -> &ShardKey {
        &self.owner.shared.shard
    }

    /// The shard's epoch at the session's cell when it was created (a move to
    /// another cell ends the session: its shard is served at a newer epoch there).
    pub fn epoch(&self) -> Epoch {
        Epoch(self.owner.shared.epoch)
    }

    /// The lease the cell granted.
    pub fn ttl(&self) -> Duration {
        self.owner.shared.ttl
    }

    /// The worker made progress. With a progress timeout set, renewals continue only
    /// while this is called often enough.
    pub fn progress(&self) {
        self.owner.shared.state().last_progress = Instant::now();
    }

    /// Is the session lost? Final once true.
    pub fn is_lost(&self) -> bool {
        self.owner.shared.is_lost()
    }

    /// Why the session was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.is_lost();
        self.owner.shared.loss()
    }

    /// Resolves when the session is lost — at the latest 2/3 TTL after the last
    /// confirmed renewal was sent, before the cell can expire it.
    pub async fn lost(&self) -> LossReason {
        self.owner.shared.lost().await
    }

    /// A token cancelled when the session is lost, to hand to the worker's tasks.
    /// (Cancelling it yourself does not end the session.)
    pub fn loss_token(&self) -> CancellationToken {
        self.owner.shared.lost.child_token()
    }

    /// How long until the SDK would declare the session lost if no renewal is
    /// confirmed in between; `None` if it is lost.
    pub fn time_left(&self) -> Option<Duration> {
        if self.is_lost() {
            return None;
        }
        Some(self.owner.shared.lose_at().saturating_duration_since(Instant::now()))
    }

    /// `Ok` while the session is safe to act under; call it before each effectful
    /// step (it narrows the window in which a late holder acts; fencing closes it).
    pub fn check(&self) -> Result<(), Error> {
        if self.is_lost() {
            return Err(self.owner.shared.lost_error());
        }
        Ok(())
    }

    /// Acquires lock `name` in the session's shard.
    ///
    /// Retryable errors (`NOT_LEADER`, `UNAVAILABLE`, `MOVING`, `RATE_LIMITED`,
    /// transport errors and per-attempt timeouts) are retried with backoff and full
    /// jitter, **always with the same request id**, so a retry returns the original
    /// outcome and never a second grant. A wait happens in the cell's queue; on a
    /// retry the remaining wait is sent. Returns `LOCK_HELD`, `TIMEOUT` and the other
    /// final codes as [`Error::Refused`], and [`Error::SessionLost`] if the session
    /// is lost meanwhile.
    pub async fn acquire(&self, name: &str, opts: AcquireOptions) -> Result<Lock, Error> {
        let shared = self.owner.shared.clone();
        let name = LockName::new(name)?;
        validate_value(&opts.value)?;
        let request_id = RequestId::new(opts.request_id.unwrap_or_else(fresh_request_id))?;
        self.check()?;
        let cfg = *shared.client.config();
        let mode = opts.mode.unwrap_or(Mode::Exclusive);
        let wait_until = Instant::now() + opts.wait;
        let waits = !opts.wait.is_zero();
        let base = pb::AcquireRequest {
            shard: Some(shard_ref(&shared.shard)),
            name: name.to_string(),
            session_id: shared.id.0,
            mode: holdfast_proto::convert::mode_to(mode),
            wait_timeout_ms: 0,
            request_id: request_id.to_string(),
            value: opts.value.clone(),
        };
        let answer = shared
            .client
            .call(
                "acquire",
                wait_until + cfg.retry.give_up_after,
                Some(&shared.lost),
                || wait_until.saturating_duration_since(Instant::now()) + cfg.request_timeout,
                |mut svc: LockServiceClient<Channel>| {
                    let mut req = base.clone();
                    // Never 0 on a retry of a waiting request: 0 means "do not wait",
                    // and the request may already sit in the queue.
                    if waits {
                        let left = wait_until.saturating_duration_since(Instant::now()).as_millis() as u64;
                        req.wait_timeout_ms = left.max(1);
                    }
                    async move { svc.acquire(traced(req)).await }
                },
            )
            .await;
        let resp = match answer {
            Ok((resp, _)) => resp,
            Err(None) => return Err(shared.lost_error()),
            Err(Some(e)) if e.code() == Some(ErrorCode::NotOwner) => {
                // The shard left the session's cell: this session can never hold a
                // lock again.
                shared.signal_lost(LossReason::Moved);
                return Err(e);
            }
            Err(Some(e)) => return Err(e),
        };
        if resp.unfenced {
            // Only a gateway applying a fail-open posture says this.
            warn!(session = %shared.id, lock = %name, "unfenced grant: the cell was unreachable and this worker runs unlocked");
        }
        debug!(session = %shared.id, lock = %name, token = resp.token, request_id = %request_id, "acquired");
        let lock = Lock::new(self.clone(), name, FencingToken(resp.token), opts.value, request_id, mode, resp.unfenced);
        if self.is_lost() {
            // Granted to a session that is already lost: hand nothing out.
            drop(lock);
            return Err(shared.lost_error());
        }
        Ok(lock)
    }

    /// Closes the session: stops renewing, releases its locks at the cell, and fires
    /// the loss signal with [`LossReason::Closed`] (not counted as an expiry).
    pub async fn close(&self) -> Result<(), Error> {
        let shared = &self.owner.shared;
        shared.signal_lost(LossReason::Closed);
        shared.close_at_cell(shared.client.config().retry.give_up_after).await
    }
}

/// The wire form of a shard; epoch 0: "whatever the cell has" (the SDK talks to a
/// cell, or to a gateway that sets the epoch itself).
pub(crate) fn shard_ref(shard: &ShardKey) -> pb::ShardRef {
    pb::ShardRef { ns: shard.ns.to_string(), shard: shard.shard.to_string(), epoch: 0 }
}

fn fresh_request_id() -> String {
    use holdfast_rpc::entropy::random_u64;
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// `lock_held_without_progress_seconds{ns}`: for each session of this process that
/// reports progress ([`SessionOptions::progress_timeout`]) and holds a lock, how long
/// since its worker last did; a namespace's gauge is the longest of its sessions.
static STALLS: Mutex<std::collections::BTreeMap<(String, u64), f64>> = Mutex::new(std::collections::BTreeMap::new());
/// How often a session that reports progress refreshes that gauge, at least.
const STALL_REPORT_EVERY: Duration = Duration::from_secs(10);

fn report_stall(ns: &str, session: SessionId, since: Option<Duration>) {
    let mut m = STALLS.lock().unwrap_or_else(|e| e.into_inner());
    let key = (ns.to_owned(), session.0);
    match since {
        Some(d) => {
            m.insert(key, d.as_secs_f64());
        }
        None => {
            if m.remove(&key).is_none() {
                return;
            }
        }
    }
    let worst = m.range((ns.to_owned(), 0)..=(ns.to_owned(), u64::MAX)).map(|(_, v)| *v).fold(0.0, f64::max);
    metrics::gauge!(HELD_WITHOUT_PROGRESS, "ns" => ns.to_owned()).set(worst);
}

/// Renews every TTL/3 until the session is lost or its owner is dropped.
async fn renew_loop(s: Arc<Shared>, stop: CancellationToken, created: Instant) {
    renew(&s, stop, created).await;
    report_stall(s.shard.ns.as_str(), s.id, None);
}

async fn renew(s: &Arc<Shared>, stop: CancellationToken, created: Instant) {
    // Every TTL/3, a hair early: the cell lists a session silent for more than TTL/3
    // in its next checkpoint, and a renewal that lands just late would cost a write.
    let period = s.ttl / 3 - s.ttl / 60;
    // Renewals come due on a grid of the client's clock, a step at most early, so that
    // sessions of one TTL renew together, in one message (`renewals.rs`).
    let grid = s.ttl / 60;
    let cfg = *s.client.config();
    let mut backoff = Backoff::new(cfg.retry);
    let renewals = s.client.renewals().clone();
    let mut next = renewals.on_grid(created + period, grid);
    let ns = s.shard.ns.as_str().to_owned();
    // The shard lets a gateway route the stream; its epoch lets the shard's next
    // owner say the session was left behind by a move.
    let renewal = pb::KeepAliveRequest { session_id: s.id.0, shard: Some(pb::ShardRef { epoch: s.epoch, ..shard_ref(&s.shard) }), more: vec![] };
    let shard = s.shard.clone();
    // Each attempt gets a bound, so a stream to a stuck node is retired in time for the
    // next attempt (the attempt's own bound is `timeout`, below).
    let within = AtomicU64::new(0);
    let mut keepalive = |svc: LockServiceClient<Channel>| {
        let within = Duration::from_micros(within.load(Ordering::Relaxed));
        let (renewals, shard, renewal) = (renewals.clone(), shard.clone(), renewal.clone());
        // A message on the shard's renewal stream of this client (`renewals.rs`).
        async move { renewals.renew(svc, &shard, renewal, within).await.map(tonic::Response::new) }
    };
    loop {
        let lose_at = s.lose_at();
        let wake = next.min(lose_at);
        let wake = if s.progress_timeout.is_some() { wake.min(Instant::now() + STALL_REPORT_EVERY) } else { wake };
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = s.lost.cancelled() => return,
            _ = sleep_until(wake) => {}
        }
        let now = Instant::now();
        if now >= s.lose_at() {
            s.signal_lost(s.overdue_reason());
            return;
        }
        if s.progress_timeout.is_some() {
            let st = s.state();
            let since = (st.held > 0).then(|| now.saturating_duration_since(st.last_progress));
            drop(st);
            report_stall(&ns, s.id, since);
        }
        if now < next {
            continue;
        }
        if s.progress_timeout.is_some_and(|d| now.saturating_duration_since(s.state().last_progress) > d) {
            let mut st = s.state();
            if !st.stalled {
                st.stalled = true;
                warn!(session = %s.id, "the worker stopped reporting progress; renewals stop and the lease will run out");
            }
            drop(st);
            // Resume if progress does, while the session is not yet lost.
            next = now + (period / 4).max(Duration::from_millis(10));
            continue;
        }
        s.state().stalled = false;
        let timeout = cfg.request_timeout.min(lose_at.saturating_duration_since(now)).max(Duration::from_millis(1));
        within.store(timeout.mul_f64(0.9).as_micros().max(1) as u64, Ordering::Relaxed);
        let outcome = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = s.lost.cancelled() => return,
            r = s.client.attempt(timeout, lose_at, &mut keepalive) => r,
        };
        match outcome {
            Ok((resp, sent)) => {
                s.renewed(sent, Duration::from_millis(resp.ttl_remaining_ms));
                backoff.reset();
                // Every TTL/3 — or sooner, halfway to the new deadline, when the cell
                // confirmed less than the full TTL (its ownership lease is running out:
                // it never confirms past it, docs/sessions.md).
                let halfway = sent + s.lose_at().saturating_duration_since(sent) / 2;
                next = renewals.on_grid(sent + period, grid).min(halfway);
            }
            Err(e) => {
                metrics::counter!(RENEW_FAILURES, "ns" => ns.clone()).increment(1);
                match e.code() {
                    Some(ErrorCode::SessionExpired | ErrorCode::UnknownSession) => {
                        s.signal_lost(LossReason::Expired);
                        return;
                    }
                    // The cell no longer serves the session's shard: it moved.
                    Some(ErrorCode::NotOwner) => {
                        s.signal_lost(LossReason::Moved);
                        return;
                    }
                    Some(code) if !code.is_retryable() => {
                        s.signal_lost(LossReason::Refused(code));
                        return;
                    }
                    // Anything else is retried until the deadline decides.
                    _ => {}
                }
                debug!(session = %s.id, error = %e, "renewal failed; retrying");
                // The usual backoff, but never so long that the window closes between
                // two attempts: a new leader must get a few tries before the deadline.
                let now = Instant::now();
                let delay = backoff.next_delay().min(s.lose_at().saturating_duration_since(now) / 4);
                next = now + delay;
            }
        }
    }
    // The last handle was dropped: close the session so its locks go at once.
    if s.loss().is_none() {
        s.signal_lost(LossReason::Closed);
        if let Err(e) = s.close_at_cell(cfg.request_timeout).await {
            warn!(session = %s.id, error = %e, "closing a dropped session failed; it will expire after its TTL");
        }
    }
}
