//! [`Lock`]: a granted hold, carrying its fencing token. Released explicitly with
//! [`Lock::release`], or in the background when dropped.

use crate::client::traced;
use crate::error::{Error, LossReason};
use crate::session::Session;
use holdfast_core::metric_names::HOLD_TIME;
use holdfast_core::{FencingToken, LockName, Mode, RequestId, ShardKey};
use holdfast_proto::lock::v1 as pb;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

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
}

impl Lock {
    pub(crate) fn new(session: Session, name: LockName, token: FencingToken, value: Vec<u8>, request_id: RequestId, mode: Mode, unfenced: bool) -> Lock {
        session.shared().hold_started();
        Lock { session, name, token, value, request_id, mode, unfenced, granted_at: Instant::now(), released: false }
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

    /// Is the hold lost (its session is)? Final once true.
    pub fn is_lost(&self) -> bool {
        self.session.is_lost()
    }

    /// Resolves when the hold is lost: the worker must stop acting on the resource.
    pub async fn lost(&self) -> LossReason {
        self.session.lost().await
    }

    /// A token cancelled when the hold is lost.
    pub fn loss_token(&self) -> CancellationToken {
        self.session.loss_token()
    }

    /// `Ok` while it is safe to act under this hold; call it before each effectful step.
    pub fn check(&self) -> Result<(), Error> {
        self.session.check()
    }

    /// Releases the hold (retrying retryable errors; a repeated release is harmless).
    /// `NOT_HOLDER` means the hold had already ended some other way.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        release(self.session.clone(), self.name.clone(), self.token, self.granted_at).await
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
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
    let req = pb::ReleaseRequest { shard: Some(crate::session::shard_ref(&shared.shard)), name: name.to_string(), token: token.0 };
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
