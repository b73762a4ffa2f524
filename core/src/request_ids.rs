//! Request ids drawn before the call: a caller on another thread names its
//! request itself, so that the driver and the core file it under one id and
//! nothing translates between a caller's name and the core's.
//!
//! A request's number is also its lease id's counter, so two requests of one
//! client must never share a number: a [`FreshRequest`] is used up by the
//! call it names (it is neither `Clone` nor `Copy`), and a client refuses one
//! drawn from another client's ids.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Names one request (an acquire, a renewal, a read) from the call that makes
/// it to its outcome. A caller may draw it before the call, on any thread
/// ([`Client::request_ids`](crate::Client::request_ids)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub(crate) u64);

impl RequestId {
    /// The number, for logs: requests are numbered from 1 per client.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// One client's request numbers, shared with the threads that call it.
/// Cheap to clone; every clone draws from the same sequence.
#[derive(Debug, Clone)]
pub struct RequestIds {
    next: Arc<AtomicU64>,
    /// Which client's sequence this is (unique in the process).
    source: u64,
}

impl RequestIds {
    pub(crate) fn new() -> Self {
        // Only the tag is process-wide: the numbers themselves start at 1
        // for every client, so a simulation numbers its requests the same
        // way however many run beside it.
        static SOURCES: AtomicU64 = AtomicU64::new(1);
        Self {
            next: Arc::new(AtomicU64::new(1)),
            source: SOURCES.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A number no other request of this client has or will have.
    pub fn draw(&self) -> FreshRequest {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        FreshRequest {
            id: RequestId(number),
            source: self.source,
            asked: None,
        }
    }

    /// `fresh`'s id, if it was drawn from this sequence.
    pub(crate) fn accept(&self, fresh: FreshRequest) -> Result<RequestId, ForeignRequest> {
        if fresh.source == self.source {
            Ok(fresh.id)
        } else {
            Err(ForeignRequest(fresh.id))
        }
    }
}

/// A request id not used yet: what a call to the client takes to name its
/// request. [`id`](FreshRequest::id) tells the id before the call, for the
/// caller's own bookkeeping (to abandon it, say).
#[derive(Debug, PartialEq, Eq)]
pub struct FreshRequest {
    id: RequestId,
    source: u64,
    /// When its caller asked, if that was before the call reaches the client.
    asked: Option<Instant>,
}

impl FreshRequest {
    /// The id the request will go by.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// When the caller asked, on the client's clock, if that was before the
    /// call reaches the client (a driver that ran late, its thread blocked
    /// by other code): the request's timeout counts from then, not from the
    /// call. A request whose timeout has passed by the call ends
    /// `Unavailable(Timeout)` before it is written.
    pub fn asked_at(mut self, at: Instant) -> Self {
        self.asked = Some(at);
        self
    }

    /// When its caller asked ([`asked_at`](Self::asked_at)), if told.
    pub(crate) fn asked(&self) -> Option<Instant> {
        self.asked
    }
}

/// A request id drawn from another client's [`RequestIds`]: its number could
/// be one this client gave already, so the call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request id {} was drawn from another client's ids", .0.get())]
pub struct ForeignRequest(pub RequestId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_unique_and_only_their_own_sequence_takes_them() {
        let (mine, theirs) = (RequestIds::new(), RequestIds::new());
        let (first, second) = (mine.draw(), mine.clone().draw());
        assert_ne!(first.id(), second.id());
        let foreign = theirs.draw();
        let foreign_id = foreign.id();
        assert_eq!(mine.accept(foreign), Err(ForeignRequest(foreign_id)));
        assert_eq!(mine.accept(first), Ok(RequestId(1)));
        assert_eq!(mine.accept(second), Ok(RequestId(2)));
    }
}
