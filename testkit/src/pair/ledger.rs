//! The bench's pump and ledger: outputs are drained as a driver would, and every event the client emits is checked against what
//! the bench knows (one outcome per request, none after abandon, grants that
//! are really in the model, no lease leaked when the run settles).

use std::collections::HashSet;

use bytes::Bytes;

use super::Pair;
use inflight_core::event::{Action, Event, Outcome, Renewal, RequestId};
use inflight_core::lease_id::LeaseId;

impl Pair {
    /// The outcome delivered for `request`, if any.
    pub fn outcome(&self, request: RequestId) -> Option<&Outcome> {
        self.events.iter().find_map(|event| match event {
            Event::Acquired(r, outcome) if *r == request => Some(outcome),
            _ => None,
        })
    }

    /// Drains the client's outputs into the wire and checks every event.
    pub(super) fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.client.poll_action() {
                progressed = true;
                match action {
                    Action::Connect(id, _) => {
                        // One generation at a time: the old one is closed
                        // (or never opened) before a new one is asked for.
                        assert!(
                            self.connects.is_empty(),
                            "{id:?} asked for while {:?} is still open",
                            self.connects
                        );
                        self.connects.push(id)
                    }
                    Action::ConnectSentinel(id, _) => unreachable!("{id:?}: the pair has no sentinels"),
                    Action::Close(id) => {
                        self.connects.retain(|c| *c != id);
                        if self.link.as_ref().is_some_and(|l| l.id == id) {
                            let mut link = self.link.take().expect("checked");
                            link.to_client.clear();
                            self.ghosts.push(link);
                        }
                    }
                }
            }
            while let Some(transmit) = self.client.poll_transmit() {
                progressed = true;
                let link = self.link.as_mut().filter(|l| l.id == transmit.connection);
                link.expect("transmit on the open connection")
                    .to_server
                    .extend_from_slice(&transmit.data);
            }
            while let Some(event) = self.client.poll_event() {
                progressed = true;
                self.check(event);
            }
            if !progressed {
                return;
            }
        }
    }

    /// `request`'s record, as it gets its one outcome: it must have been made,
    /// not answered already and not abandoned.
    /// The lease id `request` holds if granted.
    fn expected_lease(&self, request: RequestId) -> LeaseId {
        self.requests
            .get(&request)
            .and_then(|record| record.lease.clone())
            .unwrap_or_else(|| crate::plain_lease_id(self.entropy, request))
    }

    pub(super) fn answer(&mut self, request: RequestId) -> (Bytes, Option<LeaseId>) {
        let record = self
            .requests
            .get_mut(&request)
            .expect("an outcome for a request never made");
        assert!(!record.answered, "{request:?} got a second outcome");
        assert!(!record.abandoned, "{request:?} got an outcome after it was abandoned");
        record.answered = true;
        (record.key.clone(), record.renews.clone())
    }

    /// An acquire of several keys: every key granted, in order, each lease
    /// in Redis (the first named after the request); or refused by a key
    /// the server really found full in the same `ACQUIRE_ALL` call.
    fn check_all(&mut self, request: RequestId, outcome: &Outcome, first: &str) {
        let all = self.requests[&request].all.clone();
        match outcome {
            Outcome::GrantedAll(leases) => {
                assert_eq!(leases.len(), all.len(), "{request:?}: a lease per key");
                assert_eq!(
                    leases[0].id().to_string(),
                    first,
                    "{request:?}: another request's lease"
                );
                for (lease, key) in leases.iter().zip(&all) {
                    assert_eq!(lease.redis_key(), key, "{request:?} granted on another key");
                    let live = self.server.live_leases(key);
                    assert!(
                        live.iter().any(|id| id[..] == lease.id().to_bytes()[..]),
                        "granted lease is not in Redis"
                    );
                }
            }
            Outcome::ExceededAt(i) => {
                let call = self
                    .server
                    .acquires
                    .iter()
                    .rev()
                    .find(|a| a.lease[..] == *first.as_bytes())
                    .and_then(|a| a.call);
                let full = self
                    .server
                    .acquires
                    .iter()
                    .any(|a| a.call == call && a.call.is_some() && a.key == all[*i] && a.status == 0);
                assert!(
                    full,
                    "{request:?}: ExceededAt({i}) without the server finding that key full"
                );
            }
            Outcome::Unavailable(_) | Outcome::FailOpen(_) => {}
            other => panic!("{request:?}: {other:?} for an acquire of several keys"),
        }
    }

    pub(super) fn check(&mut self, event: Event) {
        match &event {
            Event::Acquired(request, outcome) if !self.requests[request].all.is_empty() => {
                self.answer(*request);
                let first = self.expected_lease(*request).to_string();
                self.check_all(*request, outcome, &first);
            }
            Event::Acquired(request, outcome) => {
                let (key, _) = self.answer(*request);
                let lease_id = self.expected_lease(*request).to_string();
                match outcome {
                    Outcome::Granted(lease) => {
                        assert_eq!(
                            lease.id().to_string(),
                            lease_id,
                            "{request:?} was handed another request's lease"
                        );
                        assert_eq!(lease.redis_key(), &key, "{request:?} granted on another key");
                        let live = self.server.live_leases(&key);
                        assert!(
                            live.iter().any(|id| id[..] == *lease_id.as_bytes()),
                            "granted lease is not in Redis"
                        );
                    }
                    Outcome::Exceeded => {
                        let ran: Vec<i64> = self
                            .server
                            .acquires
                            .iter()
                            .filter(|a| a.lease[..] == *lease_id.as_bytes())
                            .map(|a| a.status)
                            .collect();
                        // A denial; or, waiting, queued until the deadline.
                        assert!(
                            (ran.contains(&0) && !ran.contains(&1)) || ran.contains(&2),
                            "Exceeded without a trusted denial: {ran:?}"
                        );
                    }
                    Outcome::Shed(_) => {
                        let shed = self
                            .server
                            .acquires
                            .iter()
                            .any(|a| a.lease[..] == *lease_id.as_bytes() && a.status == 0);
                        assert!(shed, "Shed without the server shedding it");
                    }
                    Outcome::Unavailable(_) | Outcome::FailOpen(_) => {}
                    Outcome::GrantedAll(_) | Outcome::ExceededAt(_) => {
                        panic!("{request:?}: the pair makes no acquire of several keys")
                    }
                }
            }
            Event::Renewed(request, renewal) => {
                let (key, renews) = self.answer(*request);
                let renewed = renews.expect("a renewal outcome for an acquire");
                match renewal {
                    Renewal::Extended(lease) => {
                        assert_eq!(*lease.id(), renewed, "{request:?} renewed another lease");
                        let live = self.server.live_leases(&key);
                        assert!(
                            live.iter().any(|id| id[..] == renewed.to_bytes()[..]),
                            "renewed lease is not in Redis"
                        );
                        let held = self.held.iter_mut().find(|l| *l.id() == renewed);
                        // The holder now holds the renewed lease (its new expiry).
                        *held.expect("a renewed lease is held") = lease.clone();
                    }
                    // Only time removes a lease its holder has not released.
                    Renewal::Lost => {
                        let at = self.held.iter().position(|l| *l.id() == renewed);
                        let lease = self.held.remove(at.expect("a lost lease was held"));
                        assert!(
                            self.now >= lease.expires_at(),
                            "held lease {renewed} reported lost before its expiry"
                        );
                    }
                    Renewal::Unavailable(_) => {}
                }
            }
            Event::ReleaseAbandoned { lease, .. } => {
                self.given_up.insert(lease.clone());
            }
            _ => {}
        }
        match &event {
            Event::Acquired(_, Outcome::Granted(lease)) => self.held.push(lease.clone()),
            Event::Acquired(_, Outcome::GrantedAll(leases)) => self.held.extend(leases.iter().cloned()),
            _ => {}
        }
        self.events.push(event);
    }

    /// Requests that never got an outcome and were not abandoned.
    pub fn unanswered(&self) -> Vec<RequestId> {
        let mut open: Vec<_> = self
            .requests
            .iter()
            .filter(|(_, r)| !r.answered && !r.abandoned)
            .map(|(id, _)| *id)
            .collect();
        open.sort();
        open
    }

    /// Every live lease in the server belongs to a lease the test holds (or one
    /// whose release was reported abandoned), and every held lease is live.
    pub fn assert_no_leak(&mut self) {
        let held: HashSet<Vec<u8>> = self.held.iter().map(|l| l.id().to_bytes()).collect();
        let given_up: HashSet<Vec<u8>> = self.given_up.iter().map(|l| l.to_bytes()).collect();
        let live = self.server.all_live_leases();
        for (key, id) in &live {
            assert!(
                held.contains(&id[..]) || given_up.contains(&id[..]),
                "leaked lease {:?} on {:?}",
                String::from_utf8_lossy(id),
                String::from_utf8_lossy(key)
            );
        }
        let live_ids: HashSet<&[u8]> = live.iter().map(|(_, id)| &id[..]).collect();
        for lease in &self.held {
            assert!(
                live_ids.contains(&lease.id().to_bytes()[..]),
                "held lease {} is gone from Redis",
                lease.id()
            );
        }
    }
}
