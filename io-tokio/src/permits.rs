//! `Permits`: the right to run one request that falls under several keys.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{ReleaseError, RenewError};
use crate::news::Lost;
use crate::permit::Permit;

/// What [`Limiter::acquire_all`](crate::Limiter::acquire_all) hands out: a
/// [`Permit`] per key, in the order the keys were given. Dropping it gives
/// every slot back.
#[must_use = "the slots are given back as soon as the permits are dropped"]
#[derive(Debug)]
pub struct Permits {
    parts: Vec<Permit>,
}

impl Permits {
    pub(crate) fn new(parts: Vec<Permit>) -> Self {
        Self { parts }
    }

    /// The permit of each key, in the order the keys were given: each
    /// key's lease id, weight, expiry and fencing token.
    pub fn parts(&self) -> &[Permit] {
        &self.parts
    }

    /// The permits, to release or keep apart.
    pub fn into_parts(self) -> Vec<Permit> {
        self.parts
    }

    /// Whether every key's slot is held in Redis: `false` when let through
    /// unenforced (fail-open) or once any lease is known lost.
    pub fn is_enforced(&self) -> bool {
        self.parts.iter().all(Permit::is_enforced)
    }

    /// The fencing token of each key (see [`Permit::fencing_token`]).
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.parts.iter().map(Permit::fencing_token).collect()
    }

    /// Keeps every lease alive (see [`Permit::keep_alive`]).
    pub fn keep_alive(&self) {
        self.parts.iter().for_each(Permit::keep_alive);
    }

    /// Resolves when any key's lease is lost, with that key's index and
    /// why (see [`Permit::lost`]): the request no longer holds all it
    /// asked for. Owns what it needs, like [`Permit::lost`].
    pub fn lost(&self) -> impl Future<Output = (usize, Lost)> + Send + 'static {
        let mut each: Vec<Pin<Box<dyn Future<Output = Lost> + Send>>> =
            self.parts.iter().map(|permit| Box::pin(permit.lost()) as _).collect();
        std::future::poll_fn(move |cx: &mut Context<'_>| {
            for (index, lost) in each.iter_mut().enumerate() {
                if let Poll::Ready(why) = lost.as_mut().poll(cx) {
                    return Poll::Ready((index, why));
                }
            }
            Poll::Pending
        })
    }

    /// Extends every lease to the lease TTL from now (see
    /// [`Permit::renew`]); the first error, after every key was tried.
    pub async fn renew(&mut self) -> Result<(), RenewError> {
        let mut result = Ok(());
        for permit in &mut self.parts {
            let renewed = permit.renew().await;
            result = result.and(renewed);
        }
        result
    }

    /// Releases every lease at once and waits until Redis confirms each,
    /// or its release gives up; the first error, after every key's.
    pub async fn release(self) -> Result<(), ReleaseError> {
        let sent: Vec<_> = self.parts.into_iter().map(Permit::start_release).collect();
        let mut result = Ok(());
        for released in sent {
            result = result.and(released.await);
        }
        result
    }
}
