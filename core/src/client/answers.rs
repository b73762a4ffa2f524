//! What a reply to a call says, read and checked, before anyone acts on it:
//! the shape each script answers with, the echo of the caller's own lease
//! id, and the statuses. Pure functions: no state is touched here; the
//! client decides what each answer means for callers (`replies.rs`).

use std::time::{Duration, Instant};

use super::error_class::{unexpected, unexpected_status};
use super::request::{AcquireOp, ReleaseJob, RenewOp};
use crate::event::{ConnectionError, Holder, Inspection, KeysPage};
use crate::key::Key;
use crate::resp::Frame;
use crate::scripts::{RECOVERING, STALE, WITHHELD};

/// A reply that is not an answer to believe.
#[derive(Debug)]
pub(super) enum Misread {
    /// The server refused the call: what it means depends on the error's
    /// class (a redirect, a script to load, a refusal...).
    Refused(String),
    /// A shape, status or echo that says the replies are off: the call's
    /// fate is unknown and the connection cannot be trusted any more.
    Garbled(ConnectionError),
}

/// What a trusted reply to one acquire says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AcquireAnswer {
    /// A lease, with its fencing token (always positive).
    Granted(u64),
    /// The limit is reached.
    Exceeded,
    /// The id was tombstoned: no lease exists.
    Tombstoned,
    /// It ran after its valid-until and took nothing.
    Stale,
    /// The server holds new grants while leases are written back.
    Recovering,
    /// A waiting acquire took its place in the subject's queue: `entered`
    /// with this call, or kept the place it had.
    Queued { entered: bool },
    /// A waiting acquire whose expected wait is longer than its deadline.
    Shed(Duration),
}

/// What a trusted reply to one renewal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RenewAnswer {
    Extended,
    /// The lease is gone (expired, or released by another hand).
    Gone,
    /// It ran too late and changed nothing.
    Stale,
}

/// An acquire answers `{status, id, token, reclaimed}`, a waiting one
/// `{status, id, token, ahead, expected ms, reclaimed}`: `reclaimed` counts
/// the expired units its prune removed (returned beside the answer).
pub(super) fn acquire(op: &AcquireOp, frame: Frame, check_echo: bool) -> Result<(AcquireAnswer, u64), Misread> {
    let items = match frame {
        Frame::Array(items) => items,
        Frame::Error(message) => return Err(Misread::Refused(message.to_string())),
        other => return Err(Misread::Garbled(unexpected("acquire", &other))),
    };
    let (status, echo, token, expected_ms, reclaimed) = match (&items[..], op.wait.is_some()) {
        (
            [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(_), Frame::Integer(expected), Frame::Integer(reclaimed)],
            true,
        ) if *expected >= 0 && *reclaimed >= 0 => (*status, echo, *token, *expected as u64, *reclaimed),
        (
            [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(reclaimed)],
            false,
        ) if *reclaimed >= 0 => (*status, echo, *token, 0, *reclaimed),
        _ => return Err(Misread::Garbled(unexpected("acquire", &Frame::Array(items)))),
    };
    if check_echo && *echo != op.call.lease_bytes {
        return Err(Misread::Garbled(ConnectionError::EchoMismatch));
    }
    let answer = match (status, op.wait.is_some()) {
        (2, true) if token == 0 || token == 1 => AcquireAnswer::Queued { entered: token == 1 },
        (0, true) => AcquireAnswer::Shed(Duration::from_millis(expected_ms)),
        (status, _) => acquire_status(op, status, token).map_err(Misread::Garbled)?,
    };
    Ok((answer, reclaimed as u64))
}

/// `ACQUIRE`'s statuses, once shape and echo are checked.
pub(super) fn acquire_status(op: &AcquireOp, status: i64, token: i64) -> Result<AcquireAnswer, ConnectionError> {
    Ok(match status {
        // A grant carries a positive token, or none (0) when the acquire
        // asked for none; anything else is a lie.
        1 if token > 0 => AcquireAnswer::Granted(token as u64),
        1 if token == 0 && !op.fenced => AcquireAnswer::Granted(0),
        0 => AcquireAnswer::Exceeded,
        // We never reuse a compensated id, so a trusted connection should
        // not say this.
        -1 => AcquireAnswer::Tombstoned,
        STALE => AcquireAnswer::Stale,
        RECOVERING => AcquireAnswer::Recovering,
        _ => return Err(unexpected_status("acquire", status, &op.call.lease_bytes)),
    })
}

/// One reply for several acquires of one subject: a triple
/// `{status, id, token}` per acquire, then the units the prune reclaimed.
/// Every triple's shape and echo are checked before any status is read.
pub(super) fn batch(
    ops: &[AcquireOp],
    frame: Frame,
    check_echo: bool,
) -> Result<(Vec<Result<AcquireAnswer, ConnectionError>>, u64), Misread> {
    triples(ops, frame, check_echo, acquire_status)
}

/// What a trusted reply says of one part of an `ACQUIRE_ALL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartAnswer {
    /// As `ACQUIRE` would answer it.
    Own(AcquireAnswer),
    /// It had room, and was not taken because another part refused.
    Withheld,
}

/// `ACQUIRE_ALL`'s reply: `ACQUIRE_ACROSS`'s shape, with one more status.
pub(super) fn bundle(
    parts: &[AcquireOp],
    frame: Frame,
    check_echo: bool,
) -> Result<(Vec<Result<PartAnswer, ConnectionError>>, u64), Misread> {
    triples(parts, frame, check_echo, |op, status, token| match status {
        WITHHELD => Ok(PartAnswer::Withheld),
        status => acquire_status(op, status, token).map(PartAnswer::Own),
    })
}

/// A triple `{status, id, token}` per acquire, then the units reclaimed,
/// each status read by `status`.
fn triples<T>(
    ops: &[AcquireOp],
    frame: Frame,
    check_echo: bool,
    status: impl Fn(&AcquireOp, i64, i64) -> Result<T, ConnectionError>,
) -> Result<(Vec<Result<T, ConnectionError>>, u64), Misread> {
    let items = match frame {
        Frame::Error(message) => return Err(Misread::Refused(message.to_string())),
        Frame::Array(items) if items.len() == 3 * ops.len() + 1 => items,
        other => return Err(Misread::Garbled(unexpected("acquire batch", &other))),
    };
    let reclaimed = match items.last() {
        Some(Frame::Integer(reclaimed)) if *reclaimed >= 0 => *reclaimed as u64,
        _ => return Err(Misread::Garbled(unexpected("acquire batch", &Frame::Array(items)))),
    };
    let triples = || items[..items.len() - 1].chunks_exact(3);
    let well_formed =
        triples().all(|triple| matches!(triple, [Frame::Integer(_), Frame::BulkString(_), Frame::Integer(_)]));
    if !well_formed {
        return Err(Misread::Garbled(unexpected("acquire batch", &Frame::Array(items))));
    }
    let echoed = triples()
        .zip(ops)
        .all(|(triple, op)| matches!(&triple[1], Frame::BulkString(echo) if *echo == op.call.lease_bytes));
    if check_echo && !echoed {
        return Err(Misread::Garbled(ConnectionError::EchoMismatch));
    }
    let answers = triples()
        .zip(ops)
        .map(|(triple, op)| match triple {
            [Frame::Integer(code), _, Frame::Integer(token)] => status(op, *code, *token),
            _ => unreachable!("checked above"),
        })
        .collect();
    Ok((answers, reclaimed))
}

/// A renewal answers `{status, id, reclaimed}`.
pub(super) fn renew(op: &RenewOp, frame: Frame, check_echo: bool) -> Result<(RenewAnswer, u64), Misread> {
    let (status, echo, reclaimed) = match frame {
        Frame::Array(items) => match &items[..] {
            [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(reclaimed)] if *reclaimed >= 0 => {
                (*status, echo.clone(), *reclaimed as u64)
            }
            _ => return Err(Misread::Garbled(unexpected("renew", &Frame::Array(items)))),
        },
        Frame::Error(message) => return Err(Misread::Refused(message.to_string())),
        other => return Err(Misread::Garbled(unexpected("renew", &other))),
    };
    if check_echo && echo != op.call.lease_bytes {
        return Err(Misread::Garbled(ConnectionError::EchoMismatch));
    }
    let answer = match status {
        1 => RenewAnswer::Extended,
        0 => RenewAnswer::Gone,
        STALE => RenewAnswer::Stale,
        _ => {
            return Err(Misread::Garbled(unexpected_status(
                "renew",
                status,
                &op.call.lease_bytes,
            )))
        }
    };
    Ok((answer, reclaimed))
}

/// `{now, units, limit, waiting, id, expiry…}`: what a subject holds, its
/// holders' expiries counted from `now` (ours) by the server's own `now`.
pub(super) fn inspection(now: Instant, frame: Frame) -> Result<Inspection, Misread> {
    let items = match frame {
        Frame::Array(items) => items,
        Frame::Error(message) => return Err(Misread::Refused(message.to_string())),
        other => return Err(Misread::Garbled(unexpected("inspect", &other))),
    };
    let parsed = match &items[..] {
        [Frame::Integer(server_ms), Frame::Integer(units), Frame::Integer(limit), Frame::Integer(waiting), rest @ ..]
            if *server_ms >= 0 && *units >= 0 && *waiting >= 0 && rest.len() % 2 == 0 =>
        {
            let holders: Option<Vec<Holder>> = rest
                .chunks_exact(2)
                .map(|pair| match pair {
                    [Frame::BulkString(member), Frame::Integer(expiry)] => {
                        let expires_in = Duration::from_millis(expiry.saturating_sub(*server_ms).max(0) as u64);
                        Some(Holder::from_member(member, now, expires_in))
                    }
                    _ => None,
                })
                .collect();
            holders.map(|holders| Inspection {
                units: *units as u64,
                limit_recorded: u32::try_from(*limit).ok().filter(|limit| *limit > 0),
                waiting: *waiting as u64,
                holders,
            })
        }
        _ => None,
    };
    parsed.ok_or_else(|| Misread::Garbled(unexpected("inspect", &Frame::Array(items))))
}

/// `[cursor, [key…]]`: a page of a node's lease sets, as subjects. A key
/// the pattern matched but that is not one of ours (written by hand, say)
/// is skipped.
pub(super) fn scan(key_prefix: &str, frame: Frame) -> Result<KeysPage, Misread> {
    let page = match &frame {
        Frame::Array(items) => match &items[..] {
            [Frame::BulkString(cursor), Frame::Array(keys)] => {
                let cursor = std::str::from_utf8(cursor).ok().and_then(|c| c.parse::<u64>().ok());
                let keys: Option<Vec<Key>> = keys
                    .iter()
                    .map(|key| match key {
                        Frame::BulkString(name) => Some(Key::of_leases_key(key_prefix, name)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map(|keys| keys.into_iter().flatten().collect());
                cursor.zip(keys)
            }
            _ => None,
        },
        Frame::Error(message) => return Err(Misread::Refused(message.to_string())),
        _ => None,
    };
    let (cursor, keys) = page.ok_or_else(|| Misread::Garbled(unexpected("scan", &frame)))?;
    Ok(KeysPage { cursor, keys })
}

/// `WAIT`'s answer: the replicas that acknowledged every write before it
/// (an error counts as none).
pub(super) fn replicas_acked(frame: Frame) -> Result<u32, ConnectionError> {
    match frame {
        Frame::Integer(acked) if acked >= 0 => Ok(u32::try_from(acked).unwrap_or(u32::MAX)),
        Frame::Error(_) => Ok(0),
        other => Err(unexpected("wait", &other)),
    }
}

/// Whether a release (`RELEASE`: a count), a compensation (`COMPENSATE`:
/// its own id back) or a batch of releases (one count for all) is done.
pub(super) fn released(jobs: &[ReleaseJob], frame: Frame) -> Result<(), Misread> {
    let compensation = jobs.first().is_some_and(ReleaseJob::is_compensation);
    match (frame, jobs) {
        (Frame::Integer(_), _) if !compensation => Ok(()),
        (Frame::BulkString(echo), [job]) if compensation && echo == job.lease_bytes => Ok(()),
        (Frame::BulkString(_), [_]) if compensation => Err(Misread::Garbled(ConnectionError::EchoMismatch)),
        (Frame::Error(message), _) => Err(Misread::Refused(message.to_string())),
        (other, _) => Err(Misread::Garbled(unexpected("release", &other))),
    }
}
