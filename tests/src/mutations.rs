//! Deliberate regressions of the scripts: each undoes one fix of how the
//! scripts compose, by editing the Lua text. The tests of each finding, and
//! the stateful script test, must fail with them: a check that cannot see
//! them proves nothing.

use inflight_core::scripts::{ScriptKind, Scripts};

/// One edit of the scripts' text.
#[derive(Clone, Copy, Debug)]
pub struct Mutation {
    /// A short name (`--bug NAME`).
    pub name: &'static str,
    /// What it undoes.
    pub undoes: &'static str,
    /// Each text replaced, in every script that contains it (at least one
    /// must), and what replaces it.
    pub edits: &'static [(&'static str, &'static str)],
}

pub const MUTATIONS: &[Mutation] = &[
    Mutation {
        name: "hand-over-to-holder",
        undoes: "a waiter whose id holds a lease is never handed a slot, and its entry goes (finding 1)",
        edits: &[
            ("    if scores[i] then", "    if false then"),
            ("leave_queue(queue, waiters, holds, id)\nredis.call('ZREMRANGEBYSCORE'", "redis.call('ZREMRANGEBYSCORE'"),
            ("  cover(leases, expiry - now)\n  leave_queue(queue, waiters, holds, id)\n", "  cover(leases, expiry - now)\n"),
        ],
    },
    Mutation {
        name: "hand-over-during-hold",
        undoes: "a release under the recovery hold hands nothing over (finding 2)",
        edits: &[("if hold ~= '' and redis.call('EXISTS', hold) == 1 then\n  return removed\nend\n", "")],
    },
    Mutation {
        name: "reassert-unbounded",
        undoes: "a write-back refuses after its valid-until and after its holder's tombstone (finding 3)",
        edits: &[("if now > valid_until or expiry <= now then\n  return {-2, id}\nend\nif redis.call('EXISTS', tombstone) == 1 then\n  return {-1, id}\nend", "")],
    },
    Mutation {
        name: "held-hash-no-expiry",
        undoes: "the held hash expires with the queue (finding 5)",
        edits: &[("cover(holds, lifetime, 2 * lifetime)\n", "")],
    },
    Mutation {
        name: "last-limit-for-all",
        undoes: "each waiter is judged under its own limit (finding 6)",
        edits: &[("tonumber(limits[i + 1]) or tonumber(limits[1])", "tonumber(limits[1])")],
    },
    Mutation {
        name: "newcomer-takes-owed-unit",
        undoes: "a grant under a higher limit leaves every waiter ahead that fits still fitting (finding 9)",
        edits: &[
            ("if used + w > limit or w > room then", "if used + w > limit then"),
            ("live + w > limit or w > room then", "live + w > limit then"),
        ],
    },
    Mutation {
        name: "expired-own-id-kept",
        undoes: "an id whose own lease expired unpruned gets a fresh lease on the fast path (finding 10)",
        edits: &[("if added == 0 and tonumber(redis.call('ZSCORE', leases, id)) <= now then", "if false then")],
    },
    Mutation {
        name: "tombstone-shortened",
        undoes: "a second compensation never shortens the tombstone (finding 11)",
        edits: &[(
            "if now <= valid_until and redis.call('PTTL', tombstone) < valid_until - now + 1 then",
            "if now <= valid_until then",
        )],
    },
    Mutation {
        name: "hash-in-ids",
        undoes: "an id holding a # is refused (finding 12)",
        edits: &[("  if string.find(id, '#', 1, true) then", "  if false then")],
    },
    Mutation {
        name: "batch-counts-repeats",
        undoes: "a batch that names an id twice counts it once (finding 8)",
        edits: &[("  if first[id] then\n    status = reply[first[id]]\n  elseif", "  if false then\n  elseif")],
    },
    Mutation {
        name: "no-argument-checks",
        undoes: "numbers and weights are checked before anything is written (finding 8)",
        edits: &[("if not w or w < 1 or w > 1000 then", "if not w then")],
    },
    Mutation {
        name: "fractional-arguments",
        undoes: "numbers are whole, in plain decimal, before anything is written (finding 8)",
        edits: &[(
            "local n = type(value) == 'string' and (value == '0' or string.find(value, '^[1-9]%d*$')) and tonumber(value)\n  if not n or n < least or n >= 9007199254740992 then",
            "local n = tonumber(value)\n  if not n then",
        )],
    },
    Mutation {
        name: "absolute-key-expiry",
        undoes: "a new lease set's expiry is relative: an absolute one past on Redis's clock deletes the set mid-call",
        edits: &[(
            "redis.call('PEXPIRE', leases, expiry - now + 1)\n",
            "redis.call('PEXPIREAT', leases, at)\n",
        )],
    },
    Mutation {
        name: "plain-grant-over-limit",
        undoes: "the one-EXISTS fast path of a fail-fast acquire still checks the limit",
        edits: &[("  if live + w > limit and not redis.call('ZSCORE', leases, id) then", "  if false then")],
    },
    Mutation {
        name: "plain-grant-skips-queue",
        undoes: "the fast path is taken only when the subject has no queue (fairness)",
        edits: &[
            ("redis.call('EXISTS', tombstone, queue, hold) == 0", "redis.call('EXISTS', tombstone, hold) == 0"),
            ("redis.call('EXISTS', tombstone, queue) == 0", "redis.call('EXISTS', tombstone) == 0"),
        ],
    },
    Mutation {
        name: "plain-grant-never-prunes",
        undoes: "the fast path prunes expired units once they fill the subject",
        edits: &[("      reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)\n", "")],
    },
    Mutation {
        name: "plain-grant-skips-tombstone",
        undoes: "the fast path is taken only when the acquire was not compensated",
        edits: &[
            ("redis.call('EXISTS', tombstone, queue, hold) == 0", "redis.call('EXISTS', queue, hold) == 0"),
            ("redis.call('EXISTS', tombstone, queue) == 0", "redis.call('EXISTS', queue) == 0"),
        ],
    },
    Mutation {
        name: "all-grants-partly",
        undoes: "ACQUIRE_ALL takes nothing when one subject refuses (each admitted subject granted, as separate calls would)",
        edits: &[(
            "  if refused then\n    if status == 1 then\n      status = -4\n    end\n  else",
            "  if status ~= 1 then\n  else",
        )],
    },
    Mutation {
        name: "never-entered-again",
        undoes: "a queued waiter is told whether it entered the queue, so one that lost its place goes on under a new id",
        edits: &[(
            "return {2, id, queued and 0 or 1, ahead, expected, reclaimed}",
            "return {2, id, 0, ahead, expected, reclaimed}",
        )],
    },
    Mutation {
        name: "previous-id-ignored",
        undoes: "a waiter's check naming the id it went on from takes over that id's place or slot",
        edits: &[("local previous = ARGV[8] or ''", "local previous = ''")],
    },
];

/// The mutation called `name`.
pub fn find(name: &str) -> Option<&'static Mutation> {
    MUTATIONS.iter().find(|m| m.name == name)
}

impl Mutation {
    /// Our scripts with this edit made.
    pub fn scripts(&self) -> Scripts {
        let mut scripts = Scripts::default();
        for (from, to) in self.edits {
            let mut edited = 0;
            for kind in ScriptKind::EVERY {
                let text = scripts.get(kind).text;
                if text.contains(from) {
                    let patched: &'static str = Box::leak(text.replace(from, to).into_boxed_str());
                    scripts.replace(kind, patched);
                    edited += 1;
                }
            }
            assert!(edited > 0, "mutation {}: no script contains {from:?}", self.name);
        }
        scripts
    }
}
