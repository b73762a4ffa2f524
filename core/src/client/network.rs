//! The servers as the client sees them: every node heard of, which node
//! serves which slot, the requests waiting for a slot table or their
//! `TRYAGAIN` time.

use super::deferred::Deferred;
use super::node::Node;
use super::topology::Topology;
use crate::event::ConnectionId;

#[derive(Debug)]
pub(super) struct Network {
    /// The one server, or the cluster's seeds and every primary heard of
    /// since. Never removed, so an index names one node for the client's life.
    pub(super) nodes: Vec<Node>,
    /// Which node serves which subject.
    pub(super) topology: Topology,
    /// Acquires and renewals that a redirect sent back: to be routed again
    /// at their time, or once a slot table is known.
    pub(super) deferred: Deferred,
}

impl Network {
    pub(super) fn new(topology: Topology) -> Self {
        Self {
            nodes: Vec::new(),
            topology,
            deferred: Deferred::default(),
        }
    }

    /// The node whose current connection is `connection`.
    pub(super) fn node_of(&self, connection: ConnectionId) -> Option<usize> {
        self.nodes.iter().position(|node| node.has(connection))
    }
}
