//! Recovery after lost lease data. A handshake that finds its server lost
//! data (see `identity`) reports it, writes back every lease this client
//! holds there before the connection takes anything new, and holds new
//! grants for the recovery window: on the server (standalone: a hold key
//! that every client's acquire script honours, so replicas that reconnect
//! later, or that never knew the server, grant nothing either) and in this
//! client, for that node.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::held::HeldLeases;
use super::request::{Reassert, Request, Step};
use super::topology::Route;
use super::Client;
use crate::config::{Config, Servers};
use crate::event::{ConnectionError, DataLoss, Event, Reassertion};
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::resp::Frame;
use crate::scripts::STALE;
use crate::server_error::ServerErrorKind;

/// The keys recovery uses on a standalone server, outside every subject's
/// hash tag (`{prefix}:node`, `{prefix}:recovery`; subject keys are
/// `{prefix}:{...}:...`, so none can collide with them).
/// What recovery after a data loss works from: the leases callers hold
/// now (to write back) and the keys it marks and holds servers with.
#[derive(Debug)]
pub(super) struct RecoveryState {
    pub(super) held: HeldLeases,
    pub(super) keys: RecoveryKeys,
}

#[derive(Debug, Default)]
pub(super) struct RecoveryKeys {
    /// The lease-data marker.
    pub(super) marker: Bytes,
    /// The recovery hold; empty when the acquire scripts check none (a
    /// cluster, where one key cannot live on every node, or recovery off).
    pub(super) hold: Bytes,
}

impl RecoveryKeys {
    pub(super) fn new(config: &Config) -> Self {
        let standalone = matches!(config.servers, Servers::Standalone(_));
        let hold = match config.recovery_window() {
            Some(_) if standalone => Bytes::from(format!("{}:recovery", config.key_prefix)),
            _ => Bytes::new(),
        };
        Self {
            marker: Bytes::from(format!("{}:node", config.key_prefix)),
            hold,
        }
    }
}

impl Client {
    /// After the last handshake step of `node`'s connection: if its server
    /// lost lease data since this client last saw it, report it and, with
    /// recovery on, hold new grants and write back what is held there.
    /// Returns whether those writes are on their way (the connection stays
    /// in its handshake until they are answered).
    pub(super) fn recover(&mut self, now: Instant, node: usize) -> bool {
        let Some(loss) = self.loss_on(node) else {
            return false;
        };
        self.out.stats.data_losses += 1;
        let window = self.config.recovery_window().filter(|_| !self.bug_no_recovery());
        let conn = self.net.nodes[node]
            .connection
            .as_ref()
            .expect("a handshake just ended");
        // Each write-back carries its holder's expiry and a valid-until, in
        // this server's clock (read by the handshake just done). Without a
        // reading (never, after a full handshake) they are written stale:
        // refused, and their holders told (`Unconfirmed`).
        let valid_until = now + self.config.request_liveness;
        let clock = conn.clock;
        let runnable_until = valid_until + clock.map_or(Duration::ZERO, |clock| clock.margin(valid_until));
        let valid_until_ms = clock.map_or(0, |clock| clock.server_ms(valid_until));
        let jobs: Vec<Reassert> = match window {
            Some(_) => self
                .recovery
                .held
                .on(now, |keys| self.owns(node, keys.slot()))
                .into_iter()
                .map(|(lease, held)| Reassert {
                    lease_bytes: Bytes::from(lease.to_bytes()),
                    lease,
                    keys: held.keys.clone(),
                    limit: held.limit,
                    expiry_ms: clock.map_or(1, |clock| clock.upper_ms(held.expires_at)),
                    valid_until_ms,
                })
                .collect(),
            None => Vec::new(),
        };
        for job in &jobs {
            self.recovery
                .held
                .reasserting(&job.lease, valid_until_ms, runnable_until);
        }
        self.out.event(Event::DataLoss {
            connection: conn.id(),
            loss,
            held: jobs.len(),
        });
        let Some(window) = window else {
            return false;
        };
        let again: Vec<Request> = self
            .recovery
            .held
            .released_on(now, window, |keys| self.owns(node, keys.slot()))
            .into_iter()
            .map(|(keys, leases)| Request::ReleaseAgain(keys, leases))
            .collect();
        let until = now + window;
        let target = &mut self.net.nodes[node];
        target.holding_until = Some(target.holding_until.map_or(until, |at| at.max(until)));
        let hold = !self.recovery.keys.hold.is_empty();
        let steps = jobs.len() + again.len() + usize::from(hold);
        if steps == 0 {
            return false;
        }
        // A fresh budget: the handshake's own may be nearly spent.
        let deadline = now + self.config.connect_timeout;
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("a handshake just ended");
        conn.more_steps(deadline, steps);
        if hold {
            self.send(node, Request::Handshake(Step::Hold), deadline);
        }
        // Releases first: a lease the failover brought back must not make
        // a written-back one look over its limit.
        for request in again {
            self.send(node, request, deadline);
        }
        for job in jobs {
            self.send(node, Request::Reassert(job), deadline);
        }
        true
    }

    /// Why `node`'s server may have lost lease data since this client last
    /// had a ready connection to it; or, for a node never seen before, since
    /// it was a replica of a primary this client knew (a cluster failover).
    fn loss_on(&self, node: usize) -> Option<DataLoss> {
        let conn = self.net.nodes[node].connection.as_ref()?;
        if conn.replica.is_some() {
            return None; // no lease lives on a replica, none is written there
        }
        let now = &conn.identity;
        match &self.net.nodes[node].identity {
            Some(before) => now.loss_since(before),
            None => self
                .net
                .nodes
                .iter()
                .filter_map(|other| other.identity.as_ref())
                .any(|other| now.continues(other))
                .then_some(DataLoss::FailedOver),
        }
    }

    fn bug_no_recovery(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.bugs.no_recovery;
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Whether leases of `slot` live on `node`.
    fn owns(&self, node: usize, slot: u16) -> bool {
        !self.net.topology.is_cluster() || self.net.topology.route(slot) == Route::Node(node)
    }

    /// Whether new grants on `node` are held after a loss it found.
    pub(super) fn holding(&self, now: Instant, node: usize) -> bool {
        self.net.nodes[node].holding_until.is_some_and(|until| now < until)
    }

    /// The reply to releasing lately released leases again (`RELEASE`): how
    /// many units were back (a failover had lost their release), or an error
    /// (the leases then expire at their TTL, as they would have without this).
    pub(super) fn on_release_again_reply(
        &mut self,
        now: Instant,
        node: usize,
        keys: SubjectKeys,
        leases: Vec<LeaseId>,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        match frame {
            Frame::Integer(back) if (0..=leases.iter().map(|l| i64::from(l.weight())).sum()).contains(&back) => {
                self.out.stats.releases_repeated += back as u64;
                // Confirmed again, by a server that may fail over in turn.
                for lease in leases {
                    self.remember_release(now, lease, &keys);
                }
            }
            Frame::Error(_) => {}
            other => return Err(super::error_class::unexpected("release again", &other)),
        }
        self.step_done(now, node);
        Ok(())
    }

    /// The reply to writing back one held lease: `{status, own id}`.
    pub(super) fn on_reassert_reply(
        &mut self,
        now: Instant,
        node: usize,
        job: Reassert,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let outcome = match &frame {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo)] if *echo == job.lease_bytes => match status {
                    1 => Reassertion::Survived,
                    2 => Reassertion::Restored,
                    3 => Reassertion::OverLimit,
                    -1 => Reassertion::GivenBack,
                    &STALE => Reassertion::Unconfirmed,
                    _ => return Err(super::error_class::unexpected("reassert", &frame)),
                },
                [Frame::Integer(_), Frame::BulkString(_)] => return Err(ConnectionError::EchoMismatch),
                _ => return Err(super::error_class::unexpected("reassert", &frame)),
            },
            // Refused (out of memory, say): the lease may be missing.
            Frame::Error(message) if ServerErrorKind::of(message) != ServerErrorKind::NoAuth => {
                Reassertion::Unconfirmed
            }
            _ => return Err(super::error_class::unexpected("reassert", &frame)),
        };
        match outcome {
            Reassertion::Survived => self.out.stats.leases_survived += 1,
            Reassertion::Restored => self.out.stats.leases_restored += 1,
            Reassertion::OverLimit => {
                self.out.stats.leases_restored += 1;
                self.out.stats.over_admissions += 1;
            }
            Reassertion::Unconfirmed | Reassertion::GivenBack => {}
        }
        self.out.event(Event::Reasserted {
            lease: job.lease,
            outcome,
        });
        self.step_done(now, node);
        Ok(())
    }
}
