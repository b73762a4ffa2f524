//! `Limiter`: what a service holds and calls.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use inflight_core::key::SubjectKeys;
use inflight_core::{Claim, Key, Label, Stats, Unavailable, UnavailablePolicy};
use tokio::sync::{oneshot, watch};

use crate::drained::Drained;
use crate::error::Error;
use crate::mailbox::{answer, Command, Commands};
use crate::permit::Permit;
use crate::telemetry::{self, AcquireOutcome};

mod composite;
pub(crate) mod reads;

/// A fleet-wide in-flight limiter. Cheap to clone; all clones share one driver
/// task and its connections (one to the server, or one per cluster primary).
#[derive(Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

/// What the limiter enforces and how it stands, not its channels.
impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = &self.shared;
        f.debug_struct("Limiter")
            .field("key_prefix", &shared.key_prefix)
            .field("default_limit", &shared.default_limit)
            .field("on_unavailable", &shared.policy)
            .field("keep_alive", &shared.keep_alive)
            .field("drain_timeout", &shared.drain_timeout)
            .field("running", &!shared.commands.is_closed())
            .finish_non_exhaustive()
    }
}

struct Shared {
    commands: Commands,
    default_limit: NonZeroU32,
    policy: UnavailablePolicy,
    key_prefix: String,
    stats: watch::Receiver<Stats>,
    metric_labels: Vec<metrics::Label>,
    hints: RetryHints,
    /// Permits are kept alive unless an acquire says otherwise.
    keep_alive: bool,
    /// How long `drain` waits for what is owed.
    drain_timeout: Duration,
    /// The server is a cluster: keys of different slots cannot share a call.
    cluster: bool,
    /// Deliberate bugs, for the simulator's self-test only.
    #[cfg(feature = "fault-injection")]
    bugs: inflight_core::InjectedBugs,
}

/// How one acquire asks: the default is the limiter's default limit, weight
/// 1, the limiter's holder label, and no wait (`Exceeded` at once when the
/// key is full).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquire {
    limit: Option<u32>,
    wait: Option<Duration>,
    weight: Option<u32>,
    label: Option<String>,
    keep_alive: Option<bool>,
}

impl Acquire {
    /// Under `limit` for this call instead of the default (zero is refused
    /// with `Error::Config`).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Wait up to `max_wait` for a slot, in the subject's fleet-wide queue,
    /// counted from the call (a driver held up meanwhile, its worker thread
    /// blocked by other code, does not lengthen it). A zero wait is no
    /// wait: the acquire fails fast (`Exceeded` when the key is full), as
    /// without this option. `Duration::MAX` waits as long as any deadline
    /// may be (a year).
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.wait = (!max_wait.is_zero()).then_some(max_wait);
        self
    }

    /// Take `weight` units of the key's limit, all or nothing (a request
    /// that costs more, say a large upload): released and renewed as one.
    /// Zero, more than [`MAX_WEIGHT`](inflight_core::MAX_WEIGHT) or more
    /// than the limit is refused with `Error::Claim`. A waiting acquire of
    /// weight `w` waits its turn in the queue until `w` units are free;
    /// lighter waiters behind it do not overtake it.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = Some(weight);
        self
    }

    /// Hold the lease under `label` (a request id, say) instead of the
    /// limiter's holder label: `Limiter::holders` shows it. 1 to 64 bytes
    /// of ASCII letters, digits and `. _ : / + = -`; anything else is
    /// refused with `Error::Label`.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Keep the lease alive while the permit is held (overrides
    /// `Builder::keep_alive`): see [`Permit::keep_alive`].
    pub fn keep_alive(mut self, keep_alive: bool) -> Self {
        self.keep_alive = Some(keep_alive);
        self
    }
}

/// What a limiter handle needs of the builder's settings.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) default_limit: NonZeroU32,
    pub(crate) policy: UnavailablePolicy,
    pub(crate) key_prefix: String,
    pub(crate) metric_labels: Vec<metrics::Label>,
    pub(crate) hints: RetryHints,
    pub(crate) keep_alive: bool,
    pub(crate) drain_timeout: Duration,
    pub(crate) cluster: bool,
    /// Deliberate bugs, for the simulator's self-test only.
    #[cfg(feature = "fault-injection")]
    pub(crate) bugs: inflight_core::InjectedBugs,
}

/// What the settings say about when a refused request may succeed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryHints {
    /// How long new grants are held after a data loss (`None`: recovery off).
    pub(crate) recovery_window: Option<Duration>,
    /// The longest wait between two attempts to reconnect.
    pub(crate) reconnect_max_backoff: Duration,
}

impl Limiter {
    /// A handle on a started driver.
    pub(crate) fn new(commands: Commands, stats: watch::Receiver<Stats>, settings: Settings) -> Self {
        let Settings {
            default_limit,
            policy,
            key_prefix,
            metric_labels,
            hints,
            keep_alive,
            drain_timeout,
            cluster,
            #[cfg(feature = "fault-injection")]
            bugs,
        } = settings;
        Self {
            shared: Arc::new(Shared {
                commands,
                default_limit,
                policy,
                key_prefix,
                stats,
                metric_labels,
                hints,
                keep_alive,
                drain_timeout,
                cluster,
                #[cfg(feature = "fault-injection")]
                bugs,
            }),
        }
    }

    /// Takes a slot under the default limit.
    pub async fn acquire(&self, key: &Key) -> Result<Permit, Error> {
        self.acquire_limited(key, self.shared.default_limit, None).await
    }

    /// Takes a slot under `limit` for this call (tiers need no second limiter).
    pub async fn acquire_with(&self, key: &Key, limit: u32) -> Result<Permit, Error> {
        self.acquire_opts(key, Acquire::default().limit(limit)).await
    }

    /// Waits up to `max_wait` for a slot under the default limit: first come,
    /// first served across the fleet (the subject's queue lives in Redis),
    /// woken by releases, with no polling. `Exceeded` when `max_wait` passes
    /// without a slot; `Exceeded { shed: true, .. }` earlier when Redis
    /// expects the wait to outlast `max_wait`: at once, or at a later check
    /// (every third of the waiter lifetime) if the queue ahead moves slower
    /// than it expected, with its estimate as `retry_after`. A zero
    /// `max_wait` fails fast, as [`Limiter::acquire`] does.
    pub async fn acquire_wait(&self, key: &Key, max_wait: Duration) -> Result<Permit, Error> {
        self.acquire_opts(key, Acquire::default().wait(max_wait)).await
    }

    /// Takes a slot as `options` say: a limit for this call, a wait.
    pub async fn acquire_opts(&self, key: &Key, options: Acquire) -> Result<Permit, Error> {
        let limit = match options.limit {
            Some(limit) => inflight_core::config::limit(limit)?,
            None => self.shared.default_limit,
        };
        let mut claim = Claim::weighing(options.weight.unwrap_or(1))?;
        claim.fits(limit)?;
        if let Some(label) = &options.label {
            claim = claim.labelled(Label::new(label)?);
        }
        let keep_alive = options.keep_alive.unwrap_or(self.shared.keep_alive);
        self.acquire_claimed(key, limit, claim, keep_alive, options.wait).await
    }

    /// Cancel-safe: dropping this future at any await point tells the driver
    /// the caller is gone; a grant that arrives later is released, and a
    /// waiter leaves its queue.
    async fn acquire_limited(&self, key: &Key, limit: NonZeroU32, wait: Option<Duration>) -> Result<Permit, Error> {
        let keep_alive = self.shared.keep_alive;
        self.acquire_claimed(key, limit, Claim::default(), keep_alive, wait)
            .await
    }

    async fn acquire_claimed(
        &self,
        key: &Key,
        limit: NonZeroU32,
        claim: Claim,
        keep_alive: bool,
        wait: Option<Duration>,
    ) -> Result<Permit, Error> {
        let started = tokio::time::Instant::now();
        let result = self.ask_one(key, limit, claim, keep_alive, wait).await;
        self.record(started, result.as_ref().map(Permit::is_enforced), wait.is_some());
        result
    }

    /// One key's acquire, as the driver answers it.
    async fn ask_one(
        &self,
        key: &Key,
        limit: NonZeroU32,
        claim: Claim,
        keep_alive: bool,
        wait: Option<Duration>,
    ) -> Result<Permit, Error> {
        let request = self.shared.commands.fresh();
        let id = request.id();
        let (reply, outcome) = oneshot::channel();
        let command = Command::Acquire {
            request,
            // Encoded here, on the caller's thread, not on the driver's.
            keys: SubjectKeys::new(&self.shared.key_prefix, key),
            limit,
            claim,
            keep_alive,
            // The caller's deadline, on the core's clock, from now: "wait
            // forever" (`Duration::MAX`) waits as long as any deadline may.
            wait_until: wait.map(|wait| crate::clock::now() + wait.min(inflight_core::config::MAX_DURATION)),
            reply,
        };
        if self.shared.commands.send(command).is_err() {
            return self.stopped();
        }
        match answer(&self.shared.commands, id, outcome).await {
            Ok(Ok(Some(lease))) => Ok(Permit::enforced(lease)),
            Ok(Ok(None)) => Ok(Permit::unenforced()),
            Ok(Err(error)) => Err(error),
            Err(_) => self.stopped(),
        }
    }

    /// Counts an acquire's outcome (`Ok(enforced)`) in the metrics.
    fn record(&self, started: tokio::time::Instant, result: Result<bool, &Error>, waited: bool) {
        let outcome = match result {
            Ok(true) => AcquireOutcome::Granted,
            Ok(false) => AcquireOutcome::FailOpen,
            Err(Error::Exceeded { shed: true, .. }) => AcquireOutcome::Shed,
            Err(Error::Exceeded { .. }) => AcquireOutcome::Denied,
            Err(_) => AcquireOutcome::Unavailable,
        };
        telemetry::record_acquire(
            &self.shared.metric_labels,
            outcome,
            started.elapsed().as_secs_f64(),
            waited,
        );
    }

    fn stopped(&self) -> Result<Permit, Error> {
        match self.shared.policy {
            UnavailablePolicy::Allow => Ok(Permit::unenforced()),
            _ => Err(Error::Stopped),
        }
    }

    /// When a request refused with `error` may be tried again (for an HTTP
    /// `Retry-After`): an `Exceeded`'s own hint ([`Error::retry_after`]);
    /// the recovery window while Redis is being recovered after a data
    /// loss; the reconnect backoff cap while there is no connection. `None`
    /// when nothing tells.
    pub fn retry_after(&self, error: &Error) -> Option<Duration> {
        let hints = &self.shared.hints;
        match error {
            Error::Exceeded { retry_after, .. } => Some(*retry_after),
            Error::Unavailable {
                reason: Unavailable::Recovering,
            } => hints.recovery_window,
            Error::Unavailable {
                reason: Unavailable::NotConnected(_) | Unavailable::ConnectionLost(_) | Unavailable::NoPrimary,
            } => Some(hints.reconnect_max_backoff),
            _ => None,
        }
    }

    /// The limit of an acquire that names none.
    pub fn default_limit(&self) -> u32 {
        self.shared.default_limit.get()
    }

    /// Running totals of the driver (the same figures as the metrics).
    pub fn stats(&self) -> Stats {
        *self.shared.stats.borrow()
    }

    /// Stops the driver for `stall`, as a runtime starved by blocking code
    /// would: for the simulator's fault schedule only.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn stall_driver(&self, stall: Duration) {
        let _ = self.shared.commands.send(Command::Stall(stall));
    }

    /// For shutdown: gives up this handle and waits until the driver owes
    /// nothing (every release and compensation done or given up, every
    /// hand-over of a released slot to another replica's waiter written and
    /// answered, no acquire in flight), so a process can exit without stranding leases until their
    /// TTL; but no longer than the drain timeout (`Builder::drain_timeout`,
    /// 5 s by default), so a shutdown with Redis down is not held up by
    /// releases that cannot get through. [`Drained`] says which: complete,
    /// or what was still owed (those leases come back at their TTL).
    ///
    /// The driver is shared by all clones: work that other clones are still
    /// doing keeps this waiting, so drain the last handle, after the work
    /// has stopped.
    pub async fn drain(self) -> Drained {
        let started = crate::clock::now();
        let deadline = started + self.shared.drain_timeout;
        let (done, drained) = oneshot::channel();
        let command = Command::Drain {
            done,
            started,
            deadline,
        };
        if self.shared.commands.send(command).is_err() {
            // The driver stopped: it owes nothing it could still do.
            return Drained::new(Duration::ZERO, 0, 0);
        }
        drained
            .await
            .unwrap_or_else(|_| Drained::new(crate::clock::now() - started, 0, 0))
    }
}
