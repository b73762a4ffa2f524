//! Admission: a [`Decision`] becomes a held permit or a [`Rejection`]. Both
//! layers (HTTP and any-request) admit through [`Gate`], so they agree on
//! every outcome.

use std::time::Duration;

use inflight_core::LeaseId;

use crate::tower::{Decision, Rejection};
use crate::{Acquire, Error, Limiter, Permit};

/// The limiter, and how the layer waits.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    limiter: Limiter,
    /// Wait up to this long for a slot instead of rejecting at once.
    wait: Option<Duration>,
}

impl Gate {
    pub(crate) fn new(limiter: Limiter) -> Self {
        Self { limiter, wait: None }
    }

    /// Waits up to `wait` for a slot (in the key's fleet-wide queue).
    pub(crate) fn waiting(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Takes the permit the decision asks for, waiting for a slot if the
    /// layer was told to. Cancel-safe as the limiter's acquire is: dropped
    /// here, nothing is held (and a waiter leaves its queue).
    pub(crate) async fn admit(&self, decision: Decision) -> Result<Held, Rejection> {
        let limited = match decision {
            Decision::Limit(limited) => limited,
            Decision::Pass => return Ok(Held::nothing()),
            Decision::Refuse(reason) => return Err(Rejection::Refused { reason }),
        };
        let mut options = Acquire::default();
        if let Some(limit) = limited.limit() {
            options = options.limit(limit);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        let taken = self.limiter.acquire_opts(limited.key(), options).await;
        let key = limited.key().clone();
        match taken {
            Ok(permit) => Ok(Held::new(permit)),
            Err(Error::Exceeded { retry_after, .. }) => Err(Rejection::Exceeded { key, retry_after }),
            Err(Error::Config(error)) => Err(Rejection::Misconfigured { key, error }),
            Err(error) => Err(Rejection::Unavailable {
                key,
                retry_after: self.limiter.retry_after(&error),
                error,
            }),
        }
    }
}

/// The permit of one admitted request (or nothing, for a request that is
/// not limited). Dropping it gives the slot back.
#[derive(Debug)]
pub(crate) struct Held {
    permit: Option<Permit>,
}

impl Held {
    fn new(permit: Permit) -> Self {
        Self { permit: Some(permit) }
    }

    pub(crate) fn nothing() -> Self {
        Self { permit: None }
    }

    /// What a handler may want to know about its admission.
    pub(crate) fn admitted(&self) -> Admitted {
        let permit = self.permit.as_ref();
        Admitted {
            lease_id: permit.and_then(Permit::lease_id),
            fencing_token: permit.and_then(Permit::fencing_token),
        }
    }
}

/// Put in the request's extensions by the HTTP layer before the inner
/// service runs: the handler can read the lease and pass its fencing token
/// to the resource it guards (`Extension<Admitted>` in axum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    lease_id: Option<LeaseId>,
    fencing_token: Option<u64>,
}

impl Admitted {
    /// Whether a slot is held for this request: `false` for a request the
    /// extractor let pass, or one admitted fail-open while Redis was away.
    pub fn is_enforced(&self) -> bool {
        self.lease_id.is_some()
    }

    /// The lease's id in Redis.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease_id.clone()
    }

    /// The grant's fencing token (see [`Permit::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}
