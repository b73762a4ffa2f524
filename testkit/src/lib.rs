//! # inflight-testkit
//!
//! The test bench of `inflight`, kept out of the published `inflight-core`:
//!
//! - [`model`]: a reference model of the Redis lease set that speaks RESP
//!   and runs the same scripts' logic, for property tests, the simulator and
//!   the differential test against a real server;
//! - [`model_cluster`]: the model as a Redis Cluster (slots, `MOVED`, `ASK`);
//! - [`Pair`]: a real `Client` wired to the model through a simulated wire,
//!   with virtual time and an independent ledger;
//! - [`fuzzing`]: the bodies of the fuzz targets, shared with the corpus
//!   replay in the integration tests.
#![forbid(unsafe_code)]

pub mod fuzzing;

pub mod model;
pub mod model_cluster;
mod pair;

pub use pair::Pair;

use inflight_core::event::RequestId;
use inflight_core::lease_id::{LeaseId, LeaseIds};
use inflight_core::{Client, ConnectionId};

/// The lease id request `request` of the client made with `entropy` holds
/// if granted, for a plain acquire (weight 1, no label): a request's number
/// is its lease id's counter.
pub fn plain_lease_id(entropy: [u8; 16], request: RequestId) -> LeaseId {
    LeaseIds::new(entropy).id(request.get()).with_claim(1, None)
}

/// The client's first current connection (a standalone server's) and
/// whether it is ready.
pub fn connection(client: &Client) -> Option<(ConnectionId, bool)> {
    client.connections().next().map(|(id, _, ready)| (id, ready))
}
