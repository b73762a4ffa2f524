//! Why a request was not admitted, and how an HTTP layer answers it.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use inflight_core::{ConfigError, Key};

use crate::Error;

/// Why the layer did not run a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The key's limit is reached across the fleet (HTTP 429).
    #[error("the in-flight limit of {}/{} is reached", key.namespace(), key.subject())]
    Exceeded {
        /// The key that is full.
        key: Key,
        /// When a slot may have freed: the limiter's hint
        /// ([`Error::Exceeded`]).
        retry_after: Duration,
    },
    /// The limiter could not decide (HTTP 503): Redis unreachable, too
    /// slow, being recovered; or the limiter stopped.
    #[error("the limiter could not admit a request for {}/{}: {error}", key.namespace(), key.subject())]
    Unavailable {
        /// The key asked for.
        key: Key,
        /// What the limiter said.
        error: Error,
        /// When the limiter's settings say it may work again
        /// ([`Limiter::retry_after`](crate::Limiter::retry_after)).
        retry_after: Option<Duration>,
    },
    /// The extractor refused the request (HTTP 400).
    #[error("the request was refused: {reason}")]
    Refused {
        /// The extractor's reason.
        reason: Cow<'static, str>,
    },
    /// The extractor asked for a limit that cannot be (zero): a bug in the
    /// service, not the client's fault (HTTP 500).
    #[error("the limit asked for {}/{} is invalid: {error}", key.namespace(), key.subject())]
    Misconfigured {
        /// The key asked for.
        key: Key,
        /// What is wrong with the limit.
        error: ConfigError,
    },
}

impl Rejection {
    /// When the request may succeed if tried again, if anything tells.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Rejection::Exceeded { retry_after, .. } => Some(*retry_after),
            Rejection::Unavailable { retry_after, .. } => *retry_after,
            Rejection::Refused { .. } | Rejection::Misconfigured { .. } => None,
        }
    }

    /// The key the request was to count against (`None` if refused before
    /// it had one).
    pub fn key(&self) -> Option<&Key> {
        match self {
            Rejection::Exceeded { key, .. }
            | Rejection::Unavailable { key, .. }
            | Rejection::Misconfigured { key, .. } => Some(key),
            Rejection::Refused { .. } => None,
        }
    }

    /// The HTTP status the default answer uses: 429, 503, 400 or 500.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::Exceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Rejection::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Refused { .. } => StatusCode::BAD_REQUEST,
            Rejection::Misconfigured { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Turns a [`Rejection`] into the HTTP response the client gets. Any
/// `Fn(&Rejection) -> Response<Bytes>` is one; [`PlainText`] is the
/// default, [`Grpc`] answers gRPC clients.
pub trait Reject: Clone + Send + Sync + 'static {
    /// The response for one rejected request.
    fn reject(&self, rejection: &Rejection) -> Response<Bytes>;
}

impl<F> Reject for F
where
    F: Fn(&Rejection) -> Response<Bytes> + Clone + Send + Sync + 'static,
{
    fn reject(&self, rejection: &Rejection) -> Response<Bytes> {
        self(rejection)
    }
}

/// The default answer: [`Rejection::status`], a `Retry-After` (whole
/// seconds, rounded up) when one is known, and a short plain-text body.
/// The body says what kind of refusal it is, not why the limiter failed:
/// the service's internals are for its logs, not its clients.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainText;

impl Reject for PlainText {
    fn reject(&self, rejection: &Rejection) -> Response<Bytes> {
        let body = match rejection {
            // Which kind of limit was full ("tenant", "service"): what a
            // client can act on; the subject stays in the service's logs.
            Rejection::Exceeded { key, .. } => Cow::Owned(format!(
                "too many requests in flight for this {}; try again later\n",
                key.namespace()
            )),
            Rejection::Unavailable { .. } => Cow::Borrowed("the service cannot take requests now; try again later\n"),
            Rejection::Refused { reason } => Cow::Owned(format!("{reason}\n")),
            Rejection::Misconfigured { .. } => Cow::Borrowed("internal error\n"),
        };
        let mut response = Response::new(Bytes::from(body.into_owned()));
        *response.status_mut() = rejection.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(after) = rejection.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
        }
        response
    }
}

/// Answers as a gRPC server would (tonic behind the HTTP layer): HTTP 200
/// with no message and a `grpc-status` of `RESOURCE_EXHAUSTED` (limit
/// reached), `UNAVAILABLE`, `INVALID_ARGUMENT` (refused) or `INTERNAL`, and
/// `grpc-retry-pushback-ms` when a retry delay is known (gRPC clients with a
/// retry policy honour it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Grpc;

impl Reject for Grpc {
    fn reject(&self, rejection: &Rejection) -> Response<Bytes> {
        // Status codes from grpc/doc/statuscodes.md.
        let (status, message) = match rejection {
            Rejection::Exceeded { .. } => ("8", "too many requests in flight"),
            Rejection::Unavailable { .. } => ("14", "the service cannot take requests now"),
            Rejection::Refused { .. } => ("3", "the request cannot be attributed to a limit"),
            Rejection::Misconfigured { .. } => ("13", "internal error"),
        };
        let mut response = Response::new(Bytes::new());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from_static(status));
        headers.insert("grpc-message", HeaderValue::from_static(message));
        if let Some(after) = rejection.retry_after() {
            let millis = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            headers.insert("grpc-retry-pushback-ms", HeaderValue::from(millis));
        }
        response
    }
}

/// `Retry-After` counts whole seconds; round up, and never say 0 (which
/// would invite an immediate retry into the same full key).
fn whole_seconds(after: Duration) -> u64 {
    let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    seconds.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exceeded(retry_after: Duration) -> Rejection {
        Rejection::Exceeded {
            key: Key::new("tenant", "acme").unwrap(),
            retry_after,
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(40)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn plain_text_says_429_with_retry_after_when_known() {
        let response = PlainText.reject(&exceeded(Duration::from_millis(1500)));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn plain_text_keeps_the_limiters_reasons_out_of_the_body() {
        let rejection = Rejection::Unavailable {
            key: Key::new("tenant", "acme").unwrap(),
            error: Error::Stopped,
            retry_after: None,
        };
        let response = PlainText.reject(&rejection);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(!String::from_utf8_lossy(response.body()).contains("driver"));
    }

    #[test]
    fn grpc_answers_with_a_grpc_status_and_pushback() {
        let response = Grpc.reject(&exceeded(Duration::from_millis(250)));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "8");
        assert_eq!(response.headers()["grpc-retry-pushback-ms"], "250");
    }
}
