//! Every script call, encoded in one place: the Rust side of each script's
//! KEYS/ARGV contract (the Lua side is at the top of its file). The client,
//! the tests and the benches all write their calls through these.

use bytes::{Bytes, BytesMut};

use super::{Eval, ScriptKind, Scripts};
use crate::key::SubjectKeys;
use crate::resp::encode_command;

/// What every call that writes a lease names: whose lease, which one, when
/// it ends and until when the call may act (both in the server's
/// milliseconds).
#[derive(Clone, Copy, Debug)]
pub struct LeaseCall<'a> {
    /// The subject's keys.
    pub keys: &'a SubjectKeys,
    /// The lease id, as written in the lease set.
    pub id: &'a [u8],
    /// The lease's end (absolute).
    pub expiry_ms: u64,
    /// After it, the script does nothing.
    pub valid_until_ms: u64,
    /// Draw a fencing token on a grant. `ACQUIRE` and `ACQUIRE_ACROSS` skip
    /// the counter without it; the other scripts draw one always (a batch
    /// or a hand-over pays one counter write for all its grants).
    pub fenced: bool,
}

/// `ACQUIRE`'s and `ACQUIRE_ACROSS`'s fencing argument.
fn fencing(fenced: bool) -> &'static [u8] {
    if fenced {
        b"1"
    } else {
        b"0"
    }
}

/// The keys and numbers an acquire of one lease is written with, built
/// once: `ACQUIRE`'s six keys and its first five arguments (those
/// `ACQUIRE_WAITING` and `ACQUIRE_ACROSS` share).
struct AcquireParts {
    tombstone: Bytes,
    fence: Bytes,
    queue: Bytes,
    waiters: Bytes,
    holds: Bytes,
    expiry: String,
    limit: String,
    valid_until: String,
}

impl AcquireParts {
    fn new(call: &LeaseCall, limit: u32) -> Self {
        let keys = call.keys;
        Self {
            tombstone: keys.tombstone_of(call.id),
            fence: keys.fence(),
            queue: keys.queue(),
            waiters: keys.waiters(),
            holds: keys.holds(),
            expiry: call.expiry_ms.to_string(),
            limit: limit.to_string(),
            valid_until: call.valid_until_ms.to_string(),
        }
    }

    /// Lease set, tombstone, fencing counter, queue, waiters, held hash.
    fn keys<'a>(&'a self, call: &LeaseCall<'a>) -> [&'a [u8]; 6] {
        [
            call.keys.leases(),
            &self.tombstone,
            &self.fence,
            &self.queue,
            &self.waiters,
            &self.holds,
        ]
    }

    /// Expiry, limit, lease id, valid-until, the recovery hold key.
    fn args<'a>(&'a self, call: &LeaseCall<'a>, hold: &'a [u8]) -> [&'a [u8]; 5] {
        [
            self.expiry.as_bytes(),
            self.limit.as_bytes(),
            call.id,
            self.valid_until.as_bytes(),
            hold,
        ]
    }
}

/// What a waiting acquire adds to a fail-fast one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitArgs<'a> {
    /// How long the waiter keeps its place without calling again (ms).
    pub lifetime_ms: u64,
    /// How long its caller may still wait (ms): a longer expected wait is
    /// shed at once.
    pub patience_ms: u64,
    /// The id this waiter went on from, empty for none: the call takes
    /// over what that id has (a slot handed to it, its place in the queue).
    pub previous: &'a [u8],
}

impl Scripts {
    /// `ACQUIRE` (or, with `wait`, `ACQUIRE_WAITING`) of one lease under
    /// `limit`; `hold` is the recovery hold key (empty for none).
    pub fn encode_acquire(
        &self,
        out: &mut BytesMut,
        eval: Eval,
        call: LeaseCall,
        limit: u32,
        hold: &[u8],
        wait: Option<WaitArgs>,
    ) {
        let parts = AcquireParts::new(&call, limit);
        let mut args = parts.args(&call, hold).to_vec();
        match wait {
            None => {
                args.push(fencing(call.fenced));
                self.encode_call(out, ScriptKind::Acquire, eval, &parts.keys(&call), &args)
            }
            Some(wait) => {
                let (lifetime, patience) = (wait.lifetime_ms.to_string(), wait.patience_ms.to_string());
                args.extend([lifetime.as_bytes(), patience.as_bytes()]);
                if !wait.previous.is_empty() {
                    args.push(wait.previous);
                }
                let wake = call.keys.wake_channel();
                let [leases, tombstone, fence, queue, waiters, holds] = parts.keys(&call);
                let keys = [leases, tombstone, fence, queue, waiters, holds, &wake];
                self.encode_call(out, ScriptKind::AcquireWaiting, eval, &keys, &args)
            }
        }
    }

    /// `ACQUIRE_MANY` of several leases of one subject and limit, with one
    /// expiry and one valid-until (`EVALSHA`): the subject's five keys, one
    /// tombstone per id, the arguments, then the ids (in the tombstones'
    /// order).
    #[allow(clippy::too_many_arguments)] // the script's arguments, named
    pub fn encode_acquire_many(
        &self,
        out: &mut BytesMut,
        keys: &SubjectKeys,
        ids: &[&[u8]],
        expiry_ms: u64,
        limit: u32,
        valid_until_ms: u64,
        hold: &[u8],
    ) {
        let tombstones: Vec<_> = ids.iter().map(|id| keys.tombstone_of(id)).collect();
        let (fence, queue, waiters, holds) = (keys.fence(), keys.queue(), keys.waiters(), keys.holds());
        let numkeys = (5 + ids.len()).to_string();
        let (expiry, limit, valid_until) = (expiry_ms.to_string(), limit.to_string(), valid_until_ms.to_string());
        let mut command: Vec<&[u8]> = Vec::with_capacity(12 + 2 * ids.len());
        command.extend([
            b"EVALSHA".as_slice(),
            self.acquire_many.sha.as_bytes(),
            numkeys.as_bytes(),
            keys.leases(),
            &fence,
            &queue,
            &waiters,
            &holds,
        ]);
        command.extend(tombstones.iter().map(|t| &t[..]));
        command.extend([expiry.as_bytes(), limit.as_bytes(), valid_until.as_bytes(), hold]);
        command.extend_from_slice(ids);
        encode_command(out, &command);
    }

    /// `ACQUIRE_ACROSS` of fail-fast acquires of different subjects, each
    /// with `ACQUIRE`'s six keys and six arguments, under its own limit
    /// (`EVALSHA`); `hold` is the recovery hold key (empty for none).
    pub fn encode_acquire_across(&self, out: &mut BytesMut, calls: &[(LeaseCall, u32)], hold: &[u8]) {
        self.encode_acquires(out, ScriptKind::AcquireAcross, Eval::Sha, calls, hold);
    }

    /// `ACQUIRE_ALL`: one lease on each subject, all or nothing, with the
    /// same keys and arguments as `ACQUIRE_ACROSS`.
    pub fn encode_acquire_all(&self, out: &mut BytesMut, eval: Eval, calls: &[(LeaseCall, u32)], hold: &[u8]) {
        self.encode_acquires(out, ScriptKind::AcquireAll, eval, calls, hold);
    }

    /// A script of `kind` over fail-fast acquires, each with `ACQUIRE`'s six
    /// keys and six arguments.
    fn encode_acquires(
        &self,
        out: &mut BytesMut,
        kind: ScriptKind,
        eval: Eval,
        calls: &[(LeaseCall, u32)],
        hold: &[u8],
    ) {
        let parts: Vec<AcquireParts> = calls
            .iter()
            .map(|(call, limit)| AcquireParts::new(call, *limit))
            .collect();
        let numkeys = (6 * calls.len()).to_string();
        let (verb, body) = self.get(kind).named(eval);
        let mut command: Vec<&[u8]> = Vec::with_capacity(3 + 12 * calls.len());
        command.extend([verb, body, numkeys.as_bytes()]);
        for ((call, _), parts) in calls.iter().zip(&parts) {
            command.extend(parts.keys(call));
        }
        for ((call, _), parts) in calls.iter().zip(&parts) {
            command.extend(parts.args(call, hold));
            command.push(fencing(call.fenced));
        }
        encode_command(out, &command);
    }

    /// `RENEW` of a lease to a new expiry.
    pub fn encode_renew(&self, out: &mut BytesMut, eval: Eval, call: LeaseCall) {
        let (expiry, valid_until) = (call.expiry_ms.to_string(), call.valid_until_ms.to_string());
        self.encode_call(
            out,
            ScriptKind::Renew,
            eval,
            &[call.keys.leases()],
            &[expiry.as_bytes(), call.id, valid_until.as_bytes()],
        )
    }

    /// `REASSERT` of a held lease granted under `limit` (by text: rare).
    pub fn encode_reassert(&self, out: &mut BytesMut, call: LeaseCall, limit: u32) {
        let keys = call.keys;
        let (expiry, limit, valid_until) = (
            call.expiry_ms.to_string(),
            limit.to_string(),
            call.valid_until_ms.to_string(),
        );
        self.encode_call(
            out,
            ScriptKind::Reassert,
            Eval::Text,
            &[
                keys.leases(),
                &keys.tombstone_of(call.id),
                &keys.queue(),
                &keys.waiters(),
                &keys.holds(),
            ],
            &[call.id, expiry.as_bytes(), limit.as_bytes(), valid_until.as_bytes()],
        )
    }

    /// `RELEASE` of leases of one subject (by `eval`): the subject's six keys, how long the leases were
    /// held on average (ms; `None` when unknown, as for releases a recovery sends again: the
    /// subject's average is then left as it is), the recovery hold key (empty for none), the ids.
    pub fn encode_release<'a>(
        &self,
        out: &mut BytesMut,
        keys: &SubjectKeys,
        eval: Eval,
        held_ms: Option<u64>,
        hold: &[u8],
        ids: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let ids: Vec<&[u8]> = ids.into_iter().collect();
        let (queue, waiters, holds, wake, fence) = (
            keys.queue(),
            keys.waiters(),
            keys.holds(),
            keys.wake_channel(),
            keys.fence(),
        );
        let held = held_ms.map(|ms| ms.to_string()).unwrap_or_default();
        let (verb, body) = self.release.named(eval);
        let mut command: Vec<&[u8]> = vec![
            verb,
            body,
            b"6",
            keys.leases(),
            &queue,
            &waiters,
            &holds,
            &wake,
            &fence,
            held.as_bytes(),
            hold,
        ];
        command.extend_from_slice(&ids);
        encode_command(out, &command);
    }

    /// `COMPENSATE` of a lease no caller got: a tombstone until
    /// `tombstone_until_ms` (0: none, the request has run).
    pub fn encode_compensate(
        &self,
        out: &mut BytesMut,
        eval: Eval,
        keys: &SubjectKeys,
        id: &[u8],
        tombstone_until_ms: u64,
    ) {
        let until = tombstone_until_ms.to_string();
        self.encode_call(
            out,
            ScriptKind::Compensate,
            eval,
            &[
                keys.leases(),
                &keys.tombstone_of(id),
                &keys.queue(),
                &keys.waiters(),
                &keys.wake_channel(),
                &keys.holds(),
            ],
            &[until.as_bytes(), id],
        )
    }

    /// `LEAVE` of a waiter.
    pub fn encode_leave(&self, out: &mut BytesMut, keys: &SubjectKeys, id: &[u8]) {
        self.encode_call(
            out,
            ScriptKind::Leave,
            Eval::Sha,
            &[
                &keys.queue(),
                &keys.waiters(),
                &keys.wake_channel(),
                keys.leases(),
                &keys.holds(),
            ],
            &[id],
        )
    }

    /// `INSPECT` of a subject, listing up to `holders` leases (by text).
    pub fn encode_inspect(&self, out: &mut BytesMut, keys: &SubjectKeys, holders: u32) {
        let holders = holders.to_string();
        self.encode_call(
            out,
            ScriptKind::Inspect,
            Eval::Text,
            &[keys.leases(), &keys.holds(), &keys.waiters()],
            &[holders.as_bytes()],
        )
    }

    /// `MARK`: read the lease-data marker, or write `value` (by text).
    pub fn encode_mark(&self, out: &mut BytesMut, marker: &[u8], value: &[u8]) {
        let ttl = super::MARKER_TTL_MS.to_string();
        self.encode_call(out, ScriptKind::Mark, Eval::Text, &[marker], &[value, ttl.as_bytes()])
    }

    /// `HOLD`: the recovery hold for at least `window_ms` (by text).
    pub fn encode_hold(&self, out: &mut BytesMut, hold: &[u8], window_ms: u64) {
        let window = window_ms.max(1).to_string();
        self.encode_call(out, ScriptKind::Hold, Eval::Text, &[hold], &[window.as_bytes()])
    }
}
