//! What passes between callers (limiter handles, permits) and the driver:
//! the commands, each request named by the id its caller drew from the
//! core's ids (so caller, driver and core know it by one name), the
//! cancel-safe wait for an answer, and the lease a caller owns, whose drop
//! sends its release. Both sides depend on this module; neither depends on
//! the other.

use std::num::NonZeroU32;
use std::time::Instant;

use inflight_core::event::RequestId;
use inflight_core::key::SubjectKeys;
use inflight_core::{Claim, FreshRequest, Inspection, KeysPage, Lease, Reassertion, RequestIds};
use tokio::sync::{mpsc, oneshot};

use crate::drained::Drained;
use crate::error::{Error, ReleaseError, RenewError};
use crate::news::{Lost, SharedNews};

/// Where commands go, and the ids their requests are named by.
#[derive(Clone, Debug)]
pub(crate) struct Commands {
    sender: mpsc::UnboundedSender<Command>,
    ids: RequestIds,
}

impl Commands {
    pub(crate) fn new(sender: mpsc::UnboundedSender<Command>, ids: RequestIds) -> Self {
        Self { sender, ids }
    }

    /// A name for a new request, asked for now: its timeout counts from
    /// here, not from when the driver reads the call.
    pub(crate) fn fresh(&self) -> FreshRequest {
        self.ids.draw().asked_at(crate::clock::now())
    }

    /// Hands `command` to the driver; `Err` (with it) once the driver stopped.
    pub(crate) fn send(&self, command: Command) -> Result<(), Box<Command>> {
        self.sender.send(command).map_err(|unsent| Box::new(unsent.0))
    }

    /// Whether the driver stopped.
    pub(crate) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// What limiter handles and permits ask of the driver.
#[derive(Debug)]
pub(crate) enum Command {
    Acquire {
        request: FreshRequest,
        keys: SubjectKeys,
        limit: NonZeroU32,
        /// Its weight and label (checked against `limit` by the caller).
        claim: Claim,
        /// Keep the lease alive from its grant on.
        keep_alive: bool,
        /// Wait for a slot until then (`None`: fail fast): measured from
        /// the call, so a driver that stood still (a worker thread blocked
        /// by user code) does not lengthen the caller's wait.
        wait_until: Option<Instant>,
        /// `Ok(None)`: let through unenforced (fail open).
        reply: oneshot::Sender<Result<Option<HeldLease>, Error>>,
    },
    /// One lease on each subject, all or nothing (one slot in a cluster).
    AcquireAll {
        request: FreshRequest,
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        claim: Claim,
        keep_alive: bool,
        /// `Ok(None)`: let through unenforced (fail open).
        reply: oneshot::Sender<Result<Option<Vec<HeldLease>>, Error>>,
    },
    Renew {
        request: FreshRequest,
        lease: Lease,
        reply: oneshot::Sender<Result<Lease, RenewError>>,
    },
    /// Read what a subject holds (`Limiter::usage`, `Limiter::holders`).
    Inspect {
        request: FreshRequest,
        keys: SubjectKeys,
        holders: u32,
        reply: oneshot::Sender<Result<Inspection, Error>>,
    },
    /// Read one page of the keys primary `shard` holds leases for
    /// (`Limiter::busy_keys`); `Ok(None)`: there is no such shard.
    Scan {
        request: FreshRequest,
        shard: usize,
        cursor: u64,
        count: u32,
        reply: oneshot::Sender<Result<Option<KeysPage>, Error>>,
    },
    /// Renew this lease on its own schedule until it is let go.
    KeepAlive { lease: Lease },
    /// The caller of `request` is gone.
    Abandon { request: RequestId },
    Release {
        lease: Lease,
        done: Option<oneshot::Sender<Result<(), ReleaseError>>>,
    },
    /// Answer once the driver owes nothing, or at `deadline` with what it
    /// still owes (see `Limiter::drain`).
    Drain {
        done: oneshot::Sender<Drained>,
        started: Instant,
        deadline: Instant,
    },
    /// Stop the driver for this long, as a starved runtime would: nothing
    /// read, written or timed meanwhile (the simulator's fault).
    #[cfg(feature = "fault-injection")]
    Stall(std::time::Duration),
}

/// Waits for the driver's answer to `request`. Cancel-safe: if this future is
/// dropped first, the driver is told the caller is gone.
pub(crate) async fn answer<T>(
    commands: &Commands,
    request: RequestId,
    answer: oneshot::Receiver<T>,
) -> Result<T, oneshot::error::RecvError> {
    let mut guard = AbandonOnDrop {
        request,
        commands,
        armed: true,
    };
    let answered = answer.await;
    guard.armed = false;
    answered
}

/// Tells the driver the caller is gone, unless the outcome was received.
struct AbandonOnDrop<'a> {
    request: RequestId,
    commands: &'a Commands,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Abandon { request: self.request });
        }
    }
}

/// A granted lease that someone owns: dropping it sends its release. The
/// driver hands one out for each grant; should the caller be gone by then,
/// it comes back in the unsent reply, and its drop still releases.
#[derive(Debug)]
pub(crate) struct HeldLease {
    /// Always `Some` but inside `release`, `forget` and `drop`, which take it.
    held: Option<(Lease, Commands)>,
    news: SharedNews,
    /// When the caller got it, for the average hold.
    granted: Instant,
}

impl HeldLease {
    pub(crate) fn new(lease: Lease, commands: Commands, news: SharedNews) -> Self {
        Self {
            held: Some((lease, commands)),
            news,
            granted: crate::clock::now(),
        }
    }

    /// Notes how long the slot was held: a slot of a full key frees about
    /// that soon. A lease lost meanwhile tells nothing about that.
    fn note_hold(&self, lease: &Lease) {
        if self.news.loss(lease.id()).is_none() {
            self.news
                .holds
                .record(crate::clock::now().saturating_duration_since(self.granted));
        }
    }

    /// What the last write-back of this lease after a data loss found, if
    /// there was one while it was held.
    pub(crate) fn reassertion(&self) -> Option<Reassertion> {
        self.news.reassertion(self.lease().id())
    }

    /// What the driver learns of this lease from now on.
    pub(crate) fn news(&self) -> &SharedNews {
        &self.news
    }

    fn held(&self) -> &(Lease, Commands) {
        self.held.as_ref().expect("taken only by consuming methods")
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.held().0
    }

    /// Where commands about this lease go.
    pub(crate) fn commands(&self) -> &Commands {
        &self.held().1
    }

    /// The lease was renewed: it now lasts until `renewed.expires_at()`.
    pub(crate) fn renewed(&mut self, renewed: Lease) {
        self.news.extended(renewed.id(), renewed.expires_at());
        if let Some((lease, _)) = self.held.as_mut() {
            *lease = renewed;
        }
    }

    /// Redis no longer holds the lease: let it go without a release.
    pub(crate) fn forget(mut self) {
        if let Some((lease, _)) = self.held.take() {
            self.news.let_go(lease.id(), Lost::Gone);
        }
    }

    /// Gives the lease back now; the receiver says how that went.
    pub(crate) fn release(mut self) -> Result<oneshot::Receiver<Result<(), ReleaseError>>, ReleaseError> {
        let (lease, commands) = self.held.take().expect("taken only by consuming methods");
        self.note_hold(&lease);
        let (done, outcome) = oneshot::channel();
        commands
            .send(Command::Release {
                lease,
                done: Some(done),
            })
            .map_err(|_| ReleaseError::Stopped)?;
        Ok(outcome)
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        let Some((lease, commands)) = self.held.take() else {
            return;
        };
        self.note_hold(&lease);
        // Sending needs no runtime; the driver's runtime does the work.
        if let Err(unsent) = commands.send(Command::Release { lease, done: None }) {
            if let Command::Release { lease, .. } = *unsent {
                tracing::warn!(
                    lease = %lease.id(),
                    "permit dropped after the limiter's driver stopped; the lease expires at its TTL"
                );
            }
        }
    }
}
