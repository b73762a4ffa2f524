//! Tower middleware (feature `tower`): fleet-wide in-flight limits for
//! axum, hyper and tonic services in one line.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use inflight_tokio::tower::{FromHeader, InflightLayer};
//! use inflight_tokio::Limiter;
//!
//! let limiter = Limiter::builder("redis://127.0.0.1:6379").default_limit(20).connect().await?;
//! let per_tenant = InflightLayer::new(limiter, FromHeader::new("x-tenant".parse()?, "tenant"));
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(per_tenant);
//! # Ok(()) }
//! ```
//!
//! - [`InflightLayer`] is for HTTP services (`http::Request` →
//!   `http::Response`). The permit is held until the response **body** is
//!   finished or dropped, so a streaming response counts for as long as it
//!   streams and a client that hangs up mid-body frees its slot at once.
//!   (Tower's own `ConcurrencyLimit` lets go when the headers are ready.)
//!   Rejections are answered by a [`Reject`]: [`PlainText`] by default
//!   (429 for a full key, 503 when Redis cannot answer, 400 when the
//!   extractor refuses, each with `Retry-After` when one can be estimated),
//!   [`Grpc`] for tonic, or your own closure.
//! - [`PermitLayer`] is for any request type: the permit lives as long as
//!   the response future, and a rejection is a typed [`PermitError`].
//!
//! The extractor decides per request ([`Decision`]): a key to count
//! against (with a per-request limit if tiers or routes differ), pass (not
//! limited), or refuse. [`FromHeader`] and [`FromExtension`] (axum's
//! `MatchedPath`, an authenticated principal) are ready-made; any
//! `Fn(&Request) -> Decision` is one too.
//!
//! A fail-open permit (policy `Allow` while Redis is away) lets the request
//! through with no sign in the response. Cancel-safety is the limiter's:
//! the response future may be dropped anywhere (client gone, a timeout
//! layer) and nothing leaks.
//!
//! A response that streams longer than the lease TTL outlives its lease:
//! set `Builder::lease_ttl` above the longest response you serve.

mod admit;
mod any;
mod body;
mod decision;
mod http;
mod reject;

pub use admit::Admitted;
pub use any::{PermitError, PermitLayer, PermitService};
pub use body::InflightBody;
pub use decision::{AllOf, Decision, Extract, FromExtension, FromHeader, Limited, WhenMissing};
pub use http::{Inflight, InflightLayer, ResponseFuture};
pub use reject::{Grpc, PlainText, Reject, Rejection};
