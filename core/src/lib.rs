//! # inflight-core
//!
//! The sans-IO protocol of `inflight`: exact, fleet-wide in-flight concurrency
//! leases stored in Redis. Everything that decides anything lives here — RESP
//! framing, the Lua scripts, key layout, lease ids, the per-connection request
//! FIFO and the [`Client`] state machine — and none of it performs I/O, reads a
//! clock or draws randomness. Time is an argument; entropy is given once at
//! construction. A driver (see `inflight-tokio`) moves bytes and timers.
//!
//! Start with [`Client`]: its documentation is the contract between the core and
//! any driver.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod address;
pub mod client;
#[doc(hidden)]
pub mod cluster;
pub mod composite;
pub mod config;
pub mod event;
mod fault;
mod jitter;
pub mod key;
pub mod lease_id;
// The wire internals stay reachable for the test harness, the simulator and
// the fuzzers (which speak RESP with the core's own codec), but are not the
// library's API: a driver needs none of them.
#[doc(hidden)]
pub mod pipeline;
mod request_ids;
#[doc(hidden)]
pub mod resp;
#[doc(hidden)]
pub mod scripts;
mod sentinel_address;
mod server_clock;
mod server_error;
pub mod slot;

pub use address::{redact_url, Endpoint, ServerAddress};
pub use client::{Client, Timer};
pub use composite::CompositeError;
pub use config::{Config, ConfigError, Credentials, Recovery, ReleasePolicy, ReplicaAcks, Servers, UnavailablePolicy};
pub use event::{
    Action, ConnectionError, ConnectionId, DataLoss, Event, Holder, Inspection, KeysPage, Lease, LeaseLost, Outcome,
    Reassertion, ReleaseFailure, Renewal, RequestId, SentinelError, Stats, Transmit, Unavailable, Warning,
};
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use fault::InjectedBugs;
pub use key::{Key, KeyError};
pub use lease_id::{Claim, ClaimError, Label, LabelError, LeaseId, MAX_LABEL_LEN, MAX_WEIGHT};
pub use request_ids::{ForeignRequest, FreshRequest, RequestIds};
pub use resp::{ProtocolError, ReplyLimits};
pub use sentinel_address::{redact_sentinel_url, SentinelAddress, SENTINEL_PORT};
pub use server_error::{ServerError, ServerErrorKind};
