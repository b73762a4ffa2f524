//! One caller's all-or-nothing acquire of several subjects, as its parts.

use std::num::NonZeroU32;

use super::{AcquireOp, Call};
use crate::client::names::Names;
use crate::event::RequestId;
use crate::key::SubjectKeys;
use crate::lease_id::Label;

/// One caller's fail-fast acquires of several subjects (of one slot, in a
/// cluster), taken all or nothing in one `ACQUIRE_ALL`. The first part's
/// call is the caller's request: it carries the bundle's deadline, `ASK`
/// mark, redirect count and script naming; each part names its own lease.
#[derive(Debug)]
pub(in crate::client) struct Bundle {
    /// Never empty.
    parts: Vec<AcquireOp>,
}

impl Bundle {
    /// Fail-fast acquires of `weight` units under `label` on each of
    /// `parts` (at least one), for the caller of `request`: its id names
    /// the first lease, fresh ids the others.
    pub(in crate::client) fn of(
        request: RequestId,
        names: &mut Names,
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        weight: u32,
        label: Option<Label>,
        fenced: bool,
    ) -> Self {
        assert!(!parts.is_empty(), "a bundle has at least one part");
        let parts = parts.into_iter().enumerate().map(|(i, (keys, limit))| {
            let name = if i == 0 { request } else { names.request() };
            AcquireOp::of(name, names, keys, limit, weight, label.clone(), fenced)
        });
        Self { parts: parts.collect() }
    }

    /// The caller's call (the first part's).
    pub(in crate::client) fn call(&self) -> &Call {
        &self.parts[0].call
    }

    pub(in crate::client) fn call_mut(&mut self) -> &mut Call {
        &mut self.parts[0].call
    }

    pub(in crate::client) fn parts(&self) -> &[AcquireOp] {
        &self.parts
    }

    pub(in crate::client) fn parts_mut(&mut self) -> &mut [AcquireOp] {
        &mut self.parts
    }

    pub(in crate::client) fn into_parts(self) -> Vec<AcquireOp> {
        self.parts
    }
}
