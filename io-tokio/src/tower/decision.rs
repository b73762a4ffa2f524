//! Which limit a request counts against: the extractor's [`Decision`].

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use inflight_core::Key;

/// What the layer does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Count it against a key: it runs only with a permit.
    Limit(Limited),
    /// Count it against every one of these keys, all or nothing (a
    /// tenant's, a route's and the whole service's limit): it runs only with
    /// a slot of each (see [`Limiter::acquire_all`](crate::Limiter::acquire_all)),
    /// and a rejection names the key that was full. Made by
    /// [`Decision::and`] and [`AllOf`].
    LimitAll(Vec<Limited>),
    /// Let it through, not limited (health checks, internal callers).
    Pass,
    /// Refuse it without asking Redis, because it cannot be attributed (no
    /// tenant header, say): HTTP 400 with the default rejection, the reason
    /// as its body.
    Refuse(Cow<'static, str>),
}

/// A key to count a request against, and optionally a limit for this
/// request alone (so that tiers and routes need no second layer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    key: Key,
    limit: Option<u32>,
}

impl Limited {
    /// Under the limiter's default limit.
    pub fn new(key: Key) -> Self {
        Self { key, limit: None }
    }

    /// Under `limit` instead of the default. A limit of zero is a
    /// programming error: the request is rejected as misconfigured (500).
    pub fn with_limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The key counted against.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The limit for this request, if not the default.
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }
}

impl Decision {
    /// Count the request against `namespace`/`subject` under the default
    /// limit; an invalid key (empty, too long) refuses the request with the
    /// key's error as the reason.
    pub fn key(namespace: impl Into<String>, subject: impl Into<String>) -> Self {
        match Key::new(namespace, subject) {
            Ok(key) => Decision::Limit(Limited::new(key)),
            Err(error) => Decision::Refuse(error.to_string().into()),
        }
    }

    /// This decision and `other`, for a request that falls under both: a
    /// refusal if either refuses, the other's if one passes, and both keys
    /// (all or nothing) if both limit.
    pub fn and(self, other: Decision) -> Self {
        match (self, other) {
            (Decision::Refuse(reason), _) | (_, Decision::Refuse(reason)) => Decision::Refuse(reason),
            (Decision::Pass, decision) | (decision, Decision::Pass) => decision,
            (first, second) => Decision::LimitAll(first.into_limits().chain(second.into_limits()).collect()),
        }
    }

    /// The keys a limiting decision counts against.
    fn into_limits(self) -> impl Iterator<Item = Limited> {
        match self {
            Decision::Limit(limited) => vec![limited],
            Decision::LimitAll(all) => all,
            Decision::Pass | Decision::Refuse(_) => Vec::new(),
        }
        .into_iter()
    }

    /// Sets the limit for this request if it is limited by one key;
    /// otherwise changes nothing.
    pub fn with_limit(self, limit: u32) -> Self {
        match self {
            Decision::Limit(limited) => Decision::Limit(limited.with_limit(limit)),
            other => other,
        }
    }

    /// Refuse the request, saying why.
    pub fn refuse(reason: impl Into<Cow<'static, str>>) -> Self {
        Decision::Refuse(reason.into())
    }
}

impl From<Key> for Decision {
    fn from(key: Key) -> Self {
        Decision::Limit(Limited::new(key))
    }
}

impl From<Limited> for Decision {
    fn from(limited: Limited) -> Self {
        Decision::Limit(limited)
    }
}

/// Maps a request to a [`Decision`]. Any `Fn(&Request) -> Decision` is one;
/// [`FromHeader`] and [`FromExtension`] are ready-made for HTTP.
pub trait Extract<Request>: Clone + Send + Sync + 'static {
    /// Decides for one request, before any of it is served.
    fn extract(&self, request: &Request) -> Decision;
}

impl<F, Request> Extract<Request> for F
where
    F: Fn(&Request) -> Decision + Clone + Send + Sync + 'static,
{
    fn extract(&self, request: &Request) -> Decision {
        self(request)
    }
}

/// Several extractors together: a request counts against every key they
/// name, all or nothing ([`Decision::and`] of theirs, in order), so one
/// layer enforces a tenant's, a route's and the service's limit at once.
///
/// ```
/// use inflight_tokio::tower::{AllOf, Decision, FromHeader};
///
/// let tenant = FromHeader::new(http::HeaderName::from_static("x-tenant"), "tenant").with_limit(50);
/// let service = |_: &http::Request<()>| Decision::key("service", "api").with_limit(1_000);
/// let both = AllOf((tenant, service));
/// # let _ = both;
/// ```
#[derive(Clone, Debug)]
pub struct AllOf<T>(pub T);

impl<R, A: Extract<R>, B: Extract<R>> Extract<R> for AllOf<(A, B)> {
    fn extract(&self, request: &R) -> Decision {
        let (a, b) = &self.0;
        a.extract(request).and(b.extract(request))
    }
}

impl<R, A: Extract<R>, B: Extract<R>, C: Extract<R>> Extract<R> for AllOf<(A, B, C)> {
    fn extract(&self, request: &R) -> Decision {
        let (a, b, c) = &self.0;
        a.extract(request).and(b.extract(request)).and(c.extract(request))
    }
}

/// What an HTTP extractor decides when its header or extension is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenMissing {
    /// Refuse the request (HTTP 400): every request must be attributable.
    #[default]
    Refuse,
    /// Let it through, not limited.
    Pass,
}

/// Counts each request against the value of one header, under a namespace:
/// `FromHeader::new(HeaderName::from_static("x-tenant"), "tenant")` counts a request with
/// `x-tenant: acme` against `tenant`/`acme`. A value that is not UTF-8 or
/// not a valid key subject refuses the request.
#[derive(Clone, Debug)]
pub struct FromHeader {
    header: http::HeaderName,
    namespace: Arc<str>,
    limit: Option<u32>,
    missing: WhenMissing,
}

impl FromHeader {
    /// Keyed by `header`'s value under `namespace`; a request without the
    /// header is refused unless [`FromHeader::when_missing`] says otherwise.
    pub fn new(header: http::HeaderName, namespace: &str) -> Self {
        Self {
            header,
            namespace: namespace.into(),
            limit: None,
            missing: WhenMissing::Refuse,
        }
    }

    /// A limit for every request this extractor keys, instead of the
    /// limiter's default.
    pub fn with_limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// What a request without the header gets.
    pub fn when_missing(mut self, missing: WhenMissing) -> Self {
        self.missing = missing;
        self
    }
}

impl<B> Extract<http::Request<B>> for FromHeader {
    fn extract(&self, request: &http::Request<B>) -> Decision {
        let Some(value) = request.headers().get(&self.header) else {
            return missing(self.missing, || format!("the request has no {} header", self.header));
        };
        let Ok(subject) = value.to_str() else {
            return Decision::refuse(format!("the {} header is not visible ASCII", self.header));
        };
        let decision = Decision::key(&*self.namespace, subject);
        match self.limit {
            Some(limit) => decision.with_limit(limit),
            None => decision,
        }
    }
}

/// Decides from a value a previous layer or the router put in the request's
/// extensions: axum's `MatchedPath` (with `Router::route_layer`), an
/// authenticated principal, a tier. The closure returns the decision, so
/// per-route or per-tier limits are one `match`.
///
/// ```
/// # #[derive(Clone)] struct Tenant { id: String, premium: bool }
/// use inflight_tokio::tower::{Decision, FromExtension};
///
/// let by_tenant = FromExtension::new(|tenant: &Tenant| {
///     Decision::key("tenant", tenant.id.clone()).with_limit(if tenant.premium { 50 } else { 5 })
/// });
/// ```
pub struct FromExtension<T, F> {
    decide: F,
    missing: WhenMissing,
    extension: PhantomData<fn(&T)>,
}

impl<T, F> FromExtension<T, F>
where
    F: Fn(&T) -> Decision,
{
    /// Decides with `decide` from the request's `T`; a request without one
    /// is refused unless [`FromExtension::when_missing`] says otherwise.
    pub fn new(decide: F) -> Self {
        Self {
            decide,
            missing: WhenMissing::Refuse,
            extension: PhantomData,
        }
    }

    /// What a request without a `T` gets.
    pub fn when_missing(mut self, missing: WhenMissing) -> Self {
        self.missing = missing;
        self
    }
}

impl<T, F: Clone> Clone for FromExtension<T, F> {
    fn clone(&self) -> Self {
        Self {
            decide: self.decide.clone(),
            missing: self.missing,
            extension: PhantomData,
        }
    }
}

impl<T, F> std::fmt::Debug for FromExtension<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromExtension")
            .field("extension", &std::any::type_name::<T>())
            .field("missing", &self.missing)
            .finish_non_exhaustive()
    }
}

impl<B, T, F> Extract<http::Request<B>> for FromExtension<T, F>
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> Decision + Clone + Send + Sync + 'static,
{
    fn extract(&self, request: &http::Request<B>) -> Decision {
        match request.extensions().get::<T>() {
            Some(value) => (self.decide)(value),
            None => missing(self.missing, || {
                format!("the request carries no {}", std::any::type_name::<T>())
            }),
        }
    }
}

fn missing(missing: WhenMissing, reason: impl FnOnce() -> String) -> Decision {
    match missing {
        WhenMissing::Pass => Decision::Pass,
        WhenMissing::Refuse => Decision::refuse(reason()),
    }
}
