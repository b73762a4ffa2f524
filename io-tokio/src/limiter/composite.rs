//! `Limiter::acquire_all`: one permit over several keys (a tenant's, a
//! route's, the whole service's), all or nothing.

use std::num::NonZeroU32;
use std::time::Duration;

use inflight_core::key::SubjectKeys;
use inflight_core::{Claim, CompositeError, ConfigError, Key, Label};
use tokio::sync::oneshot;

use super::{Acquire, Limiter};
use crate::error::Error;
use crate::mailbox::{answer, Command};
use crate::permit::Permit;
use crate::permits::Permits;

impl Limiter {
    /// Takes a slot of every key, each under its own limit, all or nothing:
    /// admitted only if every key has room, holding all of them until the
    /// [`Permits`] are dropped or released. Fail-fast: `Exceeded` with
    /// `key: Some(i)` names a full key (its index in `keys`).
    ///
    /// On a standalone server (and behind Sentinel) every key is checked
    /// and taken in one script call: no moment in which a slot is held on
    /// one key and refused on another. In a cluster, keys of one slot (put
    /// them there on purpose with a hash tag: `{acme}:route` and
    /// `{acme}:tenant`) are one call; keys of different slots are taken one
    /// slot after another in a fixed order (by slot), and what was taken is
    /// given back on a refusal: never over a limit, though a refused
    /// request holds another slot's keys for about one round trip.
    /// Cancel-safe like [`Limiter::acquire`]: dropped at any await point,
    /// it leaves no slot of any key behind. At most 16 keys per slot.
    pub async fn acquire_all(&self, keys: &[(&Key, u32)]) -> Result<Permits, Error> {
        self.acquire_all_opts(keys, Acquire::default()).await
    }

    /// [`Limiter::acquire_all`] as `options` say: a weight (taken on every
    /// key), a label, keep-alive, a wait. Each key carries its own limit, so
    /// `Acquire::limit` is refused with `Error::Config`.
    ///
    /// With a wait, the keys are taken one after another in one fixed order
    /// for the whole fleet (by slot, then by key), each waiting in its own
    /// queue for what is left of `max_wait`, each held while the next is
    /// waited for: two callers that name the same keys in different orders
    /// cannot deadlock, and each key serves its waiters first come, first
    /// served. A refusal or a timeout gives back what was taken.
    pub async fn acquire_all_opts(&self, keys: &[(&Key, u32)], options: Acquire) -> Result<Permits, Error> {
        if options.limit.is_some() {
            return Err(Error::Config(ConfigError::OutOfRange {
                field: "Acquire::limit",
                reason: "acquire_all takes a limit with each key",
            }));
        }
        let mut claim = Claim::weighing(options.weight.unwrap_or(1))?;
        if let Some(label) = &options.label {
            claim = claim.labelled(Label::new(label)?);
        }
        let keep_alive = options.keep_alive.unwrap_or(self.shared.keep_alive);
        let mut parts = Vec::with_capacity(keys.len());
        for (key, limit) in keys {
            let limit = inflight_core::config::limit(*limit)?;
            parts.push((SubjectKeys::new(&self.shared.key_prefix, key), limit));
        }
        // Every key is checked before any is taken (the slots are grouped
        // below, so they are not checked here).
        inflight_core::composite::check(&parts, &claim, usize::MAX, false).map_err(Error::Composite)?;
        let started = tokio::time::Instant::now();
        let result = match options.wait {
            None => self.take_by_slot(parts, &claim, keep_alive).await,
            Some(wait) => self.take_in_order(keys, parts, &claim, keep_alive, wait).await,
        };
        let enforced = result.as_ref().map(Permits::is_enforced);
        self.record(started, enforced, options.wait.is_some());
        result
    }

    /// Fail-fast: one all-or-nothing call per slot (one in all, standalone),
    /// slots in ascending order.
    async fn take_by_slot(
        &self,
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        claim: &Claim,
        keep_alive: bool,
    ) -> Result<Permits, Error> {
        let mut order: Vec<usize> = (0..parts.len()).collect();
        let slot = |i: &usize| if self.shared.cluster { parts[*i].0.slot() } else { 0 };
        order.sort_by_key(slot);
        // Every slot's share checked before anything is taken.
        let most = inflight_core::scripts::MAX_BATCH;
        if let Some(group) = order
            .chunk_by(|a, b| slot(a) == slot(b))
            .find(|group| group.len() > most)
        {
            let given = group.len();
            return Err(Error::Composite(CompositeError::TooMany { given, most }));
        }
        let mut held: Vec<Option<Permit>> = parts.iter().map(|_| None).collect();
        for group in order.chunk_by(|a, b| slot(a) == slot(b)) {
            let group_parts = group.iter().map(|i| parts[*i].clone()).collect();
            match self.take_together(group_parts, claim.clone(), keep_alive).await {
                Ok(permits) => {
                    for (i, permit) in group.iter().zip(permits) {
                        held[*i] = Some(permit);
                    }
                }
                // What was taken goes back as `held` drops.
                Err(error) => return Err(within(error, group)),
            }
        }
        Ok(Permits::new(held.into_iter().flatten().collect()))
    }

    /// Keys of one slot in one call, as the driver answers it.
    async fn take_together(
        &self,
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        claim: Claim,
        keep_alive: bool,
    ) -> Result<Vec<Permit>, Error> {
        let count = parts.len();
        let request = self.shared.commands.fresh();
        let id = request.id();
        let (reply, outcome) = oneshot::channel();
        let command = Command::AcquireAll {
            request,
            parts,
            claim,
            keep_alive,
            reply,
        };
        let unenforced = || (0..count).map(|_| Permit::unenforced()).collect();
        if self.shared.commands.send(command).is_err() {
            return self.stopped().map(|_| unenforced());
        }
        match answer(&self.shared.commands, id, outcome).await {
            Ok(Ok(Some(leases))) => Ok(leases.into_iter().map(Permit::enforced).collect()),
            Ok(Ok(None)) => Ok(unenforced()),
            Ok(Err(error)) => Err(error),
            Err(_) => self.stopped().map(|_| unenforced()),
        }
    }

    /// Waiting: one key at a time, in the fleet's one order.
    async fn take_in_order(
        &self,
        keys: &[(&Key, u32)],
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        claim: &Claim,
        keep_alive: bool,
        max_wait: Duration,
    ) -> Result<Permits, Error> {
        let deadline = tokio::time::Instant::now() + max_wait.min(inflight_core::config::MAX_DURATION);
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&parts[*a].0, &parts[*b].0);
            (a.slot(), a.leases()).cmp(&(b.slot(), b.leases()))
        });
        let mut held: Vec<Option<Permit>> = parts.iter().map(|_| None).collect();
        let mut next = 0;
        while let Some(&i) = order.get(next) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let wait = (!left.is_zero()).then_some(left);
            let (key, limit) = (keys[i].0, parts[i].1);
            match self.ask_one(key, limit, claim.clone(), keep_alive, wait).await {
                Ok(permit) => held[i] = Some(permit),
                Err(error) => return Err(within(error, &[i])),
            }
            next += 1;
            // A part lost while the next was waited for (a slot handed over
            // whose reservation ran out before its confirmation got
            // through, with the driver stalled) is never handed out spent:
            // it and every part taken after it are given back, and taken
            // again in the same order, within what is left of the wait.
            let lost = order[..next]
                .iter()
                .position(|&j| held[j].as_ref().is_some_and(|permit| permit.loss().is_some()))
                .filter(|_| !self.keeps_lost_parts());
            if let Some(first) = lost {
                for &j in &order[first..next] {
                    held[j] = None;
                }
                next = first;
            }
        }
        Ok(Permits::new(held.into_iter().flatten().collect()))
    }

    /// The simulator's deliberate bug: lost parts kept (never, outside it).
    fn keeps_lost_parts(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.shared.bugs.keep_lost_composite_parts;
        #[cfg(not(feature = "fault-injection"))]
        false
    }
}

/// `error` of a call over `group` (indexes into the caller's keys), with a
/// full key named by the caller's index.
fn within(mut error: Error, group: &[usize]) -> Error {
    if let Error::Exceeded { key, .. } = &mut error {
        *key = Some(key.and_then(|k| group.get(k).copied()).unwrap_or(group[0]));
    }
    error
}
