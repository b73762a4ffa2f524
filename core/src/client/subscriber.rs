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

use std::collections::HashSet;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::topology::Route;
use super::Client;
use crate::event::{Action, ConnectionId};
use crate::lease_id::LeaseId;
use crate::resp::{encode_command, Frame, ReplyLimits, ReplyReader};

#[derive(Debug)]
pub(super) struct Subscriber {
    id: ConnectionId,
    /// Until the socket is open, when the attempt is given up.
    connecting_until: Option<Instant>,
    reader: ReplyReader,
    outgoing: BytesMut,
    /// Channels asked for (confirmed or on their way).
    channels: HashSet<Bytes>,
}

impl Subscriber {
    fn new(id: ConnectionId, until: Instant, limits: ReplyLimits) -> Self {
        Self {
            id,
            connecting_until: Some(until),
            reader: ReplyReader::new(limits),
            outgoing: BytesMut::new(),
            channels: HashSet::new(),
        }
    }

    pub(super) fn id(&self) -> ConnectionId {
        self.id
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.connecting_until
    }

    pub(super) fn take_outgoing(&mut self) -> Option<Bytes> {
        if self.connecting_until.is_some() || self.outgoing.is_empty() {
            return None;
        }
        Some(self.outgoing.split().freeze())
    }
}

/// What one frame on a wake-up connection says.
enum Push {
    /// A message on the channel, or its subscription confirmed: its first
    /// parked waiter should check.
    Wake(Bytes),
    /// A release's message: the waiters now first in line, by lease id.
    WakeThese(Bytes, Vec<Bytes>),
    /// A release handed slots over: the waiters served, by lease id, with
    /// their fencing tokens.
    Handed(Bytes, Vec<(Bytes, u64)>),
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
                // check), `0` (a compensation or a waiter leaving). Anything
                // else is a plain wake-up: a lie costs checks, no more.
                Frame::BulkString(text) => read_message(channel, &text),
                _ => Push::Wake(channel),
            },
            b"ssubscribe" => Push::Wake(channel),
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
        Some(b"N") => Push::WakeThese(channel, words.take(most).collect()),
        Some(b"H") => {
            let mut handed = Vec::new();
            while let (Some(id), Some(token)) = (words.next(), words.next()) {
                let token = std::str::from_utf8(&token).ok().and_then(|t| t.parse::<u64>().ok());
                match token {
                    Some(token) if token > 0 && handed.len() < most => handed.push((id, token)),
                    _ => return Push::Wake(channel),
                }
            }
            Push::Handed(channel, handed)
        }
        _ => Push::Wake(channel),
    }
}

impl Client {
    /// Brings every node's wake-up connection in line with the channels
    /// waited on: opened where needed (its subscriptions are sent once it
    /// is open), subscribed to new channels, unsubscribed from old ones.
    pub(super) fn sync_subscriptions(&mut self, now: Instant) {
        let changed = self.waiters.take_changed();
        if changed.is_empty() && !self.subscriptions_dirty {
            return;
        }
        self.subscriptions_dirty = false;
        let mut wanted: Vec<Vec<Bytes>> = vec![Vec::new(); self.nodes.len()];
        for (channel, keys) in self.waiters.channels() {
            if let Route::Node(node) = self.topology.route(keys.slot()) {
                wanted[node].push(channel.clone());
            }
        }
        for (node, mut wanted) in wanted.into_iter().enumerate() {
            // Sorted, so that the same waiters give the same commands (and a
            // simulated run replays exactly).
            wanted.sort();
            let target = &mut self.nodes[node];
            match target.subscriber.as_mut() {
                None if !wanted.is_empty() && target.subscriber_retry.is_none_or(|at| at <= now) => {
                    self.open_subscriber(now, node);
                }
                Some(subscriber) if subscriber.connecting_until.is_none() => {
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
                _ => {}
            }
        }
    }

    fn open_subscriber(&mut self, now: Instant, node: usize) {
        let id = ConnectionId(self.next_connection);
        self.next_connection += 1;
        let until = now + self.config.connect_timeout;
        let target = &mut self.nodes[node];
        target.subscriber = Some(Subscriber::new(id, until, self.config.reply_limits));
        target.subscriber_retry = None;
        self.actions.push_back(Action::Connect(id, target.endpoint.clone()));
    }

    /// The node whose wake-up connection is `connection`.
    pub(super) fn subscriber_of(&self, connection: ConnectionId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|node| node.subscriber.as_ref().is_some_and(|s| s.id == connection))
    }

    /// The wake-up connection is open: authenticate (channels carry no
    /// database), then subscribe (at the next sync).
    pub(super) fn subscriber_connected(&mut self, node: usize) {
        let credentials = self.config.credentials.clone();
        let Some(subscriber) = self.nodes[node].subscriber.as_mut() else {
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
        self.subscriptions_dirty = true;
    }

    pub(super) fn subscriber_input(&mut self, now: Instant, node: usize, data: &[u8]) {
        let Some(subscriber) = self.nodes[node].subscriber.as_mut() else {
            return;
        };
        subscriber.reader.push(data);
        loop {
            let Some(subscriber) = self.nodes[node].subscriber.as_mut() else {
                return;
            };
            let frame = match subscriber.reader.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(_) => return self.drop_subscriber(now, node),
            };
            match read_push(frame) {
                Push::Wake(channel) => {
                    self.stats.wake_ups += 1;
                    let woken = self.waiters.woken(&channel, 1);
                    self.apply_waiters(now, woken);
                }
                Push::WakeThese(channel, ids) => {
                    self.stats.wake_ups += 1;
                    let woken = self.waiters.named(&channel, &ids);
                    self.apply_waiters(now, woken);
                }
                Push::Handed(channel, handed) => {
                    self.stats.wake_ups += 1;
                    let (lease_ids, held) = (&self.lease_ids, &self.held);
                    let done_waiting = |id: &LeaseId| lease_ids.issued(id) && !held.contains(id);
                    let handed = self.waiters.handed(now, &channel, handed, done_waiting);
                    self.apply_waiters(now, handed);
                }
                Push::Dropped(channel) => {
                    if let Some(subscriber) = self.nodes[node].subscriber.as_mut() {
                        subscriber.channels.remove(&channel);
                    }
                    if self.waiters.wants(&channel) {
                        self.subscriptions_dirty = true;
                    }
                }
                Push::Nothing => {}
                // A refused `AUTH` makes every subscription fail too; a
                // refused `SSUBSCRIBE` leaves waiters to their own checks.
                Push::Refused => {}
            }
        }
    }

    /// The wake-up connection closed or failed: try again later; the
    /// waiters check on their own meanwhile (and all of them once it is
    /// back: a wake-up may have been missed).
    pub(super) fn drop_subscriber(&mut self, now: Instant, node: usize) {
        let target = &mut self.nodes[node];
        if let Some(subscriber) = target.subscriber.take() {
            self.actions.push_back(Action::Close(subscriber.id));
        }
        target.subscriber_retry = Some(now + self.config.reconnect_max_backoff);
    }

    /// A wake-up connection that did not open in time.
    pub(super) fn check_subscribers(&mut self, now: Instant) {
        for node in 0..self.nodes.len() {
            let late = self.nodes[node]
                .subscriber
                .as_ref()
                .and_then(Subscriber::next_deadline)
                .is_some_and(|until| until <= now);
            if late {
                self.drop_subscriber(now, node);
            }
            if self.nodes[node].subscriber_retry.is_some_and(|at| at <= now) {
                self.nodes[node].subscriber_retry = None;
                self.subscriptions_dirty = true;
            }
        }
    }
}
