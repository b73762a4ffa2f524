//! The Lua scripts and the commands that carry them.
//!
//! Each script is a file of its own in `scripts/`, with its KEYS/ARGV
//! contract at the top; the helpers they share are in `scripts/lib/`, and
//! each script is put together here from the helpers it calls and its own
//! file (`include_str!`, so what Redis runs is exactly what is read there).
//!
//! Leases of one subject are a sorted set whose members are lease ids and
//! whose scores are expiry times in the *server's* milliseconds, so replicas
//! with skewed clocks agree on when a lease ends. Every expiry a script
//! writes comes from the client as an absolute instant of the server's clock
//! (never `now + ttl` at run time, which would grow with a request's delay);
//! every script that acts on a lease carries a valid-until and does nothing
//! after it. Every key a script writes expires. Arguments are checked before
//! anything is written.

use bytes::BytesMut;

use crate::resp::encode_command;
pub use calls::{LeaseCall, WaitArgs};

mod calls;

/// A script's text: the helpers it calls (`scripts/lib/NAME.lua`, in the
/// order given: each only after those it calls), then `scripts/NAME.lua`.
macro_rules! lua {
    ([$($helper:literal),*], $script:literal) => {
        concat!(
            $(include_str!(concat!("lib/", $helper, ".lua")), "\n",)*
            include_str!(concat!($script, ".lua"))
        )
    };
}

/// A fail-fast acquire script: `lib/acquire_one.lua` and what it calls,
/// then any more helpers given, then `scripts/NAME.lua`.
macro_rules! fail_fast {
    ([$($more:literal),*], $script:literal) => {
        lua!(
            [
                "args",
                "clock",
                "weight",
                "add_units",
                "cover",
                "queue",
                "fence",
                "acquire_one"
                $(, $more)*
            ],
            $script
        )
    };
}

/// Take a lease, failing fast (`scripts/acquire.lua`).
pub const ACQUIRE: &str = fail_fast!([], "acquire");

/// Fail-fast acquires of different subjects in one call, each as `ACQUIRE`
/// takes it (`scripts/acquire_across.lua`).
pub const ACQUIRE_ACROSS: &str = fail_fast!(["acquires"], "acquire_across");

/// One lease on each of several subjects, all or nothing
/// (`scripts/acquire_all.lua`).
pub const ACQUIRE_ALL: &str = fail_fast!(["acquires"], "acquire_all");

/// Take a lease or wait for one in the subject's queue
/// (`scripts/acquire_waiting.lua`).
pub const ACQUIRE_WAITING: &str = lua!(
    [
        "args",
        "clock",
        "weight",
        "units",
        "add_units",
        "cover",
        "queue",
        "serve",
        "fence"
    ],
    "acquire_waiting"
);

/// Several acquires of one subject and limit in one call
/// (`scripts/acquire_many.lua`).
pub const ACQUIRE_MANY: &str = lua!(
    ["args", "clock", "weight", "add_units", "cover", "queue", "fence"],
    "acquire_many"
);

/// Give leases back and hand freed units to waiters (`scripts/release.lua`).
pub const RELEASE: &str = lua!(
    [
        "args",
        "clock",
        "weight",
        "units",
        "add_units",
        "cover",
        "queue",
        "serve",
        "fence"
    ],
    "release"
);

/// Release a lease no caller got, with a tombstone while its request may
/// still run (`scripts/compensate.lua`).
pub const COMPENSATE: &str = lua!(["args", "clock", "weight", "units", "queue", "serve"], "compensate");

/// A waiter leaves its queue (`scripts/leave.lua`).
pub const LEAVE: &str = lua!(["clock", "weight", "units", "queue", "serve"], "leave");

/// Extend a live lease; never create one (`scripts/renew.lua`).
pub const RENEW: &str = lua!(["args", "clock", "weight", "add_units", "cover"], "renew");

/// Write back a held lease after lost data (`scripts/reassert.lua`).
pub const REASSERT: &str = lua!(["args", "clock", "weight", "add_units", "cover", "queue"], "reassert");

/// The lease-data marker (`scripts/mark.lua`).
pub const MARK: &str = lua!(["args"], "mark");

/// The recovery hold (`scripts/hold.lua`).
pub const HOLD: &str = lua!(["args"], "hold");

/// What a subject holds, for operators (`scripts/inspect.lua`).
pub const INSPECT: &str = lua!(["args", "clock"], "inspect");

/// The most leases one `ACQUIRE_MANY`, `ACQUIRE_ACROSS` or `ACQUIRE_ALL` asks for: its
/// reply (three items per lease) stays within the default reply limits.
pub const MAX_BATCH: usize = 16;

/// The most leases one release (`ZREM`, and `RELEASE` behind it) gives back.
pub const MAX_RELEASE_BATCH: usize = 64;

/// How long the lease-data marker lives after the last handshake that saw
/// it: 30 days (see `scripts/mark.lua`).
pub const MARKER_TTL_MS: u64 = 30 * 24 * 3600 * 1000;

/// The status the lease scripts answer when they run after the request's
/// valid-until (or its expiry): nothing was done, so nothing needs undoing.
pub const STALE: i64 = -2;

/// The status the acquire scripts answer while the server's recovery hold is
/// set (lease data was lost, and the fleet is writing back what it holds):
/// no new lease was taken.
pub const RECOVERING: i64 = -3;

/// The status `ACQUIRE_ALL` answers for a subject that had room when
/// another of the call's subjects refused: nothing was taken.
pub const WITHHELD: i64 = -4;

/// A script's text and its SHA1, the name `EVALSHA` knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The Lua source.
    pub text: &'static str,
    /// Its SHA1 in hex.
    pub sha: String,
}

/// How a call names its script.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eval {
    /// `EVALSHA` of the loaded script: every call, as long as the server
    /// has it.
    #[default]
    Sha,
    /// `EVAL` of the whole text: after a `NOSCRIPT`, so the call goes again
    /// at once, without waiting for the reload.
    Text,
}

impl Script {
    /// The verb and the script's name in a call: `EVALSHA` and the SHA1, or
    /// `EVAL` and the text.
    pub fn named(&self, eval: Eval) -> (&'static [u8], &[u8]) {
        match eval {
            Eval::Sha => (b"EVALSHA", self.sha.as_bytes()),
            Eval::Text => (b"EVAL", self.text.as_bytes()),
        }
    }

    /// `text` with its SHA1.
    pub fn new(text: &'static str) -> Self {
        Self {
            text,
            sha: sha1_smol::Sha1::from(text).digest().to_string(),
        }
    }
}

/// Which of our scripts a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptKind {
    // Those the handshake loads come first (`ALL`): a connection's reload
    // flags are indexed by kind.
    /// Takes one lease if the limit allows.
    Acquire,
    /// Releases a lease no caller got and tombstones its id.
    Compensate,
    /// Extends a live lease; never creates one.
    Renew,
    /// Several acquires of one subject and limit in one call.
    AcquireMany,
    /// Fail-fast acquires of different subjects (or limits) in one call.
    AcquireAcross,
    /// Takes a lease or waits for one in the subject's queue.
    AcquireWaiting,
    /// Gives leases back and wakes the subject's waiters.
    Release,
    /// Takes a waiter out of its queue.
    Leave,
    /// One lease on each of several subjects, all or nothing.
    AcquireAll,
    /// Writes back a held lease after lost data (sent as `EVAL`: rare).
    Reassert,
    /// Reads (or creates) the lease-data marker at each handshake (`EVAL`).
    Mark,
    /// Sets the recovery hold after lost data (`EVAL`).
    Hold,
    /// Reads what a subject holds, for operators (`EVAL`).
    Inspect,
}

impl ScriptKind {
    /// The scripts the handshake loads, in its order (the others run rarely,
    /// by text).
    pub const LOADED: [ScriptKind; 9] = [
        ScriptKind::Acquire,
        ScriptKind::Compensate,
        ScriptKind::Renew,
        ScriptKind::AcquireMany,
        ScriptKind::AcquireAcross,
        ScriptKind::AcquireWaiting,
        ScriptKind::Release,
        ScriptKind::Leave,
        ScriptKind::AcquireAll,
    ];
}

/// Our scripts, hashed once per client.
#[derive(Debug, Clone)]
pub struct Scripts {
    /// [`ScriptKind::Acquire`].
    pub acquire: Script,
    /// [`ScriptKind::Compensate`].
    pub compensate: Script,
    /// [`ScriptKind::Renew`].
    pub renew: Script,
    /// [`ScriptKind::AcquireMany`].
    pub acquire_many: Script,
    /// [`ScriptKind::AcquireAcross`].
    pub acquire_across: Script,
    /// [`ScriptKind::AcquireAll`].
    pub acquire_all: Script,
    /// [`ScriptKind::Reassert`].
    pub reassert: Script,
    /// [`ScriptKind::Mark`].
    pub mark: Script,
    /// [`ScriptKind::Hold`].
    pub hold: Script,
    /// [`ScriptKind::AcquireWaiting`].
    pub acquire_waiting: Script,
    /// [`ScriptKind::Release`].
    pub release: Script,
    /// [`ScriptKind::Leave`].
    pub leave: Script,
    /// [`ScriptKind::Inspect`].
    pub inspect: Script,
}

impl Scripts {
    /// The scripts, with their SHA1s computed once per process: they are
    /// constants, so every client shares them.
    pub fn shared() -> &'static Scripts {
        static SHARED: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SHARED.get_or_init(Scripts::default)
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            compensate: Script::new(COMPENSATE),
            renew: Script::new(RENEW),
            acquire_many: Script::new(ACQUIRE_MANY),
            acquire_across: Script::new(ACQUIRE_ACROSS),
            acquire_all: Script::new(ACQUIRE_ALL),
            reassert: Script::new(REASSERT),
            mark: Script::new(MARK),
            hold: Script::new(HOLD),
            acquire_waiting: Script::new(ACQUIRE_WAITING),
            release: Script::new(RELEASE),
            leave: Script::new(LEAVE),
            inspect: Script::new(INSPECT),
        }
    }
}

impl ScriptKind {
    /// Every script.
    pub const EVERY: [ScriptKind; 13] = [
        ScriptKind::Acquire,
        ScriptKind::Compensate,
        ScriptKind::Renew,
        ScriptKind::AcquireMany,
        ScriptKind::AcquireAcross,
        ScriptKind::AcquireWaiting,
        ScriptKind::Release,
        ScriptKind::Leave,
        ScriptKind::AcquireAll,
        ScriptKind::Reassert,
        ScriptKind::Mark,
        ScriptKind::Hold,
        ScriptKind::Inspect,
    ];
}

impl Scripts {
    /// Runs `text` for `kind` instead of ours: for tests that show what a
    /// deliberately broken script lets through.
    #[doc(hidden)]
    pub fn replace(&mut self, kind: ScriptKind, text: &'static str) {
        let script = match kind {
            ScriptKind::Acquire => &mut self.acquire,
            ScriptKind::Compensate => &mut self.compensate,
            ScriptKind::Renew => &mut self.renew,
            ScriptKind::AcquireMany => &mut self.acquire_many,
            ScriptKind::AcquireAcross => &mut self.acquire_across,
            ScriptKind::AcquireAll => &mut self.acquire_all,
            ScriptKind::Reassert => &mut self.reassert,
            ScriptKind::Mark => &mut self.mark,
            ScriptKind::Hold => &mut self.hold,
            ScriptKind::AcquireWaiting => &mut self.acquire_waiting,
            ScriptKind::Release => &mut self.release,
            ScriptKind::Leave => &mut self.leave,
            ScriptKind::Inspect => &mut self.inspect,
        };
        *script = Script::new(text);
    }

    /// Which script has this SHA1 (hex, lower case).
    pub fn kind_of_sha(&self, sha: &str) -> Option<ScriptKind> {
        ScriptKind::EVERY.into_iter().find(|kind| self.get(*kind).sha == sha)
    }

    /// Which script has this text.
    pub fn kind_of_text(&self, text: &[u8]) -> Option<ScriptKind> {
        ScriptKind::EVERY
            .into_iter()
            .find(|kind| self.get(*kind).text.as_bytes() == text)
    }

    /// The script of `kind`.
    pub fn get(&self, kind: ScriptKind) -> &Script {
        match kind {
            ScriptKind::Acquire => &self.acquire,
            ScriptKind::Compensate => &self.compensate,
            ScriptKind::Renew => &self.renew,
            ScriptKind::AcquireMany => &self.acquire_many,
            ScriptKind::AcquireAcross => &self.acquire_across,
            ScriptKind::AcquireAll => &self.acquire_all,
            ScriptKind::Reassert => &self.reassert,
            ScriptKind::Mark => &self.mark,
            ScriptKind::Hold => &self.hold,
            ScriptKind::AcquireWaiting => &self.acquire_waiting,
            ScriptKind::Release => &self.release,
            ScriptKind::Leave => &self.leave,
            ScriptKind::Inspect => &self.inspect,
        }
    }

    /// `EVALSHA sha numkeys keys.. args..`, or `EVAL text ..`.
    pub fn encode_call(&self, out: &mut BytesMut, kind: ScriptKind, eval: Eval, keys: &[&[u8]], args: &[&[u8]]) {
        let (verb, body) = self.get(kind).named(eval);
        let numkeys = [b'0' + keys.len() as u8];
        debug_assert!(keys.len() < 10 && 3 + keys.len() + args.len() <= 20);
        let mut command: [&[u8]; 20] = [b""; 20];
        command[..3].copy_from_slice(&[verb, body, &numkeys]);
        command[3..3 + keys.len()].copy_from_slice(keys);
        let used = 3 + keys.len();
        command[used..used + args.len()].copy_from_slice(args);
        encode_command(out, &command[..used + args.len()]);
    }

    /// Appends `SCRIPT LOAD` of the script of `kind` to `out`.
    pub fn encode_load(&self, out: &mut BytesMut, kind: ScriptKind) {
        encode_command(out, &[b"SCRIPT", b"LOAD", self.get(kind).text.as_bytes()]);
    }
}

#[cfg(test)]
mod tests;
