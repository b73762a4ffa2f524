//! The simulated servers' clock, shared by the primary, its replica and the
//! Sentinel deployment's copies.

/// The model's clock at the start of a run, in Unix milliseconds: a run's
/// virtual time is added to it.
pub const EPOCH_MS: u64 = 1_700_000_000_000;
