//! One Redis node, as the client sees it: its current connection
//! generation, the backoff between attempts to open one, and the requests
//! waiting for its handshake. The `Client` talks to one node today; a
//! cluster client holds one per primary and routes each request to the
//! node that owns its subject's slot.

use std::collections::VecDeque;

use super::connection::Connection;
use super::reconnect::Reconnect;
use super::request::Op;

#[derive(Debug)]
pub(super) struct Node {
    /// The current generation; none while backing off after a failure.
    pub(super) connection: Option<Connection>,
    /// When to try again while there is no connection.
    pub(super) reconnect: Reconnect,
    /// Acquires and renewals waiting for the connection's handshake.
    pub(super) waiting: VecDeque<Op>,
}

impl Node {
    pub(super) fn new(reconnect: Reconnect) -> Self {
        Self {
            connection: None,
            reconnect,
            waiting: VecDeque::new(),
        }
    }

    /// Acquires and renewals waiting for this node or in flight on it.
    pub(super) fn in_flight(&self) -> usize {
        self.waiting.len() + self.connection.as_ref().map_or(0, Connection::in_flight)
    }
}
