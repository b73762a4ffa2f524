//! Redis Sentinel, as the network sees it: the sentinels' news applied
//! (node 0 made, or moved to the primary they name), their watch kept open,
//! and a failed sentinel reported.

use std::time::Instant;

use super::effect::Effect;
use super::names::Names;
use super::network::Network;
use super::outbox::Outbox;
use super::sentinel::News;
use crate::address::Endpoint;
use crate::event::{Action, ConnectionError, ConnectionId, Event, SentinelError, Unavailable};

impl Network {
    /// The sentinels named `primary`: node 0 is made (the first time) or
    /// moved there (a switch: its connection to the old primary is given
    /// up), and connected. The node keeps the old primary's identity, so
    /// the new one's handshake finds the failover, as it would standalone,
    /// and writes back what is held before anything new is granted.
    fn primary_named(&mut self, now: Instant, primary: Endpoint, out: &mut Outbox, fx: &mut Vec<Effect>) {
        let Some(current) = self.nodes.first().map(|node| &node.endpoint) else {
            self.node_at(&primary);
            out.event(Event::Primary {
                previous: None,
                primary,
            });
            self.name_primary(fx);
            fx.push(Effect::Connect(0));
            return;
        };
        if *current == primary {
            // Named again after a refusal (the next sentinel agrees): try it.
            if !self.topology.known() {
                self.name_primary(fx);
                fx.push(Effect::Connect(0));
            }
            return;
        }
        self.name_primary(fx);
        let node = &mut self.nodes[0];
        let previous = std::mem::replace(&mut node.endpoint, primary.clone());
        out.stats.primary_switches += 1;
        out.event(Event::Primary {
            previous: Some(previous),
            primary,
        });
        match node.connection.as_ref().map(|conn| conn.is_ready()) {
            // What it left unanswered is compensated on the new primary.
            Some(true) => self.retire(now, 0, ConnectionError::Switched, out, fx),
            // A handshake with the old primary: nothing of the callers' on it.
            Some(false) => {
                let conn = node.connection.take().expect("just seen");
                out.action(Action::Close(conn.id()));
            }
            None => {}
        }
        // The wake-up connection listens to the old primary's channels:
        // it is opened again on the new one (the waiters check on their
        // own meanwhile, and all of them once it is back).
        let wake_ups = self.nodes[0].wake_ups.close(now, std::time::Duration::ZERO);
        out.actions(wake_ups.map(Action::Close));
        // A new server: its backoff (if the old one failed) starts over.
        self.nodes[0].reconnect.forget();
        fx.push(Effect::Connect(0));
    }

    /// Node 0 serves every subject again (if it did not): what waited for
    /// a primary is routed.
    fn name_primary(&mut self, fx: &mut Vec<Effect>) {
        if !self.topology.known() {
            self.topology.primary_named();
            fx.extend(self.deferred.take_awaiting_topology().into_iter().map(Effect::Route));
        }
    }

    /// Whether `connection` is the sentinels' watch.
    pub(super) fn is_watch(&self, connection: ConnectionId) -> bool {
        self.sentinels.as_ref().is_some_and(|s| s.id() == Some(connection))
    }

    /// Bytes on the watch (`connection`), or its end (`error`): what the
    /// sentinels said, applied.
    pub(super) fn on_watch(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        heard: Result<&[u8], ConnectionError>,
        bugs: &crate::fault::InjectedBugs,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        let sentinels = self.sentinels.as_mut().expect("the watch is the sentinels'");
        let news = match heard {
            Ok(data) => sentinels.input(now, connection, data),
            Err(error) => {
                let sentinel = sentinels.endpoint().map(ToString::to_string).unwrap_or_default();
                let reason = match error {
                    ConnectionError::Io(reason) => reason,
                    other => other.to_string(),
                };
                sentinels.closed(now, connection, SentinelError::Unreachable { sentinel, reason })
            }
        };
        self.hear_sentinels(now, news, bugs, out, fx);
    }

    /// The watch's deadlines, if this is a Sentinel client.
    pub(super) fn watch_timeout(
        &mut self,
        now: Instant,
        bugs: &crate::fault::InjectedBugs,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        let Some(sentinels) = self.sentinels.as_mut() else {
            return;
        };
        let (close, news) = sentinels.handle_timeout(now);
        out.actions(close.map(Action::Close));
        self.hear_sentinels(now, news, bugs, out, fx);
    }

    /// Asks the sentinels again, if this is a Sentinel client (the watch
    /// opens afresh on the next sentinel: see `drive`): whether it is.
    pub(super) fn ask_sentinels_again(&mut self, now: Instant, out: &mut Outbox) -> bool {
        let Some(sentinels) = self.sentinels.as_mut() else {
            return false;
        };
        out.actions(sentinels.ask_again(now).map(Action::Close));
        true
    }

    /// What the sentinels' watch heard, applied.
    fn hear_sentinels(
        &mut self,
        now: Instant,
        news: Vec<News>,
        bugs: &crate::fault::InjectedBugs,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        for news in news {
            match news {
                News::Primary(primary) => {
                    self.primary_named(now, primary, out, fx);
                    if bugs.switch_forgets_identity {
                        if let Some(node) = self.nodes.first_mut() {
                            node.identity = None;
                        }
                    }
                }
                News::Down(down) => out.event(Event::PrimaryDown(down)),
                News::Failed(id, error) => {
                    out.stats.sentinel_errors += 1;
                    out.action(Action::Close(id));
                    out.event(Event::SentinelFailed(id, error));
                }
                // Every sentinel failed in a row: before any primary is
                // known, that is a failed connection attempt (what a
                // `connect` waits for), and what waits for a primary fails.
                // Once one is known, it is kept: the sentinels are only
                // needed again at a switch.
                News::AllFailed(id, error) if !self.topology.known() => {
                    let error = ConnectionError::Sentinel(error);
                    out.event(Event::ConnectFailed(id, error.clone()));
                    for op in self.deferred.take_awaiting_topology() {
                        let reason = Unavailable::NotConnected(error.clone());
                        fx.push(Effect::Fail(op.call().request, reason));
                    }
                }
                News::AllFailed(..) => {}
            }
        }
    }

    /// Opens the sentinels' watch if it is not open and may be: the
    /// socket to open.
    pub(super) fn watch_sentinels(&mut self, now: Instant, names: &mut Names) -> Option<Action> {
        let (id, endpoint) = self.sentinels.as_mut()?.open(now, || names.connection())?;
        Some(Action::ConnectSentinel(id, endpoint))
    }
}
