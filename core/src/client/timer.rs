//! Every deadline of the client, named: each part reports its own, and
//! [`Client::poll_timeout`](super::Client::poll_timeout) is the soonest of
//! them, with the reason it is due (which a test can ask for).

use std::time::Instant;

use super::connection::Connection;
use super::network::Network;

/// What a deadline of [`Client::poll_timeout`](crate::Client::poll_timeout) is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Timer {
    /// A caller's acquire timeout.
    Caller,
    /// A connection's connect deadline, or its oldest request's liveness.
    Connection,
    /// An idle connection's probe.
    Probe,
    /// A reconnect attempt after a failed one.
    Reconnect,
    /// A wake-up connection's deadline, or its next attempt.
    Subscriber,
    /// A release's retry, or its deadline.
    Release,
    /// A slot table refresh owed (Redis Cluster).
    Topology,
    /// A request sent back by `TRYAGAIN`, due again.
    Deferred,
    /// A waiting acquire's own check, or a `LEAVE` that stops mattering.
    Waiter,
    /// A kept-alive lease's renewal.
    KeepAlive,
    /// The sentinels' watch: its deadline, its next attempt, an owed ask.
    Sentinel,
}

impl Network {
    /// Every node's deadlines: its connection's (connect deadline or oldest
    /// request's liveness), its idle probe (only while `probing`), its next
    /// reconnect attempt and its wake-up connection's (while someone waits).
    pub(super) fn timers(
        &self,
        idle_probe: std::time::Duration,
        probing: bool,
        waiting: bool,
    ) -> impl Iterator<Item = (Option<Instant>, Timer)> + '_ {
        self.nodes.iter().flat_map(move |node| {
            let conn = node.connection.as_ref();
            [
                (conn.and_then(Connection::next_deadline), Timer::Connection),
                (
                    conn.and_then(|conn| conn.probe_at(idle_probe)).filter(|_| probing),
                    Timer::Probe,
                ),
                (node.reconnect.next_deadline(), Timer::Reconnect),
                (node.wake_ups.poll_timeout(waiting), Timer::Subscriber),
            ]
        })
    }
}

/// The soonest of `timers`, leaving out those of kind `except`.
pub(super) fn soonest(
    timers: impl Iterator<Item = (Option<Instant>, Timer)>,
    except: Option<Timer>,
) -> Option<(Instant, Timer)> {
    timers
        .filter(|(_, timer)| Some(*timer) != except)
        .filter_map(|(at, timer)| Some((at?, timer)))
        .min_by_key(|(at, _)| *at)
}
