//! Callers that reach the limiter through the tower HTTP layer, as an axum
//! service's clients would: each request is an `http::Request` through
//! `InflightLayer` to a handler whose response body streams for a while.
//! The work is counted in the ledger from the handler's start to the end
//! (or drop) of its body, so S1 checks that the permit really lives as long
//! as the body. Clients read to the end, hang up mid-body, or give up before
//! the response head (mid-acquire).

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use inflight_core::InjectedBugs;
use inflight_tokio::tower::{Admitted, Decision, Inflight, InflightBody, InflightLayer, PlainText, Reject, Rejection};
use inflight_tokio::Limiter;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::scenario::ACQUIRE_TIMEOUT;

/// What one simulated HTTP request asks for.
#[derive(Clone, Debug)]
pub struct Call {
    who: String,
    key: &'static str,
    limit: u32,
    /// A second key the request also counts against, all or nothing.
    also: Option<(&'static str, u32)>,
    /// How long its response body streams.
    stream_for: Duration,
}

fn by_key(request: &Request<Call>) -> Decision {
    let call = request.body();
    let first = Decision::key("load", call.key).with_limit(call.limit);
    match call.also {
        Some((key, limit)) => first.and(Decision::key("load", key).with_limit(limit)),
        None => first,
    }
}

type Extractor = fn(&Request<Call>) -> Decision;

/// A 429 names the key that was full (`x-full`), so S4 counts it there.
fn reject(rejection: &Rejection) -> Response<Bytes> {
    let mut response = PlainText.reject(rejection);
    if let Rejection::Exceeded { key, .. } = rejection {
        if let Ok(full) = http::HeaderValue::from_str(key.subject()) {
            response.headers_mut().insert("x-full", full);
        }
    }
    response
}

type Rejecter = fn(&Rejection) -> Response<Bytes>;

/// The layered service one replica serves with.
pub type Served = Inflight<Handler, Extractor, Rejecter>;

/// The replica's service: the layer around the handler.
pub fn service(limiter: Limiter, bugs: InjectedBugs, ledger: Arc<Mutex<Ledger>>, at: fn() -> Duration) -> Served {
    InflightLayer::new(limiter, by_key as Extractor)
        .on_reject(reject as Rejecter)
        .inject_bugs(bugs)
        .layer(Handler { ledger, at })
}

/// Answers at once with a body that streams in three chunks; counts the
/// request as holding its key until that body ends or is dropped.
#[derive(Clone)]
pub struct Handler {
    ledger: Arc<Mutex<Ledger>>,
    at: fn() -> Duration,
}

impl Service<Request<Call>> for Handler {
    type Response = Response<Streaming>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Streaming>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Call>) -> Self::Future {
        let admitted = request
            .extensions()
            .get::<Admitted>()
            .cloned()
            .expect("the layer puts Admitted in every request it runs");
        let call = request.into_body();
        let at = self.at;
        let mut ledger = self.ledger.lock().unwrap();
        // The handler runs synchronously: the hold is in the body before
        // any await could drop it.
        let holding = if admitted.is_enforced() {
            let keys = std::iter::once(call.key).chain(call.also.map(|(key, _)| key));
            let leases = admitted
                .lease_ids()
                .iter()
                .map(|id| id.as_ref().map(ToString::to_string));
            let held: Vec<(&'static str, Option<String>)> = keys.zip(leases).collect();
            ledger.counters.granted += 1;
            ledger.counters.composites_granted += u64::from(held.len() > 1);
            for (key, lease) in &held {
                ledger.hold(at(), &call.who, key, lease.clone(), 1);
            }
            Some(Holding {
                ledger: Arc::clone(&self.ledger),
                at,
                who: call.who.clone(),
                held,
            })
        } else {
            ledger.counters.fail_open += 1;
            ledger.note(at(), format!("{} fails open on {}", call.who, call.key));
            None
        };
        std::future::ready(Ok(Response::new(Streaming {
            left: 3,
            every: call.stream_for / 3,
            sleep: None,
            holding,
        })))
    }
}

/// A request's work, counted in the ledger until dropped.
struct Holding {
    ledger: Arc<Mutex<Ledger>>,
    at: fn() -> Duration,
    who: String,
    /// Each key held, with its lease.
    held: Vec<(&'static str, Option<String>)>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut ledger = self.ledger.lock().unwrap();
        for (key, lease) in self.held.drain(..) {
            ledger.unhold((self.at)(), &self.who, key, lease, 1);
        }
    }
}

/// The handler's response body: three chunks, one every `every`.
pub struct Streaming {
    left: u8,
    every: Duration,
    sleep: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    holding: Option<Holding>,
}

impl Body for Streaming {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left == 0 {
            this.holding.take(); // the work is over before the body says so
            return Poll::Ready(None);
        }
        let every = this.every;
        let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        ready!(sleep.as_mut().poll(cx));
        this.sleep = None;
        this.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk")))))
    }
}

pub struct HttpCaller {
    pub who: String,
    pub service: Served,
    pub rng: Rng,
    pub keys: &'static [(&'static str, u32)],
    pub ledger: Arc<Mutex<Ledger>>,
    pub end: Instant,
    pub slack: Duration,
    pub at: fn() -> Duration,
}

impl HttpCaller {
    pub async fn run(mut self) {
        while Instant::now() < self.end {
            let first = self.rng.range(0, self.keys.len() as u64) as usize;
            let (key, limit) = self.keys[first];
            // One request in eight also counts against another key.
            let also = (self.keys.len() >= 2 && self.rng.chance(1, 8)).then(|| {
                let other = (first + 1 + self.rng.range(0, self.keys.len() as u64 - 1) as usize) % self.keys.len();
                self.keys[other]
            });
            {
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.acquires += 1;
                ledger.counters.composites += u64::from(also.is_some());
            }
            let call = Call {
                who: self.who.clone(),
                key,
                limit,
                also,
                stream_for: Duration::from_millis(self.rng.range(3, 300)),
            };
            let mut service = self.service.clone();
            if poll_fn(|cx| service.poll_ready(cx)).await.is_err() {
                unreachable!("the handler is always ready");
            }
            let started = Instant::now();
            let responding = service.call(Request::new(call.clone()));
            match self.rng.range(0, 10) {
                // Gives up before the response head: the response future is
                // dropped mid-acquire (a client gone, a timeout layer).
                0 => {
                    let patience = Duration::from_millis(self.rng.range(1, 60));
                    match tokio::time::timeout(patience, responding).await {
                        Ok(response) => self.settle(key, response, Some(Duration::ZERO)).await,
                        Err(_) => self.note(format!("{} gave up on {key}", self.who)),
                    }
                }
                // Hangs up mid-body.
                1 => {
                    let response = responding.await;
                    let stay = Duration::from_millis(self.rng.range(0, call.stream_for.as_millis() as u64 + 1));
                    self.settle(key, response, Some(stay)).await;
                }
                _ => {
                    let response = responding.await;
                    let took = started.elapsed();
                    if took > ACQUIRE_TIMEOUT + self.slack {
                        let detail = format!(
                            "{} waited {took:?} for a response head (timeout {ACQUIRE_TIMEOUT:?})",
                            self.who
                        );
                        self.ledger
                            .lock()
                            .unwrap()
                            .violate((self.at)(), "S3 bounded latency", detail);
                    }
                    self.settle(key, response, None).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(self.rng.range(1, 30))).await;
        }
    }

    /// Reads the response: the whole body, or only for `hang_up_after`.
    async fn settle(
        &mut self,
        key: &'static str,
        response: Result<Response<InflightBody<Streaming>>, Infallible>,
        hang_up_after: Option<Duration>,
    ) {
        let Ok(response) = response;
        let (at, who) = (self.at, self.who.clone());
        match response.status() {
            StatusCode::OK => {
                let mut body = response.into_body();
                let read = async {
                    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                        let Ok(_) = frame;
                    }
                };
                match hang_up_after {
                    Some(after) => {
                        if tokio::time::timeout(after, read).await.is_err() {
                            self.note(format!("{who} hangs up mid-body on {key}"));
                        }
                    }
                    None => read.await,
                }
            }
            StatusCode::TOO_MANY_REQUESTS => {
                let full = response.headers().get("x-full").and_then(|v| v.to_str().ok());
                let mut ledger = self.ledger.lock().unwrap();
                // The key the rejection names: one of the request's.
                let Some(full) = self.keys.iter().map(|(k, _)| *k).find(|k| Some(*k) == full) else {
                    let detail = format!("{who}: a 429 on {key} names no key of the request ({full:?})");
                    return ledger.violate(at(), "S4 honest errors", detail);
                };
                ledger.counters.denied += 1;
                ledger.exceeded(full);
                ledger.note(at(), format!("{who} exceeded on {full} (429)"));
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.unavailable += 1;
                ledger.note(at(), format!("{who} unavailable on {key} (503)"));
            }
            other => {
                let detail = format!("{who}: unexpected HTTP status {other} on {key}");
                self.ledger.lock().unwrap().violate(at(), "S6 no panic", detail);
            }
        }
    }

    fn note(&self, what: String) {
        self.ledger.lock().unwrap().note((self.at)(), what);
    }
}
