//! Every name a client hands out, from the 16 bytes of entropy it was made
//! with: request ids (a request's number is also its lease id's counter, so
//! a retried request keeps its place), connection ids (never reused, so a
//! retired generation is never mistaken for the current one), and the seed
//! of each node's reconnect jitter.

use crate::event::{ConnectionId, RequestId};
use crate::lease_id::{LeaseId, LeaseIds};

#[derive(Debug)]
pub(super) struct Names {
    entropy: [u8; 16],
    lease_ids: LeaseIds,
    next_request: u64,
    next_connection: u64,
}

impl Names {
    pub(super) fn new(entropy: [u8; 16]) -> Self {
        Self {
            entropy,
            lease_ids: LeaseIds::new(entropy),
            next_request: 1,
            next_connection: 1,
        }
    }

    /// A fresh request id.
    pub(super) fn request(&mut self) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        request
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

    /// Whether `id` is one this client issued.
    pub(super) fn issued(&self, id: &LeaseId) -> bool {
        self.lease_ids.issued(id)
    }

    /// The entropy itself (the lease-data marker's value is drawn from it).
    pub(super) fn entropy(&self) -> &[u8; 16] {
        &self.entropy
    }
}
