//! `Permit`: the right to run one request. Dropping it gives the slot back.

use inflight_core::{Lease, LeaseId};
use tokio::sync::{mpsc, oneshot};

use crate::driver::Command;
use crate::error::{ReleaseError, RenewError};
use crate::limiter::{answer, next_ticket};

/// Held while a request runs. Dropping it releases the lease in the background;
/// [`Permit::release`] does the same and waits for the outcome.
#[must_use = "the slot is given back as soon as the permit is dropped"]
#[derive(Debug)]
pub struct Permit {
    lease: Option<Lease>,
    commands: Option<mpsc::UnboundedSender<Command>>,
}

impl Permit {
    pub(crate) fn enforced(lease: Lease, commands: mpsc::UnboundedSender<Command>) -> Self {
        Self {
            lease: Some(lease),
            commands: Some(commands),
        }
    }

    /// A permit handed out without a lease because Redis was unavailable and
    /// the policy is `Allow`.
    pub(crate) fn unenforced() -> Self {
        Self {
            lease: None,
            commands: None,
        }
    }

    /// `false` for a fail-open permit that holds no slot.
    pub fn is_enforced(&self) -> bool {
        self.lease.is_some()
    }

    /// The lease's id in Redis; `None` for an unenforced (fail-open) permit.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease.as_ref().map(Lease::id)
    }

    /// Until about when Redis keeps the lease without a renewal: the lease
    /// TTL from when it was acquired or last renewed. `None` if nothing is held.
    pub fn expires_at(&self) -> Option<std::time::Instant> {
        self.lease.as_ref().map(Lease::expires_at)
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
        let (Some(lease), Some(commands)) = (&self.lease, &self.commands) else {
            return Ok(());
        };
        let ticket = next_ticket();
        let (reply, outcome) = oneshot::channel();
        let lease = lease.clone();
        if commands.send(Command::Renew { ticket, lease, reply }).is_err() {
            return Err(RenewError::Stopped);
        }
        match answer(commands, ticket, outcome).await {
            Ok(Ok(renewed)) => {
                self.lease = Some(renewed);
                Ok(())
            }
            Ok(Err(RenewError::Lost)) => {
                // Nothing left to release.
                self.lease = None;
                self.commands = None;
                Err(RenewError::Lost)
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(RenewError::Stopped),
        }
    }

    /// Releases the lease and waits until Redis confirms it, or until the
    /// release gives up (the lease then expires at its TTL).
    pub async fn release(mut self) -> Result<(), ReleaseError> {
        let (Some(lease), Some(commands)) = (self.lease.take(), self.commands.take()) else {
            return Ok(()); // nothing was held
        };
        let (done, outcome) = oneshot::channel();
        if commands
            .send(Command::Release {
                lease,
                done: Some(done),
            })
            .is_err()
        {
            return Err(ReleaseError::Stopped);
        }
        outcome.await.unwrap_or(Err(ReleaseError::Stopped))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let (Some(lease), Some(commands)) = (self.lease.take(), self.commands.take()) else {
            return;
        };
        // Sending needs no runtime; the driver's runtime does the work.
        if let Err(unsent) = commands.send(Command::Release { lease, done: None }) {
            if let Command::Release { lease, .. } = unsent.0 {
                tracing::warn!(
                    lease = %lease.id(),
                    "permit dropped after the limiter's driver stopped; the lease expires at its TTL"
                );
            }
        }
    }
}
