//! One Redis node, as the client sees it: where it listens, its current
//! connection generation, the backoff between attempts to open one, and the
//! requests waiting for its handshake. A standalone client holds one; a
//! cluster client holds one per node it has heard of (seeds and primaries)
//! and routes each request to the node that owns its subject's slot.

use std::collections::VecDeque;
use std::time::Instant;

use super::connection::Connection;
use super::identity::Identity;
use super::reconnect::Reconnect;
use super::request::Op;
use super::subscriber::WakeUps;
use crate::address::Endpoint;

#[derive(Debug)]
pub(super) struct Node {
    pub(super) endpoint: Endpoint,
    /// The current generation; none while backing off after a failure, or
    /// while nothing needs this node.
    pub(super) connection: Option<Connection>,
    /// When to try again while there is no connection.
    pub(super) reconnect: Reconnect,
    /// Acquires and renewals waiting for the connection's handshake.
    pub(super) waiting: VecDeque<Op>,
    /// Who the server was at the last handshake that made a connection
    /// ready: the next one is compared with it (see `identity`).
    pub(super) identity: Option<Identity>,
    /// New grants here are refused until then: this client found the
    /// server's lease data lost (see `recovery`).
    pub(super) holding_until: Option<Instant>,
    /// The wake-up connection, while someone waits on a subject here.
    pub(super) wake_ups: WakeUps,
}

impl Node {
    pub(super) fn new(endpoint: Endpoint, reconnect: Reconnect) -> Self {
        Self {
            endpoint,
            connection: None,
            reconnect,
            waiting: VecDeque::new(),
            identity: None,
            holding_until: None,
            wake_ups: WakeUps::default(),
        }
    }

    /// Acquires and renewals waiting for this node or in flight on it.
    pub(super) fn in_flight(&self) -> usize {
        self.waiting.len() + self.connection.as_ref().map_or(0, Connection::in_flight)
    }

    /// Whether its connection is ready for requests.
    pub(super) fn is_ready(&self) -> bool {
        self.connection.as_ref().is_some_and(Connection::is_ready)
    }

    /// Whether its current connection is `id`.
    pub(super) fn has(&self, id: crate::ConnectionId) -> bool {
        self.connection.as_ref().is_some_and(|c| c.id() == id)
    }
}
