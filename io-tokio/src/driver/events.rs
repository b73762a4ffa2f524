//! What the driver does with each of the core's events: hand an outcome
//! to its caller (or give back a lease whose caller left), tell a permit
//! its lease is lost, report connection news.

use inflight_core::{ConnectionError, ConnectionId, Event, LeaseId, Outcome, Reassertion, Renewal, RequestId, Servers};

use super::{Caller, Driver};
use crate::clock::now;
use crate::connector::Connector;
use crate::error::{ConnectError, Error, ReleaseError, RenewError};
use crate::mailbox::{Commands, HeldLease};

impl<C: Connector> Driver<C> {
    pub(super) fn on_event(&mut self, event: Event) {
        match event {
            Event::Acquired(request, outcome) => self.on_acquired(request, outcome),
            Event::Renewed(request, renewal) => self.on_renewed(request, renewal),
            Event::Inspected(request, inspection) => {
                if let Some(Caller::Inspect(reply)) = self.callers.remove(&request) {
                    let _ = reply.send(inspection.map_err(|reason| Error::Unavailable { reason }));
                }
            }
            Event::Scanned(request, page) => {
                if let Some(Caller::Scan(reply)) = self.callers.remove(&request) {
                    let _ = reply.send(page.map(Some).map_err(|reason| Error::Unavailable { reason }));
                }
            }
            Event::Released { lease, of } => {
                tracing::trace!(%lease, ?of, "inflight: lease released");
                self.release_done(lease, Ok(()));
            }
            Event::ReleaseAbandoned { lease, of, reason } => {
                tracing::warn!(%lease, ?of, %reason, "inflight: release gave up; the lease expires at its TTL");
                self.release_done(lease, Err(ReleaseError::Abandoned(reason)));
            }
            Event::Connected(id) => {
                let addr = self.client.endpoint(id).map(ToString::to_string).unwrap_or_default();
                let failed_attempts = self.connect_failed_log.reset();
                tracing::info!(connection = id.get(), %addr, failed_attempts, "inflight: connected to Redis");
                if let Some(startup) = self.startup.take() {
                    let _ = startup.send(Ok(()));
                }
            }
            Event::ConnectFailed(id, error) => self.on_connect_failed(id, error),
            Event::Warning(id, warning) => {
                let addr = self.client.endpoint(id).map(ToString::to_string).unwrap_or_default();
                tracing::warn!(connection = id.get(), %addr, %warning, "inflight: a guarantee is weaker on this server");
            }
            Event::Retired(id, error) => {
                tracing::warn!(connection = id.get(), %error, "inflight: connection retired; opening a fresh one");
            }
            Event::DataLoss { connection, loss, held } => {
                let addr = self
                    .client
                    .endpoint(connection)
                    .map(ToString::to_string)
                    .unwrap_or_default();
                tracing::warn!(
                    connection = connection.get(),
                    %addr,
                    ?loss,
                    held,
                    "inflight: Redis lost lease data; writing back the leases held there and holding new grants"
                );
            }
            Event::Reasserted { lease, outcome } => {
                if outcome == Reassertion::OverLimit {
                    tracing::warn!(%lease, "inflight: a lease written back after a data loss finds its key over the limit");
                }
                self.news.reasserted(lease, outcome);
            }
            Event::Primary {
                previous: None,
                primary,
            } => tracing::info!(%primary, "inflight: the sentinels name the primary"),
            Event::Primary {
                previous: Some(previous),
                primary,
            } => tracing::warn!(%previous, %primary, "inflight: the sentinels switched the primary; following"),
            Event::PrimaryDown(true) => tracing::warn!("inflight: a sentinel finds the primary down (+odown)"),
            Event::PrimaryDown(false) => tracing::info!("inflight: a sentinel finds the primary up again (-odown)"),
            Event::SentinelFailed(id, error) => {
                if let Some(suppressed) = self.connect_failed_log.admit(now()) {
                    tracing::warn!(connection = id.get(), %error, suppressed, "inflight: a sentinel could not be used; asking the next");
                }
            }
            // A lease given back meanwhile stays let go.
            Event::KeptAlive { lease, expires_at } if self.client.holds(&lease) => {
                self.news.extended(&lease, expires_at)
            }
            Event::KeptAlive { .. } => {}
            Event::LeaseLost { lease, reason } => {
                tracing::warn!(%lease, ?reason, "inflight: a held lease is lost; its holder should stop");
                self.news.lose(&lease, reason.into());
            }
        }
    }

    /// A full key's refusal, with the hint of when a slot frees.
    fn exceeded(&self, key: Option<usize>) -> Error {
        Error::Exceeded {
            retry_after: self.news.holds.retry_after(),
            shed: false,
            key,
        }
    }

    /// A lease granted to a caller: kept alive if it asked, owned by a
    /// `HeldLease` whose drop releases it.
    fn held(&mut self, lease: inflight_core::Lease, keep_alive: bool) -> Option<HeldLease> {
        let Some(commands) = self.commands.upgrade() else {
            self.client.release(now(), lease);
            return None;
        };
        if keep_alive {
            self.news.watch(lease.id(), lease.expires_at(), true);
            self.client.keep_alive(now(), &lease);
        }
        let commands = Commands::new(commands, self.client.request_ids());
        Some(HeldLease::new(lease, commands, self.news.clone()))
    }

    /// Hands an acquire's outcome to its caller.
    fn on_acquired(&mut self, request: RequestId, outcome: Outcome) {
        if let Some(Caller::AcquireAll { .. }) = self.callers.get(&request) {
            return self.on_acquired_all(request, outcome);
        }
        let Some(Caller::Acquire { reply, keep_alive }) = self.callers.remove(&request) else {
            // Unreachable: a caller's entry goes only with its outcome or its
            // `abandon`, after which the core sends nothing for it. Should
            // that ever break, the lease is still not leaked.
            tracing::error!(?request, "inflight: an outcome for a request with no caller");
            if let Outcome::Granted(lease) = outcome {
                self.client.release(now(), lease);
            }
            return;
        };
        let result = match outcome {
            Outcome::Granted(lease) => self.held(lease, keep_alive).map(Some).ok_or(Error::Stopped),
            Outcome::Exceeded => Err(self.exceeded(None)),
            Outcome::Shed(expected) => Err(Error::Exceeded {
                retry_after: expected,
                shed: true,
                key: None,
            }),
            // Never for an acquire of one key; given back should it come.
            Outcome::GrantedAll(leases) => {
                leases.into_iter().for_each(|lease| self.client.release(now(), lease));
                Err(Error::Stopped)
            }
            Outcome::ExceededAt(index) => Err(self.exceeded(Some(index))),
            Outcome::Unavailable(reason) => Err(Error::Unavailable { reason }),
            Outcome::FailOpen(reason) => {
                self.failed_open(&reason);
                Ok(None)
            }
        };
        // If the caller dropped its future just now, the lease inside comes
        // back here and its drop queues the release.
        let _ = reply.send(result);
    }

    /// Hands an acquire of several keys its outcome.
    fn on_acquired_all(&mut self, request: RequestId, outcome: Outcome) {
        let Some(Caller::AcquireAll { reply, keep_alive }) = self.callers.remove(&request) else {
            return;
        };
        let result = match outcome {
            Outcome::GrantedAll(leases) => {
                // Every lease taken into hand first (none left unreleased
                // should the driver be stopping), then all or none given.
                let held: Vec<Option<HeldLease>> =
                    leases.into_iter().map(|lease| self.held(lease, keep_alive)).collect();
                held.into_iter()
                    .collect::<Option<Vec<_>>>()
                    .map(Some)
                    .ok_or(Error::Stopped)
            }
            Outcome::ExceededAt(index) => Err(self.exceeded(Some(index))),
            Outcome::Exceeded | Outcome::Shed(_) => Err(self.exceeded(None)),
            Outcome::Granted(lease) => {
                self.client.release(now(), lease);
                Err(Error::Stopped)
            }
            Outcome::Unavailable(reason) => Err(Error::Unavailable { reason }),
            Outcome::FailOpen(reason) => {
                self.failed_open(&reason);
                Ok(None)
            }
        };
        let _ = reply.send(result);
    }

    /// Logs a fail-open, at most once per throttle period.
    fn failed_open(&mut self, reason: &inflight_core::Unavailable) {
        if let Some(suppressed) = self.fail_open_log.admit(now()) {
            let reason = crate::error::chain(reason);
            tracing::warn!(
                %reason,
                suppressed,
                "inflight: Redis unavailable; letting requests through unenforced (one line per {}s; `suppressed` counts those left out)",
                crate::throttle::EVERY.as_secs()
            );
        }
    }

    /// Hands a renewal's outcome to its caller.
    fn on_renewed(&mut self, request: RequestId, renewal: Renewal) {
        let Some(Caller::Renew(reply)) = self.callers.remove(&request) else {
            // Unreachable, as for acquires; a renewal owes nothing.
            tracing::error!(?request, "inflight: a renewal outcome with no caller");
            return;
        };
        let result = match renewal {
            Renewal::Extended(lease) => Ok(lease),
            Renewal::Lost => {
                tracing::warn!(
                    request = request.get(),
                    "inflight: renewal found the lease gone; the slot is no longer held"
                );
                Err(RenewError::Lost)
            }
            Renewal::Unavailable(reason) => Err(RenewError::Unavailable { reason }),
        };
        let _ = reply.send(result);
    }

    /// Tells whoever waits on `lease`'s release how it went.
    fn release_done(&mut self, lease: LeaseId, result: Result<(), ReleaseError>) {
        if let Some(done) = self.release_waiters.remove(&lease) {
            let _ = done.send(result);
        }
    }

    /// A connection attempt failed: the first one ends `connect()` with an
    /// error; later ones are retried by the core.
    fn on_connect_failed(&mut self, id: ConnectionId, error: ConnectionError) {
        let addr = servers(&self.client.config().servers);
        if let Some(startup) = self.startup.take() {
            let reason = self.last_io_error.clone();
            let timeout = self.client.config().connect_timeout;
            let _ = startup.send(Err(ConnectError::at_start(addr, error, reason, timeout)));
            self.failed_start = true;
        } else {
            if let Some(suppressed) = self.connect_failed_log.admit(now()) {
                tracing::warn!(
                    connection = id.get(),
                    %error,
                    %addr,
                    suppressed,
                    "inflight: connecting to Redis failed; retrying with backoff (one line per {}s; `suppressed` counts those left out)",
                    crate::throttle::EVERY.as_secs()
                );
            }
        }
    }
}

/// The server, or the cluster's seeds, for messages.
fn servers(servers: &Servers) -> String {
    match servers {
        Servers::Standalone(endpoint) => endpoint.to_string(),
        Servers::Cluster { seeds, .. } => {
            let seeds: Vec<String> = seeds.iter().map(ToString::to_string).collect();
            format!("cluster seeds {}", seeds.join(", "))
        }
        Servers::Sentinel { sentinels, master, .. } => {
            let sentinels: Vec<String> = sentinels.iter().map(ToString::to_string).collect();
            format!("sentinels {} (master {master})", sentinels.join(", "))
        }
        other => format!("{other:?}"),
    }
}
