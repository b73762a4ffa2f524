//! What a program of the stateful script test is made of: a few clients
//! with their own settings, and steps drawn from every script, every fault
//! and the passing of time. Steps name clients and leases by index; the
//! executor reads an index modulo what is there (a step with nothing to act
//! on does nothing), so every program runs, and shrinking stays valid.

use proptest::prelude::*;

/// One client's settings (all in milliseconds).
#[derive(Clone, Debug)]
pub struct ClientSetup {
    /// Its leases' TTL.
    pub ttl: u64,
    /// How long its waiters keep their place without calling again (at
    /// most the TTL, as the client cuts it).
    pub lifetime: u64,
    /// How long one of its requests may act after it is written.
    pub liveness: u64,
}

/// A program: the clients, then the steps.
#[derive(Clone, Debug)]
pub struct Program {
    pub clients: Vec<ClientSetup>,
    pub steps: Vec<Step>,
}

/// One step. `client` is taken modulo the clients, `pick` modulo what the
/// client has to act on.
#[derive(Clone, Debug)]
pub enum Step {
    /// A fail-fast acquire of `weight` units under `limit`; `held_back`: its
    /// bytes sit in a stalled connection (delivered by a later `Deliver`, or
    /// never), and its caller gives up.
    Acquire {
        client: usize,
        weight: u32,
        limit: u32,
        held_back: bool,
    },
    /// Several acquires of weight 1 in one call (`ACQUIRE_MANY`), one of
    /// them named twice when `repeat`.
    Batch {
        client: usize,
        count: usize,
        limit: u32,
        repeat: bool,
    },
    /// Fail-fast acquires of `(weight, limit)` in one call
    /// (`ACQUIRE_ACROSS`): each as `ACQUIRE` takes it, one after another.
    Across { client: usize, acquires: Vec<(u32, u32)> },
    /// One lease of `weight` units on the subject under `limit` and on
    /// other subjects, each `(limit, filled)`: `filled` of its units taken
    /// by strangers first, in one all-or-nothing call (`ACQUIRE_ALL`).
    All {
        client: usize,
        weight: u32,
        limit: u32,
        others: Vec<(u32, u32)>,
    },
    /// A new waiting acquire.
    Wait { client: usize, weight: u32, limit: u32 },
    /// A waiter checks again.
    Check { client: usize, pick: usize },
    /// Releases held leases `pick`, `pick + 1`, ... (`more` after the first),
    /// as the client does: `ZREM`, `EXISTS` of the queue, and if it exists
    /// `RELEASE` of the same ids, at once or held back (`how` 1, 2); or by
    /// `RELEASE` alone (`how` 0, as a write-back's release again does).
    Release {
        client: usize,
        pick: usize,
        more: usize,
        how: u8,
    },
    /// Renews a held lease; `held_back` as for an acquire.
    Renew {
        client: usize,
        pick: usize,
        held_back: bool,
    },
    /// A waiter's caller gives up (`LEAVE`).
    Leave { client: usize, pick: usize },
    /// The client reads the wake-up messages published since it last did.
    Messages { client: usize },
    /// A held-back request (of any client) reaches Redis now.
    Deliver { pick: usize },
    /// The client's held-back requests pass their liveness: acquires are
    /// compensated, write-backs become unconfirmed.
    GiveUp { client: usize },
    /// The client reconnects after a failover or a flush and recovers (one
    /// write-back held back when `held_back`). A client that acts first
    /// recovers first, nothing held back.
    Recover { client: usize, held_back: bool },
    /// A replica takes a copy of the data now.
    Snapshot,
    /// The primary fails over to the replica: its copy (if recent enough to
    /// be within the recovery window) becomes the data.
    Failover,
    /// The data is lost (an empty restart).
    Flush,
    /// Time passes.
    Sleep { ms: u64 },
    /// A call with a bad argument (`kind` modulo 3: an id of weight 0, a
    /// fractional expiry, a renewal of weight 0): refused before anything
    /// is written.
    Garbage { client: usize, kind: u8 },
}

fn client() -> impl Strategy<Value = usize> {
    0usize..3
}

fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(1u32), 1 => 2u32..=3]
}

fn limit() -> impl Strategy<Value = u32> {
    prop_oneof![1 => Just(1u32), 3 => 2u32..=3, 1 => Just(4u32)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (client(), weight(), limit(), prop::bool::weighted(0.25))
            .prop_map(|(client, weight, limit, held_back)| Step::Acquire { client, weight, limit, held_back }),
        2 => (client(), 2usize..=3, limit(), prop::bool::weighted(0.3))
            .prop_map(|(client, count, limit, repeat)| Step::Batch { client, count, limit, repeat }),
        2 => (client(), prop::collection::vec((weight(), limit()), 2..=4))
            .prop_map(|(client, acquires)| Step::Across { client, acquires }),
        3 => (client(), weight(), limit(), prop::collection::vec((limit(), 0u32..=4), 1..=2))
            .prop_map(|(client, weight, limit, others)| Step::All { client, weight, limit, others }),
        10 => (client(), weight(), limit()).prop_map(|(client, weight, limit)| Step::Wait { client, weight, limit }),
        6 => (client(), 0usize..4).prop_map(|(client, pick)| Step::Check { client, pick }),
        12 => (client(), 0usize..4, 0usize..2, prop_oneof![1 => Just(0u8), 3 => Just(1u8), 2 => Just(2u8)])
            .prop_map(|(client, pick, more, how)| Step::Release { client, pick, more, how }),
        3 => (client(), 0usize..4, prop::bool::weighted(0.2))
            .prop_map(|(client, pick, held_back)| Step::Renew { client, pick, held_back }),
        3 => (client(), 0usize..4).prop_map(|(client, pick)| Step::Leave { client, pick }),
        8 => client().prop_map(|client| Step::Messages { client }),
        6 => (0usize..4).prop_map(|pick| Step::Deliver { pick }),
        2 => client().prop_map(|client| Step::GiveUp { client }),
        3 => (client(), prop::bool::weighted(0.3)).prop_map(|(client, held_back)| Step::Recover { client, held_back }),
        2 => Just(Step::Snapshot),
        1 => Just(Step::Failover),
        1 => Just(Step::Flush),
        5 => prop_oneof![3 => 1u64..40, 2 => 40u64..250].prop_map(|ms| Step::Sleep { ms }),
        1 => (client(), 0u8..3).prop_map(|(client, kind)| Step::Garbage { client, kind }),
    ]
}

fn client_setup() -> impl Strategy<Value = ClientSetup> {
    (
        prop_oneof![Just(300u64), Just(500), Just(800)],
        60u64..300,
        prop_oneof![Just(150u64), Just(250), Just(400)],
    )
        .prop_map(|(ttl, lifetime, liveness)| ClientSetup {
            ttl,
            lifetime: lifetime.min(ttl),
            liveness,
        })
}

/// Programs of `steps` steps at most.
pub fn program(steps: usize) -> impl Strategy<Value = Program> {
    (
        prop::collection::vec(client_setup(), 3),
        prop::collection::vec(step(), 1..=steps.max(1)),
    )
        .prop_map(|(clients, steps)| Program { clients, steps })
}
