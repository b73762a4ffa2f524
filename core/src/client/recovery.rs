//! Recovery after lost lease data. A handshake that finds its server lost
//! data (see `identity`) reports it, writes back every lease this client
//! holds there before the connection takes anything new, and holds new
//! grants for the recovery window: on the server (standalone: a hold key
//! that every client's acquire script honours, so replicas that reconnect
//! later, or that never knew the server, grant nothing either) and in this
//! client, for that node.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error_class::unexpected;
use super::held::HeldLeases;
use super::network::Network;
use super::outbox::Outbox;
use super::released::RecentReleases;
use super::request::{Reassert, ReleaseJob, Request, Step};
use super::topology::Route;
use crate::config::Config;
use crate::event::{ConnectionError, DataLoss, Event, Reassertion};
use crate::lease_id::LeaseId;
use crate::resp::Frame;
use crate::scripts::STALE;
use crate::server_error::ServerErrorKind;

/// What recovery after a data loss works from: the leases callers hold
/// now (to write back) and the keys it marks and holds servers with.
#[derive(Debug)]
pub(super) struct RecoveryState {
    pub(super) held: HeldLeases,
    /// The releases Redis confirmed lately, to repeat.
    pub(super) released: RecentReleases,
    pub(super) keys: RecoveryKeys,
}

/// The keys recovery uses on a standalone server, outside every subject's
/// hash tag (`{prefix}:node`, `{prefix}:recovery`; subject keys are
/// `{prefix}:{...}:...`, so none can collide with them).
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
        // One primary holds every key standalone and behind Sentinel.
        let standalone = !config.servers.is_cluster();
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

impl RecoveryState {
    pub(super) fn new(config: &Config) -> Self {
        Self {
            held: HeldLeases::default(),
            released: RecentReleases::default(),
            keys: RecoveryKeys::new(config),
        }
    }

    /// Every step of `node`'s handshake is answered: if its server lost
    /// lease data since this client last saw it (checked once per
    /// connection), the loss is reported and, with recovery on (`window`),
    /// the writes that bring back what is held there are returned, due by
    /// the instant returned with them (more steps of the handshake, on a
    /// fresh budget); new grants on `node` are held for the window. `None`:
    /// nothing to write, the connection may be made ready.
    pub(super) fn handshake_writes(
        &mut self,
        now: Instant,
        node: usize,
        net: &mut Network,
        config: &Config,
        window: Option<Duration>,
        out: &mut Outbox,
    ) -> Option<(Vec<Request>, Instant)> {
        let conn = net.nodes[node].connection.as_mut().expect("a handshake just ended");
        if std::mem::replace(&mut conn.recovery_checked, true) {
            return None;
        }
        let loss = net.loss_on(node)?;
        let conn = net.nodes[node].connection.as_ref().expect("a handshake just ended");
        // Each write-back carries its holder's expiry and a valid-until, in
        // this server's clock (read by the handshake just done). Without a
        // reading (never, after a full handshake) they are written stale:
        // refused, and their holders told (`Unconfirmed`).
        let valid_until = now + config.request_liveness;
        let clock = conn.clock;
        let runnable_until = valid_until + clock.map_or(Duration::ZERO, |clock| clock.margin(valid_until));
        let valid_until_ms = clock.map_or(0, |clock| clock.server_ms(valid_until));
        let jobs: Vec<Reassert> = match window {
            Some(_) => self
                .held
                .on(now, |keys| net.owns(node, keys.slot()))
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
            self.held.reasserting(&job.lease, valid_until_ms, runnable_until);
        }
        out.stats.data_losses += 1;
        out.event(Event::DataLoss {
            connection: conn.id(),
            loss,
            held: jobs.len(),
        });
        let window = window?;
        let until = now + window;
        let target = &mut net.nodes[node];
        target.holding_until = Some(target.holding_until.map_or(until, |at| at.max(until)));
        let mut writes = Vec::with_capacity(1 + jobs.len());
        if !self.keys.hold.is_empty() {
            writes.push(Request::Handshake(Step::Hold));
        }
        // Releases first: a lease the failover brought back must not make
        // a written-back one look over its limit.
        let again = self.released.on(now, window, |keys| net.owns(node, keys.slot()));
        writes.extend(
            again
                .into_iter()
                .map(|(keys, leases)| Request::ReleaseAgain(keys, leases)),
        );
        writes.extend(jobs.into_iter().map(Request::Reassert));
        if writes.is_empty() {
            return None;
        }
        // A fresh budget: the handshake's own may be nearly spent.
        let deadline = now + config.connect_timeout;
        let conn = net.nodes[node].connection.as_mut().expect("a handshake just ended");
        conn.more_steps(deadline, writes.len());
        Some((writes, deadline))
    }

    /// Keeps a caller's release `node` confirmed (its lease live at most
    /// until `until`), for a recovery to repeat if it came within `horizon`
    /// (the recovery window; none: recovery is off) of the node's last (see
    /// `released`).
    pub(super) fn remember_release(&mut self, now: Instant, horizon: Option<Duration>, node: usize, job: &ReleaseJob) {
        if let Some(horizon) = horizon {
            let lease = job.lease.clone();
            self.released
                .confirmed(now, horizon, node, lease, &job.keys, job.deadline);
        }
    }

    /// The reply to releasing lately released leases again (`RELEASE`): how
    /// many units were back (a failover had lost their release; 0 for an
    /// error: the leases then expire at their TTL, as they would have
    /// without this). Those confirmed are remembered again, for a server
    /// that may fail over in turn.
    pub(super) fn released_again(
        &mut self,
        now: Instant,
        node: usize,
        leases: Vec<LeaseId>,
        frame: Frame,
    ) -> Result<u64, ConnectionError> {
        match frame {
            Frame::Integer(back) if (0..=leases.iter().map(|l| i64::from(l.weight())).sum()).contains(&back) => {
                self.released.confirmed_again(now, node, &leases);
                Ok(back as u64)
            }
            Frame::Error(_) => Ok(0),
            other => Err(unexpected("release again", &other)),
        }
    }
}

/// The reply to writing back one held lease: `{status, own id}`.
pub(super) fn reassertion(job: &Reassert, frame: &Frame) -> Result<Reassertion, ConnectionError> {
    Ok(match frame {
        Frame::Array(items) => match &items[..] {
            [Frame::Integer(status), Frame::BulkString(echo)] if *echo == job.lease_bytes => match status {
                1 => Reassertion::Survived,
                2 => Reassertion::Restored,
                3 => Reassertion::OverLimit,
                -1 => Reassertion::GivenBack,
                &STALE => Reassertion::Unconfirmed,
                _ => return Err(unexpected("reassert", frame)),
            },
            [Frame::Integer(_), Frame::BulkString(_)] => return Err(ConnectionError::EchoMismatch),
            _ => return Err(unexpected("reassert", frame)),
        },
        // Refused (out of memory, say): the lease may be missing.
        Frame::Error(message) if ServerErrorKind::of(message) != ServerErrorKind::NoAuth => Reassertion::Unconfirmed,
        _ => return Err(unexpected("reassert", frame)),
    })
}

impl Network {
    /// Why `node`'s server may have lost lease data since this client last
    /// had a ready connection to it; or, for a node never seen before, since
    /// it was a replica of a primary this client knew (a cluster failover).
    fn loss_on(&self, node: usize) -> Option<DataLoss> {
        let conn = self.nodes[node].connection.as_ref()?;
        if conn.replica.is_some() {
            return None; // no lease lives on a replica, none is written there
        }
        let now = &conn.identity;
        match &self.nodes[node].identity {
            Some(before) => now.loss_since(before),
            None => self
                .nodes
                .iter()
                .filter_map(|other| other.identity.as_ref())
                .any(|other| now.continues(other))
                .then_some(DataLoss::FailedOver),
        }
    }

    /// Whether leases of `slot` live on `node`.
    fn owns(&self, node: usize, slot: u16) -> bool {
        !self.topology.is_cluster() || self.topology.route(slot) == Route::Node(node)
    }

    /// Whether new grants on `node` are held after a loss it found.
    pub(super) fn holding(&self, now: Instant, node: usize) -> bool {
        self.nodes[node].holding_until.is_some_and(|until| now < until)
    }
}
