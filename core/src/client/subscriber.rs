//! The wake-up connection of a node: a second connection, opened only while
//! someone here waits for a slot on a subject the node serves, subscribed
//! (`SSUBSCRIBE`) to those subjects' shard channels. A release, a
//! compensation or a waiter leaving publishes there (see the scripts), and
//! the first waiter parked on that subject checks again: a freed slot
//! reaches a waiter in about one round trip, with no polling.
//!
//! Why a connection of its own: in RESP2 a subscribed connection takes no
//! other command, and the request connection's FIFO of replies must stay a
//! FIFO. Why shard channels: in a Redis Cluster a subject's channel lives on
//! the node that owns its slot, like its keys, so nothing is broadcast to
//! every node.
//!
//! Nothing here is trusted for correctness: a message lost, a subscription
//! refused (a server before Redis 7), a connection down, all only delay a
//! waiter until its periodic check.
//!
//! A sub-machine, one per node: it owns that connection's state, its
//! channels, its connect deadline and its retry time (its timers), and
//! answers with what it heard (`Heard`) and what to open or close; it knows
//! nothing of the client, the waiters or the counts.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::config::Credentials;
use crate::event::ConnectionId;
use crate::resp::{encode_command, Frame, ReplyLimits, ReplyReader};

/// One node's wake-up connection: none, opening, or open with its
/// channels; and when to open it again after a failure.
#[derive(Debug, Default)]
pub(super) struct WakeUps {
    open: Option<Subscriber>,
    /// After a failure: not opened again before then.
    retry_at: Option<Instant>,
    /// Its channels need comparing with those waited on (it opened, the
    /// server dropped one, its retry time came).
    dirty: bool,
}

#[derive(Debug)]
struct Subscriber {
    id: ConnectionId,
    /// Until the socket is open, when the attempt is given up.
    connecting_until: Option<Instant>,
    reader: ReplyReader,
    outgoing: BytesMut,
    /// Channels asked for (confirmed or on their way).
    channels: HashSet<Bytes>,
}

impl WakeUps {
    /// Its connection's id, while it has one.
    pub(super) fn id(&self) -> Option<ConnectionId> {
        self.open.as_ref().map(|subscriber| subscriber.id)
    }

    /// Whether its channels need comparing with those waited on; clears it.
    pub(super) fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// Whether it should be opened for `wanted` channels at `now`: none
    /// open, some wanted, and no retry time ahead.
    pub(super) fn should_open(&self, now: Instant, wanted: &[Bytes]) -> bool {
        self.open.is_none() && !wanted.is_empty() && self.retry_at.is_none_or(|at| at <= now)
    }

    /// Its connection `id` is being opened, to be open by `until`.
    pub(super) fn opening(&mut self, id: ConnectionId, until: Instant, limits: ReplyLimits) {
        self.open = Some(Subscriber {
            id,
            connecting_until: Some(until),
            reader: ReplyReader::new(limits),
            outgoing: BytesMut::new(),
            channels: HashSet::new(),
        });
        self.retry_at = None;
    }

    /// Subscribes an open connection to the `wanted` channels it lacks and
    /// unsubscribes it from those no longer wanted (sorted: the same
    /// waiters give the same commands, and a simulated run replays).
    pub(super) fn subscribe(&mut self, wanted: &[Bytes]) {
        let Some(subscriber) = self.open.as_mut().filter(|s| s.connecting_until.is_none()) else {
            return;
        };
        let new: Vec<&Bytes> = wanted.iter().filter(|c| !subscriber.channels.contains(*c)).collect();
        let mut old: Vec<Bytes> = subscriber
            .channels
            .iter()
            .filter(|c| !wanted.contains(c))
            .cloned()
            .collect();
        old.sort();
        if !new.is_empty() {
            let mut command: Vec<&[u8]> = vec![b"SSUBSCRIBE"];
            command.extend(new.iter().map(|c| &c[..]));
            encode_command(&mut subscriber.outgoing, &command);
            subscriber.channels.extend(new.into_iter().cloned());
        }
        if !old.is_empty() {
            let mut command: Vec<&[u8]> = vec![b"SUNSUBSCRIBE"];
            command.extend(old.iter().map(|c| &c[..]));
            encode_command(&mut subscriber.outgoing, &command);
            for channel in &old {
                subscriber.channels.remove(channel);
            }
        }
    }

    /// The socket is open: authenticate (channels carry no database), then
    /// subscribe (at the next sync).
    pub(super) fn connected(&mut self, credentials: Option<&Credentials>) {
        let Some(subscriber) = self.open.as_mut() else {
            return;
        };
        subscriber.connecting_until = None;
        if let Some(credentials) = credentials {
            let password = credentials.password.as_bytes();
            match &credentials.username {
                Some(user) => encode_command(&mut subscriber.outgoing, &[b"AUTH", user.as_bytes(), password]),
                None => encode_command(&mut subscriber.outgoing, &[b"AUTH", password]),
            }
        }
        self.dirty = true;
    }

    /// Bytes arrived: what they say for the waiters. A dropped
    /// subscription that is still `wanted` marks it dirty. `Err`: the
    /// stream broke its protocol; close it ([`WakeUps::close`]).
    pub(super) fn input(&mut self, data: &[u8], wanted: impl Fn(&Bytes) -> bool) -> Result<Vec<Heard>, ()> {
        let Some(subscriber) = self.open.as_mut() else {
            return Ok(Vec::new());
        };
        subscriber.reader.push(data);
        let mut heard = Vec::new();
        loop {
            let frame = match subscriber.reader.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(heard),
                Err(_) => return Err(()),
            };
            match read_push(frame) {
                Push::Heard(news) => heard.push(news),
                Push::Dropped(channel) => {
                    subscriber.channels.remove(&channel);
                    if wanted(&channel) {
                        self.dirty = true;
                    }
                }
                Push::Nothing => {}
                // A refused `AUTH` makes every subscription fail too; a
                // refused `SSUBSCRIBE` leaves waiters to their own checks.
                Push::Refused => {}
            }
        }
    }

    /// The connection closed or failed: tried again `retry_after` from
    /// `now`; the waiters check on their own meanwhile (and all of them
    /// once it is back: a wake-up may have been missed). The connection to
    /// close, if there was one.
    pub(super) fn close(&mut self, now: Instant, retry_after: Duration) -> Option<ConnectionId> {
        let closed = self.open.take().map(|subscriber| subscriber.id);
        self.retry_at = Some(now + retry_after);
        closed
    }

    /// Its next deadline: the connect deadline, or (when someone waits)
    /// its retry time.
    pub(super) fn poll_timeout(&self, wanted: bool) -> Option<Instant> {
        let connecting = self.open.as_ref().and_then(|subscriber| subscriber.connecting_until);
        connecting.or(self.retry_at.filter(|_| wanted))
    }

    /// At `now`: a connection that did not open in time is closed (the
    /// one returned), and a retry time that came makes it dirty.
    pub(super) fn handle_timeout(&mut self, now: Instant, retry_after: Duration) -> Option<ConnectionId> {
        let late = self
            .open
            .as_ref()
            .and_then(|subscriber| subscriber.connecting_until)
            .is_some_and(|until| until <= now);
        let closed = if late { self.close(now, retry_after) } else { None };
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.dirty = true;
        }
        closed
    }

    /// What to write on it, once it is open.
    pub(super) fn take_outgoing(&mut self) -> Option<(ConnectionId, Bytes)> {
        let subscriber = self.open.as_mut()?;
        if subscriber.connecting_until.is_some() || subscriber.outgoing.is_empty() {
            return None;
        }
        Some((subscriber.id, subscriber.outgoing.split().freeze()))
    }
}

/// What a wake-up connection said that concerns the waiters.
#[derive(Debug)]
pub(super) enum Heard {
    /// A message on the channel: its first parked waiter should check.
    Wake(Bytes),
    /// The subscription to the channel confirmed: a release may have
    /// handed a slot to any of its waiters before, unheard, so each
    /// checks.
    Subscribed(Bytes),
    /// A release's message: the waiters now first in line, by lease id.
    WakeThese(Bytes, Vec<Bytes>),
    /// A release handed slots over: the waiters served, by lease id, with
    /// their fencing tokens.
    Handed(Bytes, Vec<(Bytes, u64)>),
}

/// What one frame on a wake-up connection says.
enum Push {
    Heard(Heard),
    /// The server dropped the subscription (its slot moved away).
    Dropped(Bytes),
    /// `AUTH`'s `OK`, an unsubscription confirmed.
    Nothing,
    /// An error: `AUTH` refused, or `SSUBSCRIBE` unknown or redirected.
    Refused,
}

fn read_push(frame: Frame) -> Push {
    let Frame::Array(items) = frame else {
        return match frame {
            Frame::Error(_) => Push::Refused,
            _ => Push::Nothing,
        };
    };
    match <[Frame; 3]>::try_from(items) {
        Ok([Frame::BulkString(kind), Frame::BulkString(channel), payload]) => match &kind[..] {
            b"smessage" => match payload {
                // `H id token…` (slots handed over), `N id…` (waiters to
                // check: those a release could not judge, or those that fit
                // after a waiter left or a compensation). Anything else (`0`
                // from an older version's scripts) is a plain wake-up: a lie
                // costs checks, no more.
                Frame::BulkString(text) => read_message(channel, &text),
                _ => Push::Heard(Heard::Wake(channel)),
            },
            b"ssubscribe" => Push::Heard(Heard::Subscribed(channel)),
            b"sunsubscribe" => Push::Dropped(channel),
            _ => Push::Nothing,
        },
        _ => Push::Nothing,
    }
}

/// A wake-up message's payload (see the `RELEASE` script).
fn read_message(channel: Bytes, text: &Bytes) -> Push {
    let mut words = text
        .split(|byte| *byte == b' ')
        .filter(|word| !word.is_empty())
        .map(|word| text.slice_ref(word));
    let most = crate::scripts::MAX_RELEASE_BATCH;
    match words.next().as_deref() {
        Some(b"N") => Push::Heard(Heard::WakeThese(channel, words.take(most).collect())),
        Some(b"H") => {
            let mut handed = Vec::new();
            while let (Some(id), Some(token)) = (words.next(), words.next()) {
                let token = std::str::from_utf8(&token).ok().and_then(|t| t.parse::<u64>().ok());
                match token {
                    Some(token) if token > 0 && handed.len() < most => handed.push((id, token)),
                    _ => return Push::Heard(Heard::Wake(channel)),
                }
            }
            Push::Heard(Heard::Handed(channel, handed))
        }
        _ => Push::Heard(Heard::Wake(channel)),
    }
}
