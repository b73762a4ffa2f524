//! The releases not on the wire, and when each is tried again or given up:
//! a sub-machine that owns the retry policy and the waiting jobs' timer. It
//! answers with what to do (the jobs to send, those given up and why); it
//! knows nothing of the client, its connections or its counts.

use std::time::Instant;

use super::reconnect::backoff;
use super::request::ReleaseJob;
use crate::config::ReleasePolicy;
use crate::event::ReleaseFailure;

/// A job the queue will not keep: report it given up, for this reason.
#[derive(Debug)]
pub(super) enum Given {
    Up(ReleaseJob, ReleaseFailure),
}

/// The releases not on the wire: staged for the next write (ordinary
/// releases, so that those of one subject share a `ZREM`), or waiting for a
/// ready connection or their retry time, at most `max_waiting` of those.
#[derive(Debug)]
pub(super) struct ReleaseQueue {
    waiting: Vec<ReleaseJob>,
    staged: Vec<(ReleaseJob, Instant)>,
    policy: ReleasePolicy,
    /// The injected bug: a `TRYAGAIN` spends an attempt (see `later`).
    try_again_spends_attempts: bool,
}

impl ReleaseQueue {
    pub(super) fn new(policy: ReleasePolicy) -> Self {
        Self {
            waiting: Vec::new(),
            staged: Vec::new(),
            policy,
            try_again_spends_attempts: false,
        }
    }

    /// The injected bug: from now on a `TRYAGAIN` spends an attempt, and a
    /// release to waiters tries its script again.
    #[cfg(feature = "fault-injection")]
    pub(super) fn spend_attempts_on_try_again(&mut self) {
        self.try_again_spends_attempts = true;
    }

    /// Whether the injected bug is on.
    pub(super) fn try_again_spends_attempts(&self) -> bool {
        self.try_again_spends_attempts
    }

    /// Queues `job` to wait for a ready connection or its retry time; gives
    /// it up when there is no room (`max_retrying`).
    #[must_use = "a job given up must be reported"]
    pub(super) fn queue(&mut self, job: ReleaseJob) -> Option<Given> {
        if self.waiting.len() >= self.policy.max_retrying {
            return Some(Given::Up(job, ReleaseFailure::Overloaded));
        }
        self.waiting.push(job);
        None
    }

    /// An attempt of `job` failed at `now`: queued for another after its
    /// backoff, or given up (attempts exhausted, the backoff past its
    /// deadline, no room).
    #[must_use = "a job given up must be reported"]
    pub(super) fn retry(&mut self, now: Instant, mut job: ReleaseJob) -> Option<Given> {
        job.failures += 1;
        if job.failures >= self.policy.max_attempts {
            return Some(Given::Up(job, ReleaseFailure::AttemptsExhausted));
        }
        let times = job.failures;
        self.back_off(now, job, times)
    }

    /// `job` was refused unrun at `now` (`TRYAGAIN`): it waits out a
    /// backoff with no failure counted, or is given up if that ends past its
    /// deadline.
    #[must_use = "a job given up must be reported"]
    pub(super) fn defer(&mut self, now: Instant, mut job: ReleaseJob) -> Option<Given> {
        job.refusals += 1;
        let times = job.refusals;
        self.back_off(now, job, times)
    }

    /// Queues `job` for after the backoff of its `times`-th miss, unless
    /// that ends past its deadline.
    fn back_off(&mut self, now: Instant, mut job: ReleaseJob, times: u32) -> Option<Given> {
        job.not_before = now + backoff(self.policy.initial_backoff, self.policy.max_backoff, times);
        if job.not_before >= job.deadline {
            return Some(Given::Up(job, ReleaseFailure::Expired));
        }
        self.queue(job)
    }

    /// Stages `job` (at `now`) for the next write.
    pub(super) fn stage(&mut self, job: ReleaseJob, now: Instant) {
        self.staged.push((job, now));
    }

    pub(super) fn take_staged(&mut self) -> Vec<(ReleaseJob, Instant)> {
        std::mem::take(&mut self.staged)
    }

    /// The waiting jobs whose retry time has come.
    pub(super) fn due(&self, now: Instant) -> impl Iterator<Item = &ReleaseJob> {
        self.waiting.iter().filter(move |job| job.not_before <= now)
    }

    /// The waiting jobs whose retry time has come and that are `sendable`
    /// (their node is ready), in queue order: to send.
    pub(super) fn take_due(&mut self, now: Instant, sendable: impl Fn(&ReleaseJob) -> bool) -> Vec<ReleaseJob> {
        let (due, later) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|job| job.not_before <= now && sendable(job));
        self.waiting = later;
        due
    }

    /// The waiting jobs past their deadline (the lease is gone by then):
    /// to give up.
    pub(super) fn take_expired(&mut self, now: Instant) -> Vec<ReleaseJob> {
        let mut expired = Vec::new();
        let mut index = 0;
        while index < self.waiting.len() {
            if self.waiting[index].deadline <= now {
                expired.push(self.waiting.swap_remove(index));
            } else {
                index += 1;
            }
        }
        expired
    }

    /// Jobs staged or waiting.
    pub(super) fn len(&self) -> usize {
        self.waiting.len() + self.staged.len()
    }

    /// When a waiting job next needs attention: its deadline, or (when it is
    /// `sendable`: its node is ready) its retry time.
    pub(super) fn poll_timeout(&self, sendable: impl Fn(&ReleaseJob) -> bool) -> Option<Instant> {
        self.waiting
            .iter()
            .map(|job| {
                if sendable(job) {
                    job.not_before.min(job.deadline)
                } else {
                    job.deadline
                }
            })
            .min()
    }
}
