//! What the client hands its driver: sockets to open or close, events for
//! callers, and the running totals, counted where they are delivered.

use std::collections::VecDeque;

use crate::event::{Action, Event, Outcome, Renewal, RequestId, Stats};
use crate::lease_id::LeaseId;

/// The client's outputs, in the order they were decided.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    events: VecDeque<Event>,
    /// How many of `events` are news of a held lease (kept alive, lost):
    /// almost always none, so a release need not look for its own.
    lease_news: usize,
    actions: VecDeque<Action>,
    /// Totals of what happened inside the client (redirects, retries,
    /// recoveries...), counted where it happens; outcomes and renewals are
    /// added as they are delivered (see [`Outbox::next_event`]), so one
    /// withdrawn before its caller saw it was never counted.
    pub(super) stats: Stats,
}

impl Outbox {
    pub(super) fn event(&mut self, event: Event) {
        self.lease_news += usize::from(is_lease_news(&event, None));
        self.events.push_back(event);
    }

    pub(super) fn action(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    pub(super) fn actions(&mut self, actions: impl IntoIterator<Item = Action>) {
        self.actions.extend(actions);
    }

    pub(super) fn next_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next event, counted now that it is delivered.
    pub(super) fn next_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        self.lease_news -= usize::from(is_lease_news(&event, None));
        let stats = &mut self.stats;
        match &event {
            Event::Acquired(_, outcome) => match outcome {
                // One acquire, whatever the number of its subjects.
                Outcome::Granted(_) | Outcome::GrantedAll(_) => stats.granted += 1,
                Outcome::Exceeded | Outcome::ExceededAt(_) => stats.denied += 1,
                Outcome::Shed(_) => {
                    stats.denied += 1;
                    stats.shed += 1;
                }
                Outcome::Unavailable(_) => stats.unavailable += 1,
                Outcome::FailOpen(_) => stats.fail_open += 1,
            },
            Event::Renewed(_, renewal) => match renewal {
                Renewal::Extended(_) => stats.renewals += 1,
                Renewal::Lost => stats.leases_lost += 1,
                Renewal::Unavailable(_) => stats.unavailable += 1,
            },
            _ => {}
        }
        Some(event)
    }

    /// Drops the news of `lease` not taken yet: its holder gave it back
    /// before the driver read them, and the driver has let it go already
    /// (news read now would be kept for a permit that is gone).
    pub(super) fn forget_lease(&mut self, lease: &LeaseId) {
        if self.lease_news == 0 {
            return;
        }
        let before = self.events.len();
        self.events.retain(|event| !is_lease_news(event, Some(lease)));
        self.lease_news -= before - self.events.len();
    }

    /// Takes back the answer to `request` that its caller has not taken yet
    /// (a driver feeds a reply and the caller's departure in one wake-up,
    /// before it takes any event).
    pub(super) fn withdraw(&mut self, request: RequestId) -> Option<Event> {
        let at = self.events.iter().position(|event| {
            matches!(event, Event::Acquired(r, _) | Event::Renewed(r, _) | Event::Inspected(r, _) | Event::Scanned(r, _) if *r == request)
        })?;
        self.events.remove(at)
    }
}

/// Whether `event` is news of a held lease (of `lease`, if given).
fn is_lease_news(event: &Event, lease: Option<&LeaseId>) -> bool {
    match event {
        Event::KeptAlive { lease: of, .. } | Event::LeaseLost { lease: of, .. } => {
            lease.is_none_or(|lease| lease == of)
        }
        _ => false,
    }
}
