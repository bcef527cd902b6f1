//! [`Lock`]: a granted hold, carrying its fencing token. Released explicitly with
//! [`Lock::release`], or in the background when dropped. Its loss signal covers its
//! session and, once asked for, the hold itself: a watch of the lock reports a break
//! or the max hold time ending it while the session lives on.

use crate::client::traced;
use crate::error::{Error, LossReason};
use crate::session::{shard_ref, Session};
use holdfast_core::metric_names::HOLD_TIME;
use holdfast_core::{FencingToken, LockName, Mode, RequestId, ShardKey};
use holdfast_proto::lock::v1 as pb;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How one hold ends, apart from its session: set by the watch of the lock.
#[derive(Debug)]
struct HoldEnd {
    /// Cancelled when the hold is lost: a child of the session's loss signal, also
    /// cancelled alone when the cell ends this hold.
    lost: CancellationToken,
    reason: OnceLock<LossReason>,
    /// Cancelled when the hold is released or dropped: the watch stops.
    done: CancellationToken,
}

/// A hold on a lock. Pass [`Lock::token`] with every write to a fenced resource: it
/// is what makes a write from a holder that lost its lease harmless.
///
/// The hold ends with [`Lock::release`], when the guard is dropped (released in the
/// background), or when its session is lost ([`Lock::lost`]).
#[derive(Debug)]
#[must_use = "dropping a Lock releases it"]
pub struct Lock {
    session: Session,
    name: LockName,
    token: FencingToken,
    value: Vec<u8>,
    request_id: RequestId,
    mode: Mode,
    unfenced: bool,
    granted_at: Instant,
    released: bool,
    /// Made, and the watch started, at the first ask ([`Lock::lost`],
    /// [`Lock::loss_token`]): a grant nobody listens to costs nothing more.
    end: OnceLock<Arc<HoldEnd>>,
}

impl Lock {
    pub(crate) fn new(session: Session, name: LockName, token: FencingToken, value: Vec<u8>, request_id: RequestId, mode: Mode, unfenced: bool) -> Lock {
        session.shared().hold_started();
        Lock { session, name, token, value, request_id, mode, unfenced, granted_at: Instant::now(), released: false, end: OnceLock::new() }
    }

    /// The fencing token of this hold. Larger is newer; tokens of a lock never repeat.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The shard the lock lives in; with [`Lock::name`] it names the lock for a
    /// fenced resource (`holdfast_fence::LockId::new(lock.shard().clone(), lock.name().clone())`).
    pub fn shard(&self) -> &ShardKey {
        self.session.shard()
    }

    pub fn value(&self) -> &[u8] {
        &self.value
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The idempotency key the grant was made under.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// A fail-open gateway granted this without a cell: the token is 0, nothing is
    /// fenced, and the work runs unlocked.
    pub fn is_unfenced(&self) -> bool {
        self.unfenced
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Is the hold lost: its session is, or (once a watch runs: [`Lock::lost`],
    /// [`Lock::loss_token`]) the cell ended the hold? Final once true.
    pub fn is_lost(&self) -> bool {
        self.session.is_lost() || self.ended().is_some()
    }

    /// Why the hold was lost, if it was: the hold's own end, else its session's.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.ended().or_else(|| self.session.loss_reason())
    }

    /// Resolves when the hold is lost: the worker must stop acting on the resource.
    /// Covers the session (expiry, a move, no renewal in time) and the hold itself: the
    /// first call starts a watch of the lock, which reports a break (`Broken`) or the
    /// namespace's max hold time (`MaxHold`) ending this hold.
    pub async fn lost(&self) -> LossReason {
        let end = self.watch_end();
        tokio::select! {
            r = self.session.lost() => self.ended().unwrap_or(r),
            _ = end.lost.cancelled() => self.loss_reason().unwrap_or(LossReason::Ended),
        }
    }

    /// A token cancelled when the hold is lost, as [`Lock::lost`] (it starts the same
    /// watch). Cancelling it yourself ends nothing.
    pub fn loss_token(&self) -> CancellationToken {
        self.watch_end().lost.child_token()
    }

    /// `Ok` while it is safe to act under this hold; call it before each effectful step.
    pub fn check(&self) -> Result<(), Error> {
        self.session.check()?;
        match self.ended() {
            Some(reason) => Err(Error::HoldEnded { lock: self.name.to_string(), token: self.token.0, reason }),
            None => Ok(()),
        }
    }

    /// Starts, once, the watch of this lock that reports the cell ending the hold.
    /// (Not at grant: a watch is a stream per hold, which only a holder that listens
    /// for loss needs.)
    fn watch_end(&self) -> &Arc<HoldEnd> {
        self.end.get_or_init(|| {
            let end = Arc::new(HoldEnd { lost: self.session.loss_token(), reason: OnceLock::new(), done: CancellationToken::new() });
            // An unfenced grant holds nothing at any cell: nothing to watch.
            if !self.unfenced {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(watch_end(self.session.clone(), self.name.clone(), self.token, end.clone()));
                }
            }
            end
        })
    }

    /// How the cell ended this hold, if the watch saw it.
    fn ended(&self) -> Option<LossReason> {
        self.end.get().and_then(|e| e.reason.get().copied())
    }

    /// Stops the watch, if one runs.
    fn stop_watch(&self) {
        if let Some(e) = self.end.get() {
            e.done.cancel();
        }
    }

    /// Releases the hold (retrying retryable errors; a repeated release is harmless).
    /// `NOT_HOLDER` means the hold had already ended some other way.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.stop_watch();
        release(self.session.clone(), self.name.clone(), self.token, self.granted_at).await
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        self.stop_watch();
        let (session, name, token, granted_at) = (self.session.clone(), self.name.clone(), self.token, self.granted_at);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = release(session, name.clone(), token, granted_at).await {
                        debug!(lock = %name, token = token.0, error = %e, "release of a dropped lock failed");
                    }
                });
            }
            Err(_) => {
                session.shared().hold_ended();
                warn!(lock = %name, token = token.0, "lock dropped outside a tokio runtime; it ends with its session");
            }
        }
    }
}

async fn release(session: Session, name: LockName, token: FencingToken, granted_at: Instant) -> Result<(), Error> {
    let shared = session.shared().clone();
    shared.hold_ended();
    metrics::histogram!(HOLD_TIME, "ns" => shared.shard.ns.as_str().to_owned()).record(granted_at.elapsed().as_secs_f64());
    // Names the session: the cell applies the release only while it holds the token.
    let req = pb::ReleaseRequest { shard: Some(crate::session::shard_ref(&shared.shard)), name: name.to_string(), token: token.0, session_id: shared.id.0 };
    let cfg = *shared.client.config();
    let r = shared
        .client
        .call(
            "release",
            Instant::now() + cfg.retry.give_up_after,
            None,
            || cfg.request_timeout,
            |mut svc| {
                let req = req.clone();
                async move { svc.release(traced(req)).await }
            },
        )
        .await;
    match r {
        Ok(_) => {
            debug!(lock = %name, token = token.0, "released");
            Ok(())
        }
        Err(e) => Err(e.unwrap_or_else(|| shared.lost_error())),
    }
}

/// The watch of one hold: Watch the lock from now, then ask whether the token is still
/// current (an end before the watch opened shows there), then read events until the
/// hold's `ENDED`. A broken stream resumes from the last revision seen. Ends when the
/// hold is released or dropped, or the session is lost.
async fn watch_end(session: Session, name: LockName, token: FencingToken, end: Arc<HoldEnd>) {
    let mut from = 0;
    let mut backoff = Duration::from_millis(100);
    loop {
        let pass = tokio::select! {
            _ = end.done.cancelled() => return,
            _ = end.lost.cancelled() => return,
            r = watch_pass(&session, &name, token, &mut from) => r,
        };
        match pass {
            Ok(Some(reason)) => {
                let _ = end.reason.set(reason);
                warn!(lock = %name, token = token.0, %reason, "the cell ended this hold; the worker must stop acting under it");
                end.lost.cancel();
                return;
            }
            Ok(None) => backoff = Duration::from_millis(100),
            Err(e) => {
                debug!(lock = %name, error = %e, "hold watch broke; resuming");
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
        tokio::select! {
            _ = end.done.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

/// One stream of the hold's watch: `Some(reason)` once the hold has ended.
async fn watch_pass(session: &Session, name: &LockName, token: FencingToken, from: &mut u64) -> Result<Option<LossReason>, Error> {
    let client = &session.shared().client;
    let req = pb::WatchRequest { shard: Some(shard_ref(session.shard())), name: name.to_string(), from_revision: *from };
    let (mut stream, _) = client.unary("watch", req, |mut svc, req| async move { svc.watch(req).await }).await?;
    if *from == 0 {
        if let Some(reason) = ended_before_watch(session, name, token).await? {
            return Ok(Some(reason));
        }
    }
    while let Some(batch) = stream.message().await.map_err(stream_error)? {
        if batch.compact_revision > 0 {
            // Events were dropped before `from`: the token's status tells instead.
            *from = batch.compact_revision;
            if let Some(reason) = ended_before_watch(session, name, token).await? {
                return Ok(Some(reason));
            }
        }
        for e in &batch.events {
            *from = e.revision;
            if e.kind == pb::EventKind::Ended as i32 && e.token == token.0 {
                return Ok(Some(end_reason(e.reason)));
            }
        }
    }
    Ok(None)
}

/// Has the hold already ended? The token's status says; the lock's last break says
/// whether a break ended it.
async fn ended_before_watch(session: &Session, name: &LockName, token: FencingToken) -> Result<Option<LossReason>, Error> {
    let client = &session.shared().client;
    let shard = Some(shard_ref(session.shard()));
    let check = pb::CheckTokenRequest { shard: shard.clone(), name: name.to_string(), token: token.0 };
    let (status, _) = client.unary("check_token", check, |mut svc, req| async move { svc.check_token(req).await }).await?;
    if status.status == pb::TokenStatus::Current as i32 {
        return Ok(None);
    }
    let describe = pb::DescribeRequest { shard, name: name.to_string() };
    let (d, _) = client.unary("describe", describe, |mut svc, req| async move { svc.describe(req).await }).await?;
    Ok(Some(if d.last_break.is_some_and(|b| b.token == token.0) { LossReason::Broken } else { LossReason::Ended }))
}

/// A watch stream's failure: the cell's coded answer, or a transport error.
fn stream_error(s: tonic::Status) -> Error {
    match holdfast_rpc::status::code_of(&s) {
        Some(code) => Error::Refused { code, message: s.message().to_owned() },
        None => Error::Transport { grpc: s.code(), message: s.message().to_owned() },
    }
}

fn end_reason(r: i32) -> LossReason {
    match pb::EndReason::try_from(r) {
        Ok(pb::EndReason::Broken) => LossReason::Broken,
        Ok(pb::EndReason::MaxHold) => LossReason::MaxHold,
        Ok(pb::EndReason::Expired) => LossReason::Expired,
        Ok(pb::EndReason::Moved) => LossReason::Moved,
        _ => LossReason::Ended,
    }
}
