//! `Permit`: the right to run one request. Dropping it gives the slot back.

use inflight_core::{Lease, LeaseId, Reassertion};
use tokio::sync::oneshot;

use crate::error::{ReleaseError, RenewError};
use crate::mailbox::{answer, Command, HeldLease};
use crate::news::{self, Lost};

/// Held while a request runs. Dropping it releases the lease in the background;
/// [`Permit::release`] does the same and waits for the outcome.
#[must_use = "the slot is given back as soon as the permit is dropped"]
pub struct Permit {
    /// `None` for a fail-open permit.
    lease: Option<HeldLease>,
}

/// What the permit holds, as its accessors say it.
impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Permit");
        match self.lease() {
            Some(lease) => debug
                .field("lease_id", &format_args!("{}", lease.id()))
                .field("weight", &lease.weight())
                .field("fencing_token", &lease.fencing_token())
                .field("expires_at", &self.expires_at()),
            None => debug.field("enforced", &false).field("loss", &self.loss()),
        };
        debug.finish()
    }
}

impl Permit {
    pub(crate) fn enforced(lease: HeldLease) -> Self {
        Self { lease: Some(lease) }
    }

    /// A permit handed out without a lease because Redis was unavailable and
    /// the policy is `Allow`.
    pub(crate) fn unenforced() -> Self {
        Self { lease: None }
    }

    /// The lease, while the permit holds one that is not known lost.
    fn lease(&self) -> Option<&Lease> {
        let held = self.lease.as_ref()?;
        Self::loss_of(held).is_none().then(|| held.lease())
    }

    fn loss_of(held: &HeldLease) -> Option<Lost> {
        let lease = held.lease();
        held.news().loss(lease.id()).or_else(|| {
            // Not renewed by the driver: past its expiry (as a renewal the
            // driver made on its own may have moved it) it may be gone, as
            // `lost()` says at that instant.
            let news = held.news();
            let expires_at = news
                .expires_at(lease.id())
                .map_or(lease.expires_at(), |known| known.max(lease.expires_at()));
            let expired = !news.kept_alive(lease.id()) && crate::clock::now() >= expires_at;
            expired.then_some(Lost::Expired)
        })
    }

    /// Why the lease is known lost, if it is: found gone by a renewal
    /// (`Gone`), past its expiry without a renewal (`Expired`), or not
    /// confirmed after Redis lost lease data (`Unconfirmed`); what
    /// [`Permit::lost`] resolves with, asked now. A lost permit holds
    /// nothing: `is_enforced()` is false, `weight()` 0, and `lease_id()`,
    /// `expires_at()` and `fencing_token()` are `None` (a holder that
    /// lost its lease must not write with its token). `None` for a
    /// fail-open permit.
    pub fn loss(&self) -> Option<Lost> {
        self.lease.as_ref().and_then(Self::loss_of)
    }

    /// Whether the permit holds a slot in Redis: `false` for a fail-open
    /// permit, and once its lease is known lost ([`Permit::loss`]).
    pub fn is_enforced(&self) -> bool {
        self.lease().is_some()
    }

    /// The lease's id in Redis, rendered as Redis and `inflight holders`
    /// show it; `None` for a fail-open permit or a lost lease.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease().map(|lease| lease.id().clone())
    }

    /// How many units of its key's limit the permit holds (1 unless it was
    /// acquired with `Acquire::weight`); 0 for a fail-open permit or a lost
    /// lease.
    pub fn weight(&self) -> u32 {
        self.lease().map_or(0, Lease::weight)
    }

    /// Until when Redis surely keeps the lease without a renewal: the lease
    /// TTL from when it was acquired or last renewed, less a margin for
    /// clock rates. `None` if nothing is held (fail-open, or lost).
    pub fn expires_at(&self) -> Option<std::time::Instant> {
        let lease = self.lease()?;
        let own = lease.expires_at();
        // Kept alive: the driver's renewals moved it.
        let news = self.lease.as_ref()?.news();
        Some(news.expires_at(lease.id()).map_or(own, |known| known.max(own)))
    }

    /// The grant's fencing token: strictly greater than every token granted
    /// before it for the same key, across the fleet. Pass it to the resource
    /// the permit guards; a resource that refuses tokens lower than the
    /// highest it has seen cannot be written by a holder that was paused
    /// past its lease. `None` unless the limiter was built with
    /// [`Builder::fencing_tokens`](crate::Builder::fencing_tokens), and for
    /// a fail-open permit or a lost lease.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease().and_then(Lease::fencing_token)
    }

    /// Whether the lease was confirmed after Redis lost lease data while it
    /// was held (a restart, a failover, a flush): `None` if no loss was
    /// found while it was held. `Some(Survived)` or `Some(Restored)`: Redis
    /// holds it again. `Some(OverLimit)`: it is held, and others were
    /// granted while it was missing, so the key is over its limit for now.
    /// `Some(Unconfirmed)`: writing it back failed; it may be missing.
    pub fn reassertion(&self) -> Option<Reassertion> {
        self.lease.as_ref().and_then(HeldLease::reassertion)
    }

    /// Extends the lease to the lease TTL from now. A request that may run
    /// longer than the TTL renews well before [`Permit::expires_at`] (every
    /// third of the TTL, say), so the TTL can stay short and a crashed
    /// replica's slots still come back soon. Cancel-safe, like acquire.
    ///
    /// `Err(Lost)`: Redis no longer held the lease; the permit now holds
    /// nothing (`is_enforced()` is false). `Err(Unavailable)`: no answer, the
    /// lease keeps its expiry; try again. A fail-open permit renews to `Ok`.
    pub async fn renew(&mut self) -> Result<(), RenewError> {
        let Some(held) = self.lease.as_ref() else {
            return Ok(());
        };
        let (lease, commands) = (held.lease().clone(), held.commands().clone());
        let request = commands.fresh();
        let id = request.id();
        let (reply, outcome) = oneshot::channel();
        if commands.send(Command::Renew { request, lease, reply }).is_err() {
            return Err(RenewError::Stopped);
        }
        match answer(&commands, id, outcome).await {
            Ok(Ok(renewed)) => {
                if let Some(held) = self.lease.as_mut() {
                    held.renewed(renewed);
                }
                Ok(())
            }
            Ok(Err(RenewError::Lost)) => {
                // Nothing left to release: the permit now holds nothing.
                if let Some(held) = self.lease.take() {
                    held.forget();
                }
                Err(RenewError::Lost)
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(RenewError::Stopped),
        }
    }

    /// Keeps the lease alive from now on: the limiter's driver renews it on
    /// one schedule shared by every kept-alive permit (no task per permit),
    /// once a third of the TTL has passed since its last extension, so a
    /// failed renewal leaves time for retries (every sixth of the TTL).
    /// Errors are retried, never raised; if the lease is lost anyway
    /// (found gone, or not renewed before it expired), [`Permit::lost`]
    /// resolves. Takes `&self`: works from any task, also once the permit
    /// has moved into a response body. Nothing for a fail-open permit.
    pub fn keep_alive(&self) {
        let Some(held) = self.lease.as_ref() else {
            return;
        };
        let lease = held.lease();
        held.news().watch(lease.id(), lease.expires_at(), true);
        let _ = held.commands().send(Command::KeepAlive { lease: lease.clone() });
    }

    /// Resolves when the lease is lost, so long work can stop: found gone
    /// by a renewal (`Gone`), not renewed before its expiry (`Expired`: for
    /// a permit not kept alive, at its expiry), not confirmed after Redis
    /// lost lease data (`Unconfirmed`), or released (`Released`, the work
    /// is over). The future owns what it needs: take it before moving the
    /// permit into another task, and await it beside the work. A fail-open
    /// permit holds nothing to lose: its future never resolves.
    pub fn lost(&self) -> impl std::future::Future<Output = Lost> + Send + 'static {
        let status = self.lease.as_ref().map(|held| {
            let lease = held.lease();
            held.news().watch(lease.id(), lease.expires_at(), false)
        });
        async move {
            match status {
                Some(status) => news::lost(status).await,
                None => std::future::pending().await,
            }
        }
    }

    /// Releases the lease and waits until Redis confirms it, or until the
    /// release gives up (the lease then expires at its TTL).
    pub async fn release(self) -> Result<(), ReleaseError> {
        self.start_release().await
    }

    /// Sends the release now; the future says how it went. (Several
    /// permits released together go out in one write.)
    pub(crate) fn start_release(mut self) -> impl std::future::Future<Output = Result<(), ReleaseError>> {
        let sent = self.lease.take().map(HeldLease::release);
        async move {
            match sent {
                None => Ok(()), // nothing was held
                Some(Ok(outcome)) => outcome.await.unwrap_or(Err(ReleaseError::Stopped)),
                Some(Err(error)) => Err(error),
            }
        }
    }
}
