//! The HTTP layer: `http::Request` in, `http::Response` out, the permit held
//! until the response body ends.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use crate::tower::admit::Gate;
#[cfg(feature = "fault-injection")]
use crate::tower::admit::Held;
use crate::tower::{Extract, InflightBody, PlainText, Reject};
use crate::Limiter;

/// The future of a layered service's response.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A tower [`Layer`] that runs each HTTP request with a permit of the
/// limiter, keyed by the extractor, and holds it until the response body is
/// finished or dropped. Rejections are answered by [`Reject`] (by default
/// [`PlainText`]: 429, 503 with `Retry-After`, 400).
///
/// ```no_run
/// # async fn run(limiter: inflight_tokio::Limiter) {
/// use inflight_tokio::tower::{FromHeader, InflightLayer};
///
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .layer(InflightLayer::new(limiter, FromHeader::new("x-tenant".parse().unwrap(), "tenant")));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct InflightLayer<E, R = PlainText> {
    gate: Gate,
    extract: E,
    reject: R,
    #[cfg(feature = "fault-injection")]
    bugs: inflight_core::InjectedBugs,
}

impl<E> InflightLayer<E> {
    /// Limits with `limiter`, keyed by `extract`; rejections answered by
    /// [`PlainText`].
    pub fn new(limiter: Limiter, extract: E) -> Self {
        Self {
            gate: Gate::new(limiter),
            extract,
            reject: PlainText,
            #[cfg(feature = "fault-injection")]
            bugs: inflight_core::InjectedBugs::default(),
        }
    }
}

impl<E, R> InflightLayer<E, R> {
    /// Waits up to `max_wait` for a slot of a full key (first come, first
    /// served across the fleet) instead of rejecting at once; a wait Redis
    /// expects to take longer is rejected at once, with its estimate as
    /// `Retry-After`.
    pub fn wait_up_to(mut self, max_wait: std::time::Duration) -> Self {
        self.gate = self.gate.waiting(max_wait);
        self
    }

    /// Answers rejections with `reject` instead.
    pub fn on_reject<R2: Reject>(self, reject: R2) -> InflightLayer<E, R2> {
        InflightLayer {
            gate: self.gate,
            extract: self.extract,
            reject,
            #[cfg(feature = "fault-injection")]
            bugs: self.bugs,
        }
    }

    /// Switches on deliberate bugs (`release_at_response_head`), for the
    /// simulator's self-test only.
    #[cfg(feature = "fault-injection")]
    pub fn inject_bugs(mut self, bugs: inflight_core::InjectedBugs) -> Self {
        self.bugs = bugs;
        self
    }
}

impl<S, E: Clone, R: Clone> Layer<S> for InflightLayer<E, R> {
    type Service = Inflight<S, E, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Inflight {
            inner,
            gate: self.gate.clone(),
            extract: self.extract.clone(),
            reject: self.reject.clone(),
            #[cfg(feature = "fault-injection")]
            bugs: self.bugs,
        }
    }
}

/// The service of [`InflightLayer`].
#[derive(Clone, Debug)]
pub struct Inflight<S, E, R = PlainText> {
    inner: S,
    gate: Gate,
    extract: E,
    reject: R,
    #[cfg(feature = "fault-injection")]
    bugs: inflight_core::InjectedBugs,
}

impl<S, E, R, B, ResBody> Service<Request<B>> for Inflight<S, E, R>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    E: Extract<Request<B>>,
    R: Reject,
    B: Send + 'static,
    ResBody: Body,
    ResBody::Data: From<bytes::Bytes>,
{
    type Response = Response<InflightBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let decision = self.extract.extract(&request);
        // The instance `poll_ready` readied is the one to call; a clone
        // takes its place here.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        let reject = self.reject.clone();
        #[cfg(feature = "fault-injection")]
        let release_at_head = self.bugs.release_at_response_head;
        Box::pin(async move {
            match gate.admit(decision).await {
                Ok(held) => {
                    request.extensions_mut().insert(held.admitted());
                    let response = inner.call(request).await?;
                    #[cfg(feature = "fault-injection")]
                    let held = if release_at_head { Held::nothing() } else { held };
                    Ok(response.map(|body| InflightBody::served(body, held)))
                }
                Err(rejection) => {
                    tracing::debug!(%rejection, "request rejected");
                    Ok(reject.reject(&rejection).map(InflightBody::rejected))
                }
            }
        })
    }
}
