//! The scenarios: who runs, on which keys, and which faults the seed may pick.

use std::time::Duration;

/// The caller latency budget every simulated limiter uses.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// Client hosts, each running one real `Limiter`.
    pub clients: usize,
    /// Caller tasks per client.
    pub callers: usize,
    /// Keys and their limits (callers use `acquire_with(key, limit)`).
    pub keys: &'static [(&'static str, u32)],
    /// How long callers keep acquiring, in virtual time.
    pub active: Duration,
    pub faults: Faults,
    /// Whether S1 (exactness) is checked (every scenario claims it now; a
    /// server that loses its data keeps it through recovery).
    pub exact: bool,
    /// The lease TTL of each replica's main limiter (its callers hold for
    /// at most 300 ms; the renewing limiter has its own, shorter TTL).
    pub lease_ttl: Duration,
    /// A Redis Cluster of 3 primaries and a spare instead of one server;
    /// the limiters run in cluster mode.
    pub cluster: bool,
    /// A Redis Sentinel deployment (two data hosts, three sentinels)
    /// instead of one server; `lagging_failover` switches the primary.
    pub sentinel: bool,
    /// Callers send HTTP requests through the tower layer to a handler
    /// whose response body streams; clients hang up mid-body or give up
    /// mid-acquire (`http_callers`).
    pub tower: bool,
    /// One acquire in three brings a per-call limit one below its key's
    /// (a lower class of request, or a rolling change of the limit): waiters
    /// of two limits share each queue, and S1 holds each grant to its own.
    pub call_limits: bool,
}

/// Which faults the seed's schedule may inject, and how often.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// Client–server links cut (messages dropped, TCP breaks) and repaired.
    pub partitions: bool,
    /// Client–server links held (nothing delivered) and released: stalls.
    pub stalls: bool,
    /// Per-message failure rate; on TCP a failure resets the connection.
    pub resets: f64,
    /// The server drops a reply but keeps the connection (a buggy proxy).
    pub reply_loss: bool,
    /// Latency varies per message between these bounds.
    pub jitter: bool,
    /// The server restarts and forgets everything.
    pub bounce: bool,
    /// The server fails over to a replica that lags `REPLICA_LAG_MS`
    /// behind: the last writes are lost, the address stays.
    pub lagging_failover: bool,
    /// Stalls last 1.5–4 s (longer than the ghosts scenario's TTL and any
    /// request's liveness) instead of up to 3 s.
    pub long_stalls: bool,
    /// Cluster: a key's slot migrates to another primary (IMPORTING and
    /// MIGRATING, its keys moved, then the new owner), under load.
    pub migrations: bool,
    /// Cluster: a primary crashes and its replica is promoted 0.3–1.5 s
    /// later (in sync: nothing is lost); the old primary comes back as the
    /// spare.
    pub failovers: bool,
    /// For 0.2–1.5 s, wake-up messages reach their subscribers 0.3–2 s late
    /// (a backlog on the wake-up connections) while commands are answered
    /// at once: hand-overs heard with little or none of their reservation
    /// left.
    pub lagging_wake_ups: bool,
    /// Every 0.5–3 s, a client's main driver stops for 0.2–2 s, as a task
    /// queued on a worker thread that user code blocks does: nothing read,
    /// written or timed, then everything at once (a hand-over read before
    /// the timers that would have checked again).
    pub driver_stalls: bool,
}

impl Faults {
    pub const NONE: Faults = Faults {
        partitions: false,
        stalls: false,
        resets: 0.0,
        reply_loss: false,
        jitter: false,
        bounce: false,
        lagging_failover: false,
        long_stalls: false,
        migrations: false,
        failovers: false,
        lagging_wake_ups: false,
        driver_stalls: false,
    };

    /// No fault at all: timing bounds (S9's wake-up bound) apply.
    pub fn is_calm(&self) -> bool {
        !(self.partitions
            || self.stalls
            || self.resets > 0.0
            || self.reply_loss
            || self.jitter
            || self.bounce
            || self.lagging_failover
            || self.migrations
            || self.failovers
            || self.lagging_wake_ups
            || self.driver_stalls)
    }

    /// How long a stall (a held link) lasts, in milliseconds.
    pub fn stall_ms(&self) -> (u64, u64) {
        if self.long_stalls {
            (1_500, 4_000)
        } else {
            (20, 3_000)
        }
    }
}

impl Scenario {
    /// The longest a waiting acquire waits, in milliseconds. Where links
    /// and drivers stall, waits outlast some stalls (up to 2.5 s): a waiter
    /// parked when its driver stopped, or whose check got through just
    /// before its link was held, hears its hand-over only afterwards, with
    /// little or none of its reservation left. That is the path a
    /// hand-over heard late takes (checked again, never trusted), which
    /// 400 ms waits never reach: their callers are gone before half a
    /// waiter's lifetime has passed.
    pub fn longest_wait(&self) -> u64 {
        if self.faults.stalls {
            2_500
        } else {
            400
        }
    }
}

/// The main limiter's TTL outside the ghosts scenario: far longer than any
/// run, so only releases (never expiry) free a slot.
const LONG_TTL: Duration = Duration::from_secs(600);

const KEYS: &[(&str, u32)] = &[("k0", 2), ("k1", 5), ("k2", 10)];

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "calm",
        about: "no faults: the baseline every other scenario is compared with",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(4),
        faults: Faults::NONE,
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "stalls",
        about: "links held for up to 3 s, past the liveness budget, then released; a driver stalled for up to 2 s; wake-ups that lag by up to 2 s",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(6),
        faults: Faults {
            stalls: true,
            jitter: true,
            lagging_wake_ups: true,
            driver_stalls: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "partitions",
        about: "client-server links cut and repaired; connections break mid-request",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(6),
        faults: Faults {
            partitions: true,
            jitter: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "resets",
        about: "random message failures reset TCP connections",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(5),
        faults: Faults {
            resets: 0.002,
            jitter: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "reply-loss",
        about: "the server drops single replies on live connections",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(5),
        faults: Faults {
            reply_loss: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "mixed",
        about: "everything above at once",
        clients: 4,
        callers: 10,
        keys: KEYS,
        active: Duration::from_secs(6),
        faults: Faults {
            partitions: true,
            stalls: true,
            resets: 0.001,
            reply_loss: true,
            jitter: true,
            lagging_wake_ups: true,
            driver_stalls: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "bounce",
        about: "the server restarts and loses its data: held leases are written back, new grants held, S1 kept",
        clients: 3,
        callers: 10,
        keys: KEYS,
        active: Duration::from_secs(5),
        faults: Faults {
            jitter: true,
            bounce: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "failover",
        about: "the server fails over to a replica 30 ms behind: the last grants and releases are lost; leases written back, S1 kept",
        clients: 3,
        callers: 10,
        keys: KEYS,
        active: Duration::from_secs(5),
        faults: Faults {
            jitter: true,
            lagging_failover: true,
            ..Faults::NONE
        },
        exact: true,
        // Releases lost with the failover are sent again by the recovery,
        // so S2 holds with leases that never expire during the run.
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "ghosts",
        about: "a 2 s TTL under stalls and partitions of 1.5-4 s: held-back acquires must not come back as leases nobody holds (S10)",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(8),
        faults: Faults {
            partitions: true,
            stalls: true,
            jitter: true,
            long_stalls: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: Duration::from_secs(2),
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "cluster",
        about: "a 3-primary Redis Cluster: slots migrate (ASK, TRYAGAIN, MOVED) and primaries fail over under load",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(8),
        faults: Faults {
            migrations: true,
            failovers: true,
            resets: 0.0005,
            jitter: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: true,
        sentinel: false,
        tower: false,
        call_limits: false,
    },
    Scenario {
        name: "tower",
        about: "requests through the tower HTTP layer with streaming bodies; clients hang up mid-body or give up mid-acquire; partitions and resets",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(5),
        faults: Faults {
            partitions: true,
            resets: 0.001,
            jitter: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: true,
        call_limits: false,
    },
    Scenario {
        name: "composed",
        about: "where features meet: waiting acquires of two limits on each key, weights, keep-alive, through failovers to a lagging replica, restarts and lost replies",
        clients: 3,
        callers: 12,
        keys: KEYS,
        active: Duration::from_secs(6),
        faults: Faults {
            jitter: true,
            lagging_failover: true,
            bounce: true,
            reply_loss: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: false,
        tower: false,
        call_limits: true,
    },
    // Redis Sentinel (turmoil only: the madsim harness has no sentinels).
    Scenario {
        name: "sentinel",
        about: "a Redis Sentinel deployment: failovers to a replica 30 ms behind, announced late by each sentinel (one stale for up to 2 s) while the old primary takes writes for a moment, each reconfiguration closing the node's clients; the switch followed, leases written back, every invariant kept",
        clients: 3,
        callers: 10,
        keys: KEYS,
        active: Duration::from_secs(6),
        faults: Faults {
            jitter: true,
            lagging_failover: true,
            ..Faults::NONE
        },
        exact: true,
        lease_ttl: LONG_TTL,
        cluster: false,
        sentinel: true,
        tower: false,
        call_limits: false,
    },
];

/// The scenario seed `seed` runs when seeds are spread over all of them
/// (under madsim, all but Sentinel, which only the turmoil harness hosts).
pub fn for_seed(seed: u64) -> &'static Scenario {
    let rotation = || SCENARIOS.iter().filter(|s| cfg!(not(madsim)) || !s.sentinel);
    let index = seed % rotation().count() as u64;
    rotation().nth(index as usize).expect("a scenario")
}

pub fn find(name: &str) -> Option<&'static Scenario> {
    all().find(|s| s.name == name)
}

/// Every scenario.
pub fn all() -> impl Iterator<Item = &'static Scenario> {
    SCENARIOS.iter()
}
