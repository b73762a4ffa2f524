//! The layer for any request type (gRPC stubs, message handlers, clients):
//! the permit lives as long as the response future.

use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use crate::tower::admit::Gate;
use crate::tower::{Extract, Rejection, ResponseFuture};
use crate::Limiter;

/// A tower [`Layer`] for services of any request type: each call runs with
/// a permit keyed by the extractor, held until the inner response future
/// completes (or is dropped). A rejection is [`PermitError::Rejected`],
/// for the caller to map (to a gRPC status, a retry, a queue).
#[derive(Clone, Debug)]
pub struct PermitLayer<E> {
    gate: Gate,
    extract: E,
}

impl<E> PermitLayer<E> {
    /// Limits with `limiter`, keyed by `extract` (any
    /// `Fn(&Request) -> Decision`).
    pub fn new(limiter: Limiter, extract: E) -> Self {
        Self {
            gate: Gate::new(limiter),
            extract,
        }
    }
}

impl<E> PermitLayer<E> {
    /// Waits up to `max_wait` for a slot of a full key (first come, first
    /// served across the fleet) instead of rejecting at once.
    pub fn wait_up_to(mut self, max_wait: std::time::Duration) -> Self {
        self.gate = self.gate.waiting(max_wait);
        self
    }
}

impl<S, E: Clone> Layer<S> for PermitLayer<E> {
    type Service = PermitService<S, E>;

    fn layer(&self, inner: S) -> Self::Service {
        PermitService {
            inner,
            gate: self.gate.clone(),
            extract: self.extract.clone(),
        }
    }
}

/// The service of [`PermitLayer`].
#[derive(Clone, Debug)]
pub struct PermitService<S, E> {
    inner: S,
    gate: Gate,
    extract: E,
}

/// What a [`PermitService`] call fails with.
#[derive(Debug)]
pub enum PermitError<E> {
    /// The layer did not run the request.
    Rejected(Rejection),
    /// The inner service failed.
    Service(E),
}

impl<E: std::fmt::Display> std::fmt::Display for PermitError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PermitError::Rejected(rejection) => rejection.fmt(f),
            PermitError::Service(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for PermitError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PermitError::Rejected(rejection) => rejection.source(),
            PermitError::Service(error) => error.source(),
        }
    }
}

impl<S, E, Request> Service<Request> for PermitService<S, E>
where
    S: Service<Request> + Clone + Send + 'static,
    S::Future: Send,
    E: Extract<Request>,
    Request: Send + 'static,
{
    type Response = S::Response;
    type Error = PermitError<S::Error>;
    type Future = ResponseFuture<Result<S::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(PermitError::Service)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let decision = self.extract.extract(&request);
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        Box::pin(async move {
            let held = gate.admit(decision).await.map_err(PermitError::Rejected)?;
            let response = inner.call(request).await.map_err(PermitError::Service);
            drop(held);
            response
        })
    }
}
