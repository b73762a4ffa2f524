//! Every name a client hands out, from the 16 bytes of entropy it was made
//! with: request ids (a request's number is also its lease id's counter, so
//! a retried request keeps its place), connection ids (never reused, so a
//! retired generation is never mistaken for the current one), and the seed
//! of each node's reconnect jitter.

use crate::event::{ConnectionId, RequestId};
use crate::lease_id::{LeaseId, LeaseIds};
use crate::request_ids::{ForeignRequest, FreshRequest, RequestIds};

#[derive(Debug)]
pub(super) struct Names {
    entropy: [u8; 16],
    lease_ids: LeaseIds,
    /// Shared with the callers, who may draw an id before they call.
    requests: RequestIds,
    next_connection: u64,
}

impl Names {
    pub(super) fn new(entropy: [u8; 16]) -> Self {
        Self {
            entropy,
            lease_ids: LeaseIds::new(entropy),
            requests: RequestIds::new(),
            next_connection: 1,
        }
    }

    /// A fresh request id, for a request the client makes itself.
    pub(super) fn request(&self) -> RequestId {
        self.requests.draw().id()
    }

    /// The ids callers draw from.
    pub(super) fn requests(&self) -> &RequestIds {
        &self.requests
    }

    /// The id of a call's `fresh` request, unless another client drew it.
    pub(super) fn accept(&self, fresh: FreshRequest) -> Result<RequestId, ForeignRequest> {
        self.requests.accept(fresh)
    }

    /// A fresh connection id.
    pub(super) fn connection(&mut self) -> ConnectionId {
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        connection
    }

    /// The lease id of `request` (its plain form: weight and label are the
    /// caller's to add).
    pub(super) fn lease_id(&self, request: RequestId) -> LeaseId {
        self.lease_ids.id(request.0)
    }

    /// A lease id never used before, with `old`'s weight and label.
    pub(super) fn fresh_like(&self, old: &LeaseId) -> LeaseId {
        self.lease_id(self.request())
            .with_claim(old.weight(), old.label().cloned())
    }

    /// Whether `id` is one this client issued.
    pub(super) fn issued(&self, id: &LeaseId) -> bool {
        self.lease_ids.issued(id)
    }

    /// The entropy itself (the lease-data marker's value is drawn from it).
    pub(super) fn entropy(&self) -> &[u8; 16] {
        &self.entropy
    }
}
