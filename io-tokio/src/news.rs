//! What the driver learns about held leases after their grant, for their
//! permits: a write-back verdict after a data loss, renewals made by
//! keep-alive, and loss. Side tables keyed by lease, filled only for the
//! leases that need them (a plain permit nobody watches costs nothing here),
//! emptied as leases are let go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use inflight_core::{LeaseId, LeaseLost, Reassertion};
use tokio::sync::watch;

use crate::holds::HoldTimes;

/// Why a permit's lease is gone, as [`Permit::lost`](crate::Permit::lost)
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lost {
    /// Redis no longer holds it: it expired there (the process stalled
    /// past its TTL), or was released elsewhere, or the server lost it.
    Gone,
    /// It was not renewed before its expiry (no keep-alive, or Redis
    /// unreachable for longer than the renewal margin): it may be gone.
    Expired,
    /// Redis lost lease data and writing this lease back was not confirmed.
    Unconfirmed,
    /// The permit was released (or dropped): the work it guarded is over.
    Released,
}

impl From<LeaseLost> for Lost {
    fn from(reason: LeaseLost) -> Self {
        match reason {
            LeaseLost::Gone => Lost::Gone,
            _ => Lost::Expired,
        }
    }
}

/// A watched lease as the driver last knew it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Status {
    pub(crate) expires_at: Instant,
    /// The client renews it: its expiry alone is no loss.
    pub(crate) kept_alive: bool,
    pub(crate) lost: Option<Lost>,
}

/// The side tables, shared by the driver and every permit.
#[derive(Debug, Default)]
pub(crate) struct News {
    /// How long permits held their slots: the hint of every `Exceeded`.
    pub(crate) holds: HoldTimes,
    reassertions: Mutex<HashMap<LeaseId, Reassertion>>,
    watched: Mutex<HashMap<LeaseId, watch::Sender<Status>>>,
}

pub(crate) type SharedNews = Arc<News>;

impl News {
    pub(crate) fn reassertion(&self, lease: &LeaseId) -> Option<Reassertion> {
        self.reassertions.lock().ok()?.get(lease).copied()
    }

    pub(crate) fn reasserted(&self, lease: LeaseId, outcome: Reassertion) {
        if outcome == Reassertion::Unconfirmed {
            self.lose(&lease, Lost::Unconfirmed);
        }
        if let Ok(mut reassertions) = self.reassertions.lock() {
            reassertions.insert(lease, outcome);
        }
    }

    /// Watches `lease` (if it is not yet): its status, from now on kept
    /// here until it is let go.
    pub(crate) fn watch(&self, lease: &LeaseId, expires_at: Instant, kept_alive: bool) -> watch::Receiver<Status> {
        // A write-back that failed before anyone watched still counts.
        let unconfirmed = self.reassertion(lease) == Some(Reassertion::Unconfirmed);
        let mut watched = self.watched.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sender = watched.entry(lease.clone()).or_insert_with(|| {
            watch::Sender::new(Status {
                expires_at,
                kept_alive,
                lost: unconfirmed.then_some(Lost::Unconfirmed),
            })
        });
        if kept_alive {
            sender.send_modify(|status| status.kept_alive = true);
        }
        sender.subscribe()
    }

    /// Why `lease` is known lost, if it is: a verdict its watchers were
    /// told, or a write-back that failed (watched or not).
    pub(crate) fn loss(&self, lease: &LeaseId) -> Option<Lost> {
        let told = self
            .watched
            .lock()
            .ok()
            .and_then(|watched| watched.get(lease).and_then(|sender| sender.borrow().lost));
        told.or_else(|| (self.reassertion(lease) == Some(Reassertion::Unconfirmed)).then_some(Lost::Unconfirmed))
    }

    /// Whether the driver renews `lease` (its expiry alone is no loss).
    pub(crate) fn kept_alive(&self, lease: &LeaseId) -> bool {
        let watched = self.watched.lock();
        watched.is_ok_and(|watched| watched.get(lease).is_some_and(|sender| sender.borrow().kept_alive))
    }

    /// The expiry the driver knows for a watched lease (kept alive: moved by
    /// its renewals).
    pub(crate) fn expires_at(&self, lease: &LeaseId) -> Option<Instant> {
        let watched = self.watched.lock().ok()?;
        watched.get(lease).map(|sender| sender.borrow().expires_at)
    }

    /// A renewal the client made on its own moved a held lease's expiry
    /// (kept alive, or a slot handed to a waiter confirmed): its permit
    /// reads the new one here, watched from now on if it was not, until it
    /// is let go.
    pub(crate) fn extended(&self, lease: &LeaseId, expires_at: Instant) {
        let mut watched = self.watched.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match watched.get(lease) {
            Some(sender) => sender.send_modify(|status| status.expires_at = expires_at),
            None => {
                let status = Status {
                    expires_at,
                    kept_alive: false,
                    lost: None,
                };
                watched.insert(lease.clone(), watch::Sender::new(status));
            }
        }
    }

    /// A held lease is lost (its renewal found it gone, or its expiry came
    /// first): its watchers are told, once; one nobody watched yet is
    /// watched from now on, lost, until it is let go, so that its permit
    /// reads the loss.
    pub(crate) fn lose(&self, lease: &LeaseId, reason: Lost) {
        let mut watched = self.watched.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sender = watched.entry(lease.clone()).or_insert_with(|| {
            watch::Sender::new(Status {
                expires_at: crate::clock::now(),
                kept_alive: false,
                lost: None,
            })
        });
        tell_lost(sender, reason);
    }

    /// `lease` is let go (released, or found lost by its own renewal):
    /// its watchers are told `reason` unless they were told already, and
    /// its entries go.
    pub(crate) fn let_go(&self, lease: &LeaseId, reason: Lost) {
        // Every release comes here: one lock per table, and nothing to do
        // for a lease nobody watched (the common case).
        if let Ok(mut watched) = self.watched.lock() {
            if let Some(sender) = watched.remove(lease) {
                tell_lost(&sender, reason);
            }
        }
        if let Ok(mut reassertions) = self.reassertions.lock() {
            if !reassertions.is_empty() {
                reassertions.remove(lease);
            }
        }
    }
}

/// Tells a watched lease's watchers it is lost, unless they were told.
fn tell_lost(sender: &watch::Sender<Status>, reason: Lost) {
    sender.send_if_modified(|status| {
        let first = status.lost.is_none();
        status.lost.get_or_insert(reason);
        first
    });
}

/// Resolves when a watched lease is lost (see `Permit::lost`).
pub(crate) async fn lost(mut status: watch::Receiver<Status>) -> Lost {
    loop {
        let now = *status.borrow_and_update();
        if let Some(reason) = now.lost {
            return reason;
        }
        let expiry = async {
            if now.kept_alive {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep_until(crate::clock::timer_at(Some(now.expires_at))).await
            }
        };
        tokio::select! {
            biased;
            changed = status.changed() => {
                if changed.is_err() {
                    // The entry went without a verdict: let go.
                    return status.borrow().lost.unwrap_or(Lost::Released);
                }
            }
            () = expiry => return Lost::Expired,
        }
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    fn lease(n: u64) -> LeaseId {
        LeaseId::from_parts(0x11, n)
    }

    #[tokio::test]
    async fn a_failed_write_back_is_lost_whether_watched_before_or_after() {
        let news = News::default();
        let later = Instant::now() + std::time::Duration::from_secs(60);
        // Watched first, then the write-back fails.
        let before = news.watch(&lease(1), later, true);
        news.reasserted(lease(1), Reassertion::Unconfirmed);
        assert_eq!(lost(before).await, Lost::Unconfirmed);
        // The write-back fails first; the watch comes later and still sees it.
        news.reasserted(lease(2), Reassertion::Unconfirmed);
        assert_eq!(lost(news.watch(&lease(2), later, true)).await, Lost::Unconfirmed);
        // A lease that survived is not lost; letting it go says Released.
        news.reasserted(lease(3), Reassertion::Survived);
        let survived = news.watch(&lease(3), later, true);
        news.let_go(&lease(3), Lost::Released);
        assert_eq!(lost(survived).await, Lost::Released);
        // The first verdict stands: a lost lease let go afterwards stays lost.
        let gone = news.watch(&lease(4), later, true);
        news.lose(&lease(4), Lost::Gone);
        news.let_go(&lease(4), Lost::Released);
        assert_eq!(lost(gone).await, Lost::Gone);
    }

    #[test]
    fn a_loss_is_known_to_the_permit_whether_or_not_anyone_watched() {
        let news = News::default();
        let later = Instant::now() + std::time::Duration::from_secs(60);
        // A write-back that failed, never watched.
        news.reasserted(lease(1), Reassertion::Unconfirmed);
        assert_eq!(news.loss(&lease(1)), Some(Lost::Unconfirmed));
        // Restored: not lost.
        news.reasserted(lease(2), Reassertion::Restored);
        assert_eq!(news.loss(&lease(2)), None);
        // Kept alive and found gone: lost, and kept alive no longer matters.
        let _watch = news.watch(&lease(3), later, true);
        assert!(news.kept_alive(&lease(3)));
        assert_eq!(news.loss(&lease(3)), None);
        news.lose(&lease(3), Lost::Gone);
        assert_eq!(news.loss(&lease(3)), Some(Lost::Gone));
    }
}
