//! The connection lifecycle: open, retire, and what is written on it.

use std::time::Instant;

use super::{backoff, AcquireOp, Client, Connection, Phase, Request, Step};
use crate::event::{Action, ConnectionError, ConnectionId, Event, Unavailable};
use crate::pipeline::Pipeline;
use crate::script::ScriptKind;

impl Client {
    pub(super) fn start_connect(&mut self, now: Instant) {
        let id = ConnectionId(self.next_connection);
        self.next_connection += 1;
        self.reconnect_at = None;
        self.connection = Some(Connection {
            id,
            phase: Phase::Connecting {
                deadline: now + self.config.connect_timeout,
            },
            pipeline: Pipeline::new(self.config.reply_limits),
            acquires: 0,
            reloading: [false; 3],
        });
        self.actions.push_back(Action::Connect(id));
    }

    /// Gives up the current connection: a failed attempt backs off before the
    /// next; a ready connection that is retired is replaced at once.
    pub(super) fn drop_connection(&mut self, now: Instant, error: ConnectionError) {
        let Some(mut conn) = self.connection.take() else {
            return;
        };
        self.actions.push_back(Action::Close(conn.id));
        if conn.phase != Phase::Ready {
            self.connect_failures += 1;
            self.last_connect_error = error.clone();
            let backoff = backoff(
                self.config.reconnect_initial_backoff,
                self.config.reconnect_max_backoff,
                self.connect_failures,
            );
            self.reconnect_at = Some(now + backoff);
            self.events.push_back(Event::ConnectFailed(conn.id, error.clone()));
            // Nothing was sent for them; the server is not there for now.
            for op in std::mem::take(&mut self.waiting) {
                self.fail(op.request, Unavailable::NotConnected(error.clone()));
            }
            return;
        }
        self.stats.connections_replaced += 1;
        self.events.push_back(Event::Retired(conn.id, error.clone()));
        let pending: Vec<Request> = conn.pipeline.drain().collect();
        for request in pending {
            match request {
                Request::Acquire(op) => {
                    self.ambiguous(now, op, error.clone());
                }
                Request::Release(job) => self.retry_release(now, job),
                Request::Handshake(_) => {}
            }
        }
        self.start_connect(now);
    }

    /// Sends what can be sent on a ready connection.
    pub(super) fn drive(&mut self, now: Instant) {
        if !self.connection.as_ref().is_some_and(|c| c.phase == Phase::Ready) {
            return;
        }
        while let Some(op) = self.waiting.pop_front() {
            self.send_acquire(now, op);
        }
        if self.releases.iter().any(|job| job.not_before <= now) {
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.releases)
                .into_iter()
                .partition(|job| job.not_before <= now);
            self.releases = later;
            for job in due {
                self.send_release(now, job);
            }
        }
    }

    pub(super) fn send_acquire(&mut self, now: Instant, mut op: AcquireOp) {
        op.sent_at.get_or_insert(now);
        self.send(Request::Acquire(op), now + self.config.request_liveness);
    }

    /// Queues a `SCRIPT LOAD` on the ready connection, once per script at a time.
    pub(super) fn reload(&mut self, now: Instant, kind: ScriptKind) {
        let conn = self
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        if std::mem::replace(&mut conn.reloading[kind as usize], true) {
            return;
        }
        self.send(Request::Handshake(Step::Load(kind)), now + self.config.request_liveness);
    }
}
