//! Admission: a [`Decision`] becomes a held permit or a [`Rejection`]. Both
//! layers (HTTP and any-request) admit through [`Gate`], so they agree on
//! every outcome.

use std::time::Duration;

use inflight_core::{CompositeError, ConfigError, Key, LeaseId};

use crate::tower::{Decision, Limited, Rejection};
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
            Decision::LimitAll(all) => return self.admit_all(all).await,
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
        match taken {
            Ok(permit) => Ok(Held::new(vec![permit])),
            Err(error) => Err(self.rejection(error, &[limited])),
        }
    }

    /// A slot of every key, all or nothing.
    async fn admit_all(&self, all: Vec<Limited>) -> Result<Held, Rejection> {
        let default = self.limiter.default_limit();
        let keys: Vec<(&Key, u32)> = all
            .iter()
            .map(|limited| (limited.key(), limited.limit().unwrap_or(default)))
            .collect();
        let mut options = Acquire::default();
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        match self.limiter.acquire_all_opts(&keys, options).await {
            Ok(permits) => Ok(Held::new(permits.into_parts())),
            Err(error) => Err(self.rejection(error, &all)),
        }
    }

    /// Why the limiter refused an acquire of `keys` (one, or all or
    /// nothing): a full key is named, else the first.
    fn rejection(&self, error: Error, keys: &[Limited]) -> Rejection {
        let key = |index: Option<usize>| keys[index.filter(|i| *i < keys.len()).unwrap_or(0)].key().clone();
        match error {
            Error::Exceeded {
                retry_after, key: full, ..
            } => Rejection::Exceeded {
                key: key(full),
                retry_after,
            },
            Error::Config(error) => Rejection::Misconfigured { key: key(None), error },
            // Keys that cannot be taken together: the extractor's mistake.
            Error::Composite(error) => Rejection::Misconfigured {
                key: key(None),
                error: ConfigError::OutOfRange {
                    field: "Decision::LimitAll",
                    reason: match error {
                        CompositeError::Repeated { .. } => "a key is named twice",
                        CompositeError::TooMany { .. } => "more keys than one acquire takes",
                        _ => "keys that cannot be taken together",
                    },
                },
            },
            error => Rejection::Unavailable {
                key: key(None),
                retry_after: self.limiter.retry_after(&error),
                error,
            },
        }
    }
}

/// The permit of one admitted request (or nothing, for a request that is
/// not limited). Dropping it gives the slot back.
#[derive(Debug)]
pub(crate) struct Held {
    /// One per key counted against (none for a request let pass).
    permits: Vec<Permit>,
}

impl Held {
    fn new(permits: Vec<Permit>) -> Self {
        Self { permits }
    }

    pub(crate) fn nothing() -> Self {
        Self { permits: Vec::new() }
    }

    /// What a handler may want to know about its admission.
    pub(crate) fn admitted(&self) -> Admitted {
        Admitted {
            lease_ids: self.permits.iter().map(Permit::lease_id).collect(),
            fencing_tokens: self.permits.iter().map(Permit::fencing_token).collect(),
        }
    }
}

/// Put in the request's extensions by the HTTP layer before the inner
/// service runs: the handler can read the lease and pass its fencing token
/// to the resource it guards (`Extension<Admitted>` in axum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// One per key, in the extractor's order.
    lease_ids: Vec<Option<LeaseId>>,
    /// One per key, in the extractor's order.
    fencing_tokens: Vec<Option<u64>>,
}

impl Admitted {
    /// Whether a slot is held for this request: `false` for a request the
    /// extractor let pass, or one admitted fail-open while Redis was away.
    pub fn is_enforced(&self) -> bool {
        !self.lease_ids.is_empty() && self.lease_ids.iter().all(Option::is_some)
    }

    /// The lease's id in Redis (the first key's, for a request counted
    /// against several).
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease_ids.first().cloned().flatten()
    }

    /// Every key's lease id, in the order the extractor named them.
    pub fn lease_ids(&self) -> &[Option<LeaseId>] {
        &self.lease_ids
    }

    /// The grant's fencing token (see [`Permit::fencing_token`]); the first
    /// key's, for a request counted against several.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_tokens.first().copied().flatten()
    }

    /// Every key's fencing token, in the order the extractor named them.
    pub fn fencing_tokens(&self) -> &[Option<u64>] {
        &self.fencing_tokens
    }
}
