//! # inflight-tokio
//!
//! Exact, fleet-wide in-flight concurrency limits stored in Redis, for tokio
//! services. Every replica shares one limit per key; a request takes a
//! [`Permit`] before it starts and gives it back when it ends; leases expire so
//! a crashed replica's slots come back.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use inflight_tokio::{Error, Key, Limiter};
//!
//! let limiter = Limiter::builder("redis://127.0.0.1:6379")
//!     .default_limit(50)
//!     .lease_ttl(Duration::from_secs(30))
//!     .timeout(Duration::from_millis(100))
//!     .connect()
//!     .await?;
//! match limiter.acquire(&Key::new("tenant", "acme")?).await {
//!     Ok(permit) => { /* serve the request; dropping `permit` releases the slot */ drop(permit) }
//!     Err(Error::Exceeded { .. }) => { /* 429 */ }
//!     Err(other) => { /* 503: {other} */ }
//! }
//! # Ok(()) }
//! ```
//!
//! ## TLS
//! With the `tls` feature, `rediss://` URLs connect over TLS (rustls with
//! ring), checking the server's certificate against the URL's host name or IP
//! address and Mozilla's root set; `Builder::tls_root_certificates` trusts
//! your own CA instead, `Builder::tls_client_certificate` presents a client
//! certificate. Without the feature a `rediss://` URL is refused at `connect`.
//!
//! ## Redis Cluster
//! [`Builder::cluster`] (or [`Limiter::cluster_builder`] with several seed
//! URLs) routes every request to the primary that owns its key's slot, with
//! one connection per primary, and follows `MOVED`, `ASK` and `TRYAGAIN`
//! while slots migrate or fail over. A cluster node reached without it is
//! refused at `connect` ([`ConnectError::ClusterMode`]).
//!
//! ## Waiting for a slot
//! [`Limiter::acquire_wait`] (or [`Limiter::acquire_opts`] with
//! [`Acquire::wait`]) waits up to a deadline instead of failing at once:
//! first come, first served across the whole fleet (the key's queue lives
//! in Redis), woken by releases over a subscription the driver keeps, with
//! no polling. A wait Redis expects to outlast the deadline is refused as
//! soon as it is expected to (at once, or at a later check) with
//! `Error::Exceeded { shed: true, retry_after: estimate }`. Dropping the
//! future takes the waiter out of the queue. A zero wait fails fast.
//!
//! ## Tower middleware
//! With the `tower` feature, `tower::InflightLayer` limits an HTTP
//! service (axum, hyper, tonic) per key in one line, holding the permit
//! until the response body ends, and `tower::PermitLayer` any other
//! service. See the `tower` module.
//!
//! ## Cancellation safety
//! The acquire future may be dropped at any point (a `select!`, a timeout, a
//! client hanging up). The driver is told, and should Redis grant the lease
//! anyway, it is released. Replies can never shift onto the wrong request:
//! the connection's request FIFO lives in the sans-IO core
//! ([`inflight_core::Client`]), not in the caller's future.
//!
//! ## Metrics (crate `metrics`)
//! Every series exists, at 0, from a limiter's start (also a lazy one that
//! never connects), is described (unit, help), and carries a `namespace`
//! label when `Builder::metrics_namespace` is set; never the subject. Names
//! are in [`metric_names`]; `docs/operations.md` says what each one means
//! for an alert.
//!
//! Counters: `inflight_acquire_granted_total`, `inflight_acquire_denied_total`,
//! `inflight_acquire_unavailable_total`, `inflight_acquire_fail_open_total`,
//! `inflight_acquire_shed_total`, `inflight_acquire_recovering_total`,
//! `inflight_acquire_not_replicated_total`, `inflight_compensations_total`,
//! `inflight_release_retries_total`, `inflight_releases_abandoned_total`,
//! `inflight_renewals_total`, `inflight_leases_lost_total`,
//! `inflight_keep_alive_renewals_total`, `inflight_keep_alive_lost_total`,
//! `inflight_wake_ups_total`, `inflight_reclaimed_units_total`,
//! `inflight_connections_replaced_total`, `inflight_server_warnings_total`,
//! `inflight_data_loss_detected_total`, `inflight_leases_restored_total`,
//! `inflight_over_admissions_detected_total`, `inflight_cluster_moved_total`,
//! `inflight_cluster_ask_total`, `inflight_cluster_try_again_total`,
//! `inflight_cluster_topology_refreshes_total`, `inflight_primary_switches_total`,
//! `inflight_sentinel_errors_total`.
//!
//! Gauges (each the sum over the process's limiters with the same labels,
//! set, never below 0): `inflight_connections_up`,
//! `inflight_acquires_in_flight`, `inflight_acquires_waiting`.
//!
//! Histograms: `inflight_acquire_seconds` (labelled `outcome`: `granted`,
//! `denied`, `shed`, `unavailable`, `fail_open`),
//! `inflight_acquire_wait_seconds`.
//!
//! ## Tracing
//! `info` for each connection made and the driver stopping; `warn` for a
//! retired connection, a release that gave up, a data loss, a drain that gave
//! up, and (at most once per 10 s each, with a count of those left out) a
//! failed reconnect and a fail-open admission; `debug`/`trace` for detail.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// docs.rs marks the items a feature (TLS) adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod apart;
mod builder;
#[cfg(not(madsim))]
#[doc(hidden)]
pub mod cli;
mod clock;
mod connector;
mod drained;
mod driver;
mod error;
mod holds;
mod limiter;
mod mailbox;
mod news;
mod permit;
mod permits;
mod socket;
mod telemetry;
mod throttle;
#[cfg(all(feature = "tls", not(madsim)))]
mod tls;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use apart::{EitherIo, SentinelsApart};
pub use builder::Builder;
#[cfg(all(unix, not(madsim)))]
pub use connector::UnixConnector;
pub use connector::{tcp_endpoint, Connector, TcpConnector};
pub use drained::Drained;
pub use error::{ConnectError, Error, ReleaseError, RenewError};
pub use inflight_core::{
    ClaimError, CompositeError, ConfigError, ConnectionError, DataLoss, Endpoint, Holder, Key, KeyError, Label,
    LabelError, LeaseId, ProtocolError, Reassertion, Recovery, ReleaseFailure, ReleasePolicy, ReplicaAcks,
    SentinelError, ServerError, ServerErrorKind, Stats, Unavailable, UnavailablePolicy, MAX_LABEL_LEN, MAX_WEIGHT,
};
pub use limiter::reads::{BusyKeys, Usage, MAX_HOLDERS, MAX_SCANNED_KEYS};
pub use limiter::{Acquire, Limiter};
pub use news::Lost;
pub use permit::Permit;
pub use permits::Permits;

/// The crate README's code compiles as written.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use telemetry::names as metric_names;
