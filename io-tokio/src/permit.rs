//! `Permit`: the right to run one request. Dropping it gives the slot back.

use inflight_core::{Lease, LeaseId};
use tokio::sync::{mpsc, oneshot};

use crate::driver::Command;
use crate::error::ReleaseError;

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

    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease.as_ref().map(Lease::id)
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
