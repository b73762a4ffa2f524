//! A deterministic test bench: the real [`Client`] wired to the [`RedisModel`]
//! through a simulated wire, with virtual time and an independent ledger that
//! checks the client's promises after every step.
//!
//! Like quinn-proto's test `Pair`, tests read as protocol stories: acquire,
//! deliver some bytes, cut the link, advance the clock, and look at what came
//! out. Nothing here sleeps or reads a clock; the start instant is given.
//!
//! The wire can lose a connection while bytes are still on their way to the
//! server. Those bytes become a *ghost* that may still land later, after the
//! client has moved on: exactly the case the compensation tombstone exists for.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::model::{ModelConnection, RedisModel};
use inflight_core::event::{ConnectionId, Event, Lease, RequestId};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::{Client, Config};

mod ledger;

/// One open connection between the client and the model.
pub(crate) struct Link {
    id: ConnectionId,
    server: ModelConnection,
    to_server: BytesMut,
    to_client: BytesMut,
}

/// What the ledger knows of one acquire.
#[derive(Debug, Default)]
pub(crate) struct RequestRecord {
    key: Bytes,
    answered: bool,
    abandoned: bool,
    /// A renewal of this held lease, not an acquire.
    renews: Option<LeaseId>,
    /// The lease id a weighted acquire holds if granted (its weight in it).
    lease: Option<LeaseId>,
    /// For an acquire of several keys (`acquire_all`): every key's lease
    /// set, in the order asked (`key` is the first).
    all: Vec<Bytes>,
}

/// The client, the model server, the wire between them, and the ledger.
pub struct Pair {
    pub client: Client,
    pub server: RedisModel,
    pub now: Instant,
    link: Option<Link>,
    ghosts: Vec<Link>,
    connects: Vec<ConnectionId>,
    /// Every event, in order, for tests to read.
    pub events: Vec<Event>,
    /// Leases granted to the test and not yet given back.
    pub held: Vec<Lease>,
    requests: HashMap<RequestId, RequestRecord>,
    /// Leases whose release the client reported as abandoned: allowed to stay.
    given_up: HashSet<LeaseId>,
    /// What the client's lease ids are built on.
    entropy: [u8; 16],
}

impl Pair {
    /// `start` is any instant; it is the only one the bench does not compute.
    pub fn new(config: Config, start: Instant) -> Self {
        Self::with_entropy(config, start, [7; 16])
    }

    /// What the client's lease ids are built on (see [`crate::plain_lease_id`]).
    pub fn entropy(&self) -> [u8; 16] {
        self.entropy
    }

    /// As [`Pair::new`], for a client of its own (other lease ids).
    pub fn with_entropy(config: Config, start: Instant, entropy: [u8; 16]) -> Self {
        let client = Client::new(config, entropy, start).expect("valid config");
        let mut pair = Self {
            entropy,
            client,
            server: RedisModel::new(1_700_000_000_000),
            now: start,
            link: None,
            ghosts: Vec::new(),
            connects: Vec::new(),
            events: Vec::new(),
            held: Vec::new(),
            requests: HashMap::new(),
            given_up: HashSet::new(),
        };
        pair.pump();
        pair
    }

    /// A pair whose first connection is open and ready.
    pub fn connected(config: Config, start: Instant) -> Self {
        let mut pair = Self::new(config, start);
        pair.accept();
        pair.exchange();
        assert!(
            crate::connection(&pair.client).is_some_and(|(_, ready)| ready),
            "handshake did not finish"
        );
        pair
    }

    // ---- what a caller does -------------------------------------------------

    pub fn acquire(&mut self, namespace: &str, subject: &str, limit: u32) -> RequestId {
        let request = self.acquire_unpumped(namespace, subject, limit);
        self.pump();
        request
    }

    /// `count` acquires before the client's outputs are taken, as when many
    /// callers reach the driver in one wake-up: they go out as one batch.
    pub fn acquire_burst(&mut self, namespace: &str, subject: &str, limit: u32, count: usize) -> Vec<RequestId> {
        let requests = (0..count)
            .map(|_| self.acquire_unpumped(namespace, subject, limit))
            .collect();
        self.pump();
        requests
    }

    fn acquire_unpumped(&mut self, namespace: &str, subject: &str, limit: u32) -> RequestId {
        let key = Key::new(namespace, subject).expect("valid key");
        let limit = NonZeroU32::new(limit).expect("non-zero limit");
        let request = self.client.acquire(self.now, &key, limit);
        let redis_key = SubjectKeys::new(&self.client.config().key_prefix, &key)
            .leases()
            .clone();
        self.requests.insert(
            request,
            RequestRecord {
                key: redis_key,
                ..RequestRecord::default()
            },
        );
        request
    }

    /// An acquire of `weight` units (at most `limit`).
    pub fn acquire_weighted(&mut self, namespace: &str, subject: &str, limit: u32, weight: u32) -> RequestId {
        self.acquire_asked(namespace, subject, limit, weight, self.now)
    }

    /// An acquire of `weight` units (at most `limit`) whose caller asked at
    /// `asked` (`FreshRequest::asked_at`: its timeout counts from then).
    pub fn acquire_asked(
        &mut self,
        namespace: &str,
        subject: &str,
        limit: u32,
        weight: u32,
        asked: Instant,
    ) -> RequestId {
        let key = Key::new(namespace, subject).expect("valid key");
        let limit = NonZeroU32::new(limit).expect("non-zero limit");
        let keys = SubjectKeys::new(&self.client.config().key_prefix, &key);
        let redis_key = keys.leases().clone();
        let claim = inflight_core::lease_id::Claim::weighing(weight).expect("a valid weight");
        let fresh = self.client.request_ids().draw().asked_at(asked);
        let request = self
            .client
            .acquire_claim(self.now, fresh, keys, limit, &claim, None)
            .expect("the weight fits the limit");
        let lease = crate::plain_lease_id(self.entropy, request).with_claim(weight, None);
        self.requests.insert(
            request,
            RequestRecord {
                key: redis_key,
                lease: Some(lease),
                ..RequestRecord::default()
            },
        );
        self.pump();
        request
    }

    /// One lease on each of `keys` (`(namespace, subject, limit)`), all or
    /// nothing (`Client::acquire_all`).
    pub fn acquire_all(&mut self, keys: &[(&str, &str, u32)]) -> RequestId {
        let prefix = self.client.config().key_prefix.clone();
        let parts: Vec<(SubjectKeys, NonZeroU32)> = keys
            .iter()
            .map(|(namespace, subject, limit)| {
                let key = Key::new(*namespace, *subject).expect("valid key");
                let limit = NonZeroU32::new(*limit).expect("non-zero limit");
                (SubjectKeys::new(&prefix, &key), limit)
            })
            .collect();
        let all: Vec<Bytes> = parts.iter().map(|(keys, _)| keys.leases().clone()).collect();
        let claim = inflight_core::lease_id::Claim::default();
        let request = self
            .client
            .acquire_all(self.now, self.client.request_ids().draw(), parts, &claim)
            .expect("keys that go together");
        self.requests.insert(
            request,
            RequestRecord {
                key: all[0].clone(),
                all,
                ..RequestRecord::default()
            },
        );
        self.pump();
        request
    }

    pub fn abandon(&mut self, request: RequestId) {
        let record = self.requests.get_mut(&request).expect("known request");
        if !record.answered {
            record.abandoned = true;
        }
        self.client.abandon(self.now, request);
        self.pump();
    }

    /// Renews the `index`-th held lease. Until its outcome (or its abandon),
    /// the lease is not released: a `Permit` renews through `&mut self`.
    pub fn renew(&mut self, index: usize) -> RequestId {
        let lease = self.held[index].clone();
        let fresh = self.client.request_ids().draw();
        let request = self.client.renew(self.now, fresh, &lease).expect("this client's id");
        self.requests.insert(
            request,
            RequestRecord {
                key: lease.redis_key().clone(),
                renews: Some(lease.id().clone()),
                ..RequestRecord::default()
            },
        );
        self.pump();
        request
    }

    /// Whether a renewal of `lease` still waits for its outcome.
    pub fn renewing(&self, lease: &LeaseId) -> bool {
        self.requests
            .values()
            .any(|r| r.renews.as_ref() == Some(lease) && !r.answered && !r.abandoned)
    }

    /// Releases the first `count` held leases before the client's outputs are
    /// taken: those of one subject go out as one `ZREM`.
    pub fn release_burst(&mut self, count: usize) {
        for lease in self.held.drain(..count.min(self.held.len())) {
            self.client.release(self.now, lease);
        }
        self.pump();
    }

    /// Releases the `index`-th held lease and acquires before the client's
    /// outputs are taken, as when a caller drops its permit and acquires
    /// again at once (both reach the driver in one wake-up).
    pub fn release_then_acquire(&mut self, index: usize, namespace: &str, subject: &str, limit: u32) -> RequestId {
        let lease = self.held.remove(index);
        self.client.release(self.now, lease);
        let request = self.acquire_unpumped(namespace, subject, limit);
        self.pump();
        request
    }

    /// Releases the `index`-th held lease.
    pub fn release(&mut self, index: usize) {
        let lease = self.held.remove(index);
        self.client.release(self.now, lease);
        self.pump();
    }

    // ---- what the network does ---------------------------------------------

    /// Opens every connection the client asked for.
    pub fn accept(&mut self) {
        for id in std::mem::take(&mut self.connects) {
            if let Some(old) = self.link.take() {
                self.ghosts.push(old);
            }
            self.link = Some(Link {
                id,
                server: ModelConnection::new(),
                to_server: BytesMut::new(),
                to_client: BytesMut::new(),
            });
            self.client.handle_connected(self.now, id);
            self.pump();
        }
    }

    /// Fails every connection attempt in progress.
    pub fn refuse(&mut self) {
        for id in std::mem::take(&mut self.connects) {
            self.client.handle_closed(self.now, id);
            self.pump();
        }
    }

    /// Moves up to `max` bytes from the client to the server.
    pub fn to_server(&mut self, max: usize) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let n = max.min(link.to_server.len());
        let chunk = link.to_server.split_to(n);
        match self.server.handle(&mut link.server, &chunk) {
            Ok(reply) => link.to_client.extend_from_slice(&reply),
            Err(_) => self.cut(),
        }
    }

    /// Moves up to `max` bytes from the server to the client.
    pub fn to_client(&mut self, max: usize) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let n = max.min(link.to_client.len());
        if n == 0 {
            return;
        }
        let chunk = link.to_client.split_to(n);
        let id = link.id;
        self.client.handle_input(self.now, id, &chunk);
        self.pump();
    }

    /// Delivers up to `max` bytes to the client and abandons `request` before
    /// taking any of the client's outputs: what the driver does when a reply
    /// and a cancellation reach it in the same wake-up. The reply may already
    /// have produced the request's outcome; it must not be delivered.
    pub fn to_client_then_abandon(&mut self, max: usize, request: RequestId) {
        self.feed_client(max);
        self.abandon(request);
    }

    /// Delivers up to `max` bytes to the client and gives back the
    /// `index`-th held lease before taking any of the client's outputs:
    /// a reply and a permit's release in the same driver wake-up.
    pub fn to_client_then_release(&mut self, max: usize, index: usize) {
        self.feed_client(max);
        self.release(index);
    }

    /// Up to `max` bytes from the server into the client, its outputs left
    /// where they are.
    fn feed_client(&mut self, max: usize) {
        if let Some(link) = self.link.as_mut() {
            let n = max.min(link.to_client.len());
            if n > 0 {
                let chunk = link.to_client.split_to(n);
                self.client.handle_input(self.now, link.id, &chunk);
            }
        }
    }

    /// Injects raw bytes as if the server had sent them.
    pub fn inject(&mut self, bytes: &[u8]) {
        let id = self.link.as_ref().expect("a link").id;
        self.client.handle_input(self.now, id, bytes);
        self.pump();
    }

    /// Delivers everything in both directions until the wire is quiet.
    pub fn exchange(&mut self) {
        loop {
            self.accept();
            let Some(link) = &self.link else { return };
            if !link.to_server.is_empty() {
                self.to_server(usize::MAX);
            } else if !link.to_client.is_empty() {
                self.to_client(usize::MAX);
            } else {
                return;
            }
        }
    }

    /// The connection breaks. Bytes not yet delivered to the server may still
    /// land later (see [`Pair::land_ghosts`]); replies in flight are lost.
    pub fn cut(&mut self) {
        if let Some(mut link) = self.link.take() {
            link.to_client.clear();
            let id = link.id;
            self.ghosts.push(link);
            self.client.handle_closed(self.now, id);
            self.pump();
        }
    }

    /// The server process starts again: every connection breaks (bytes on
    /// their way are lost with it), and the new run keeps the data set only
    /// with `keep_data` (a snapshot, or a replica that had it all).
    pub fn restart_server(&mut self, keep_data: bool) {
        let now_ms = self.server.now_ms + 1;
        self.server = if keep_data {
            let mut next = RedisModel::promoted_from(&self.server, now_ms, |_, _| true);
            next.replid2 = "0".repeat(40); // a restart, not a promotion
            next
        } else {
            RedisModel::new(now_ms)
        };
        self.ghosts.clear();
        if let Some(link) = self.link.take() {
            self.client.handle_closed(self.now, link.id);
            self.pump();
        }
    }

    /// Late bytes of dead connections reach the server; their replies go nowhere.
    pub fn land_ghosts(&mut self) {
        for mut ghost in std::mem::take(&mut self.ghosts) {
            let _ = self.server.handle(&mut ghost.server, &ghost.to_server);
        }
    }

    /// Moves the clock forward and lets the client act on what became due.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.server.now_ms += by.as_millis() as u64;
        self.client.handle_timeout(self.now);
        self.pump();
    }

    /// Runs until nothing is left to do: connections accepted, bytes delivered,
    /// timers fired. Bounded, so a livelock fails the test instead of hanging.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            self.exchange();
            // Idle probes come back for as long as leases are held: they
            // are not work left to do.
            match self
                .client
                .next_timer(Some(inflight_core::Timer::Probe))
                .map(|(at, _)| at)
            {
                Some(at) => {
                    let by = at.saturating_duration_since(self.now);
                    self.advance(by);
                }
                None => return,
            }
        }
        panic!("the pair did not settle");
    }
}
