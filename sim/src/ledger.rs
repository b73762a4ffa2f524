//! The harness's own record of what happened, kept outside the code under
//! test, and the invariants checked against it as the run goes.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub at: Duration,
}

/// Per-run totals, summed into the summary table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub acquires: u64,
    pub granted: u64,
    pub denied: u64,
    pub unavailable: u64,
    pub fail_open: u64,
    pub compensations: u64,
    pub release_retries: u64,
    pub releases_abandoned: u64,
    pub connections_replaced: u64,
    pub faults: u64,
    /// Renewals that extended a long-held lease, and renewals that found it gone.
    pub renewals: u64,
    pub leases_lost: u64,
    /// Long holds kept alive by the driver, and those told their lease was lost.
    pub kept_alive: u64,
    pub keep_alive_lost: u64,
    /// Grants of more than one unit.
    pub weighted: u64,
    /// Waiting acquires: started, granted, timed out at their deadline,
    /// shed at once.
    pub waits: u64,
    pub waits_granted: u64,
    pub wait_timeouts: u64,
    pub shed: u64,
    /// Grants that took a slot owed to an earlier waiter (S8; counted, and
    /// a violation, in every scenario: the server's queue has no excuse).
    pub overtakes: u64,
    /// Acquires over several keys at once (`acquire_all`), and their grants.
    pub composites: u64,
    pub composites_granted: u64,
    /// Hand-overs heard with under half their reservation left, checked
    /// again (the limiters' `handed_late`).
    pub handed_late: u64,
}

#[derive(Debug, Default)]
struct KeyState {
    limit: u32,
    holders: u32,
    peak: u32,
    /// `Exceeded` outcomes seen by callers, and denials Redis really made.
    exceeded: u64,
    denials: u64,
    /// Since when a waiter in the key's queue could have been granted (S9),
    /// as of the last command.
    servable_since: Option<Duration>,
    /// Such spells of the last few seconds that lasted longer than a
    /// wake-up may take (start, end): S9 holds them against each waiter
    /// served since, not only against one still waiting at its deadline.
    long_spells: Vec<(Duration, Duration)>,
}

/// How long a closed spell is kept: longer than any wait.
const SPELL_MEMORY: Duration = Duration::from_secs(2);

/// Shorter spells are not kept: no wake-up bound is this tight.
const SPELL_FLOOR: Duration = Duration::from_millis(40);

#[derive(Debug)]
pub struct Ledger {
    exact: bool,
    keys: BTreeMap<&'static str, KeyState>,
    pub counters: Counters,
    pub violations: Vec<Violation>,
    recent: VecDeque<String>,
    trace: DefaultHasher,
    /// Lease ids callers hold now (S10), and when each let-go one was let go.
    holding: HashSet<String>,
    let_go: HashMap<String, Duration>,
    /// The highest fencing token Redis granted per key (S7), across restarts.
    tokens: HashMap<&'static str, u64>,
    /// `INFLIGHT_SIM_TRACE` set: every event is printed as it is noted.
    trace_all: bool,
    /// S13, in calm runs: how soon a slot a release handed to a waiter must
    /// reach its caller (a wake-up; a limiter with a waiting composite
    /// acquire under way: its confirmation), and the hand-overs not heard
    /// yet (by lease id, with when Redis made them and the bound that
    /// applies to each, decided then).
    hand_over_bound: Option<(Duration, Duration)>,
    handed: BTreeMap<String, (Duration, Duration)>,
    /// Which client each lease-id instance is (learned from its holds),
    /// and the waiting composite acquires each client has under way.
    instances: HashMap<String, String>,
    composite_waits: HashMap<String, u32>,
}

/// The client part of a caller's name (`client1/c4` → `client1`).
fn client_of(who: &str) -> &str {
    who.split('/').next().unwrap_or(who)
}

/// The instance part of a lease id (`<instance>-<counter>`).
fn instance_of(lease: &str) -> &str {
    lease.rsplit_once('-').map_or(lease, |(instance, _)| instance)
}

impl Ledger {
    pub fn new(keys: &[(&'static str, u32)], exact: bool) -> Self {
        Self {
            exact,
            keys: keys
                .iter()
                .map(|&(name, limit)| {
                    (
                        name,
                        KeyState {
                            limit,
                            ..KeyState::default()
                        },
                    )
                })
                .collect(),
            trace_all: std::env::var_os("INFLIGHT_SIM_TRACE").is_some(),
            counters: Counters::default(),
            violations: Vec::new(),
            recent: VecDeque::new(),
            trace: DefaultHasher::new(),
            holding: HashSet::new(),
            let_go: HashMap::new(),
            tokens: HashMap::new(),
            hand_over_bound: None,
            handed: BTreeMap::new(),
            instances: HashMap::new(),
            composite_waits: HashMap::new(),
        }
    }

    /// S13 applies (a run with no faults): a slot a release hands to a
    /// waiter reaches the waiter's caller within `bound`, or (its limiter
    /// waiting for a composite acquire's other parts) is confirmed within
    /// `composite`.
    pub fn expect_hand_overs_heard(&mut self, bound: Duration, composite: Duration) {
        self.hand_over_bound = Some((bound, composite));
    }

    /// `who` starts (`true`) or ends a waiting composite acquire: a part
    /// handed to its limiter meanwhile stays there until the others come.
    pub fn composite_waiting(&mut self, who: &str, starts: bool) {
        let waits = self.composite_waits.entry(client_of(who).to_owned()).or_default();
        *waits = if starts { *waits + 1 } else { waits.saturating_sub(1) };
    }

    /// Redis handed a freed slot to waiter `lease` (S13). A client never
    /// seen holding, or one waiting for a composite acquire's other parts,
    /// may keep it in its limiter until its confirmation.
    pub fn server_handed(&mut self, at: Duration, lease: String) {
        let Some((bound, composite)) = self.hand_over_bound else {
            return;
        };
        if self.holding.contains(&lease) {
            return;
        }
        let bound = match self.instances.get(instance_of(&lease)) {
            Some(client) if self.composite_waits.get(client).copied().unwrap_or(0) == 0 => bound,
            _ => composite,
        };
        self.handed.insert(lease, (at, bound));
    }

    /// The client of waiter `lease` named it in a call (a renewal that
    /// confirms a hand-over, a check, a `LEAVE`): it heard (S13).
    pub fn hand_over_heard(&mut self, lease: &str) {
        self.handed.remove(lease);
    }

    /// The hand-overs older than S13's bound that no caller has taken:
    /// each is checked once, against what Redis holds then
    /// ([`Ledger::unheard_hand_overs`]).
    pub fn overdue_hand_overs(&mut self, at: Duration) -> Vec<String> {
        let overdue: Vec<String> = self
            .handed
            .iter()
            .filter(|(_, (made, bound))| at.saturating_sub(*made) > *bound)
            .map(|(lease, _)| lease.clone())
            .collect();
        for lease in &overdue {
            self.handed.remove(lease);
        }
        overdue
    }

    /// S13 no unheard hand-over: of the overdue hand-overs (none of which
    /// its client has answered), those Redis still holds (`live`) and no
    /// caller does went unheard.
    pub fn unheard_hand_overs(&mut self, at: Duration, live: Vec<String>) {
        let Some((bound, composite)) = self.hand_over_bound else {
            return;
        };
        let unheard: Vec<String> = live.into_iter().filter(|lease| !self.holding.contains(lease)).collect();
        for lease in unheard {
            let detail = format!(
                "a slot handed to {lease} reached no caller within {bound:?} ({composite:?} for a limiter with a composite acquire waiting)"
            );
            self.violate(at, "S13 hand-overs heard", detail);
        }
    }

    /// Notes an event in the trace (hashed for S5) and the recent-events window.
    pub fn note(&mut self, at: Duration, what: impl Into<String>) {
        let what = what.into();
        (at.as_micros(), &what).hash(&mut self.trace);
        if self.recent.len() == 40 {
            self.recent.pop_front();
        }
        let line = format!("{:>9.3}s {what}", at.as_secs_f64());
        if self.trace_all {
            eprintln!("{line}");
        }
        self.recent.push_back(line);
    }

    pub fn violate(&mut self, at: Duration, invariant: &'static str, detail: String) {
        self.note(at, format!("VIOLATION {invariant}: {detail}"));
        self.violations.push(Violation { invariant, detail, at });
    }

    /// A caller starts holding a permit of `weight` units for `key` (S1:
    /// the units held at once never exceed the limit).
    /// `who` holds `weight` units of `key`: with them, the units held must
    /// fit the key's limit. (A grant under a lower per-call limit is held to
    /// that limit at the instant the server made it: `server_fairness`,
    /// from the server's records. Counted here, when its caller got it,
    /// a grant under a higher limit made just after it may already count.)
    pub fn hold(&mut self, at: Duration, who: &str, key: &'static str, lease: Option<String>, weight: u32) {
        if let Some(lease) = lease {
            self.let_go.remove(&lease);
            self.handed.remove(&lease);
            let instance = instance_of(&lease).to_owned();
            self.instances
                .entry(instance)
                .or_insert_with(|| client_of(who).to_owned());
            self.holding.insert(lease);
        }
        let state = self.keys.get_mut(key).expect("known key");
        state.holders += weight;
        state.peak = state.peak.max(state.holders);
        let (holders, limit) = (state.holders, state.limit);
        self.note(at, format!("{who} holds {weight} of {key} ({holders}/{limit})"));
        if self.exact && holders > limit {
            self.violate(
                at,
                "S1 exactness",
                format!("{holders} units of {key} held at once, limit {limit}"),
            );
        }
    }

    pub fn unhold(&mut self, at: Duration, who: &str, key: &'static str, lease: Option<String>, weight: u32) {
        if let Some(lease) = lease {
            self.holding.remove(&lease);
            self.let_go.insert(lease, at);
        }
        let state = self.keys.get_mut(key).expect("known key");
        state.holders -= weight;
        self.note(at, format!("{who} lets go of {weight} of {key}"));
    }

    /// S11: a kept-alive lease's holder was told its lease is lost. With
    /// Redis reachable all along (`calm`) that must never happen: renewals
    /// come a third of the TTL after each extension, with time for retries.
    /// Otherwise it is counted; the holder stops at once, and S1 checks that
    /// the signal came before anyone else could be granted its units.
    pub fn kept_alive_lost(&mut self, at: Duration, who: &str, key: &'static str, reason: &str, calm: bool) {
        self.counters.keep_alive_lost += 1;
        self.note(at, format!("{who}'s kept-alive lease on {key} is lost: {reason}"));
        if calm {
            let detail = format!("{who}'s kept-alive lease on {key} was lost ({reason}) with Redis up");
            self.violate(at, "S11 keep-alive", detail);
        }
    }

    /// A renewal found `who`'s lease on `key` gone. Before the lease's own
    /// expiry that can only be a lost write, which an exact run does not have.
    pub fn lease_lost(&mut self, at: Duration, who: &str, key: &'static str, before_expiry: bool) {
        self.counters.leases_lost += 1;
        self.note(at, format!("{who} lost its lease on {key}"));
        if self.exact && before_expiry {
            self.violate(
                at,
                "S1 exactness",
                format!("{who}'s lease on {key} was gone before its expiry"),
            );
        }
    }

    pub fn exceeded(&mut self, key: &'static str) {
        self.keys.get_mut(key).expect("known key").exceeded += 1;
    }

    /// S7: Redis (the model) granted a lease on `key` with fencing `token`,
    /// in execution order: above every token granted on `key` before it,
    /// whatever restarted or failed over in between.
    pub fn server_granted(&mut self, at: Duration, key: &'static str, token: u64) {
        if token == 0 {
            // A fail-fast grant that asked for no token: nothing to order.
            return;
        }
        let last = self.tokens.entry(key).or_insert(0);
        if token <= *last {
            let detail = format!("a grant on {key} with fencing token {token}, after {last}");
            self.violate(at, "S7 fencing", detail);
        } else {
            *last = token;
        }
    }

    /// S8 fairness: Redis granted `weight` units of `key` while live
    /// waiters queued before the grantee (all of them, for a fail-fast
    /// acquire) were owed `ahead` units of `free` free ones. With `ahead +
    /// weight > free` the grant took units one of them was owed.
    pub fn server_fairness(&mut self, at: Duration, key: &'static str, ahead: u64, free: u64, weight: u64) {
        if ahead + weight > free {
            self.counters.overtakes += 1;
            let detail =
                format!("a grant of {weight} on {key} with {ahead} units owed to earlier waiters and {free} free");
            self.violate(at, "S8 fairness", detail);
        }
    }

    /// After each command: whether a live waiter in `key`'s queue could be
    /// granted now (the simulated Redis walks the queue as the scripts'
    /// fairness rule does). S9 tracks since when, and keeps the long spells.
    pub fn server_waiters(&mut self, at: Duration, key: &'static str, one_could_go: bool) {
        let state = self.keys.get_mut(key).expect("known key");
        state.servable_since = match (one_could_go, state.servable_since) {
            (false, Some(since)) => {
                if at.saturating_sub(since) > SPELL_FLOOR {
                    state
                        .long_spells
                        .retain(|(_, end)| at.saturating_sub(*end) < SPELL_MEMORY);
                    state.long_spells.push((since, at));
                }
                None
            }
            (false, None) => None,
            (true, None) => Some(at),
            (true, since) => since,
        };
    }

    /// S9 no lost wake-up: a waiter of `key` reached its deadline. It must
    /// not have done so while a waiter in line (it, or one ahead of it)
    /// could have been granted for longer than `bound`: a hand-over or a
    /// wake-up would have ended that.
    pub fn wait_timed_out(&mut self, at: Duration, who: &str, key: &'static str, bound: Option<Duration>) {
        self.counters.wait_timeouts += 1;
        let since = self.keys.get(key).expect("known key").servable_since;
        self.note(
            at,
            format!("{who} timed out waiting on {key} (a waiter could go since {since:?})"),
        );
        if let (Some(bound), Some(since)) = (bound, since) {
            let stuck_for = at.saturating_sub(since);
            if stuck_for > bound {
                let detail = format!(
                    "{who} timed out on {key} while a waiter in line could have been granted for {stuck_for:?} (bound {bound:?})"
                );
                self.violate(at, "S9 no lost wake-up", detail);
            }
        }
    }

    /// S9 at a grant: a caller that waited on `key` alone since `started`
    /// was served at `at`. No waiter in line may have been able to go for
    /// longer than `bound` while it waited: that one (it, or one whose
    /// grant would have let it move up) should have had its slot within a
    /// wake-up, not at a periodic check.
    pub fn wait_served(&mut self, at: Duration, who: &str, key: &'static str, started: Duration, bound: Duration) {
        let state = self.keys.get(key).expect("known key");
        let open = state.servable_since.map(|since| (since, at));
        let longest = state
            .long_spells
            .iter()
            .copied()
            .chain(open)
            .map(|(since, end)| (since, end.min(at).saturating_sub(since.max(started))))
            .max_by_key(|(_, overlap)| *overlap);
        if let Some((since, stuck_for)) = longest.filter(|(_, stuck_for)| *stuck_for > bound) {
            let detail = format!(
                "{who} waited on {key} from {started:?} to {at:?} while a waiter in line could have been granted for {stuck_for:?} from {since:?} (bound {bound:?})"
            );
            self.violate(at, "S9 no lost wake-up", detail);
        }
    }

    /// Redis (the model) executed a denial on `key`.
    pub fn server_denied(&mut self, key: &'static str) {
        self.keys.get_mut(key).expect("known key").denials += 1;
    }

    /// S4: every `Exceeded` a caller saw must be backed by a denial Redis made.
    pub fn check_honest_denials(&mut self, at: Duration) {
        let unbacked: Vec<_> = self
            .keys
            .iter()
            .filter(|(_, s)| s.exceeded > s.denials)
            .map(|(k, s)| format!("{k}: {} Exceeded, {} denials", s.exceeded, s.denials))
            .collect();
        for detail in unbacked {
            self.violate(at, "S4 honest errors", detail);
        }
    }

    /// S10 no ghost lease: every lease Redis holds (`live`, as key and id)
    /// belongs to a caller that holds it, or that let it go within `grace`
    /// (its release is on the wire).
    pub fn check_no_ghosts(&mut self, at: Duration, live: &[(String, String)], grace: Duration) {
        let ghosts: Vec<&(String, String)> = live
            .iter()
            .filter(|(_, id)| {
                let let_go_long_ago = self.let_go.get(id).is_none_or(|gone| at.saturating_sub(*gone) > grace);
                !self.holding.contains(id) && let_go_long_ago
            })
            .collect();
        if !ghosts.is_empty() {
            let sample: Vec<_> = ghosts.iter().take(3).collect();
            let detail = format!("{} leases in Redis that no caller holds, e.g. {sample:?}", ghosts.len());
            self.violate(at, "S10 no ghost lease", detail);
        } else {
            self.note(at, format!("S10: {} live leases, all held", live.len()));
        }
    }

    /// The highest number of simultaneous holders per key, with its limit.
    pub fn peaks(&self) -> Vec<(&'static str, u32, u32)> {
        self.keys.iter().map(|(k, s)| (*k, s.peak, s.limit)).collect()
    }

    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }

    pub fn recent_events(&self) -> String {
        let mut out = String::new();
        for line in &self.recent {
            let _ = writeln!(out, "    {line}");
        }
        out
    }
}
