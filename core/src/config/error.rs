//! What a setting that cannot work is refused with, and the bounds checked.

use std::num::NonZeroU32;
use std::time::Duration;

/// A setting that cannot work, with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration or count that must be positive is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The setting, as named in [`Config`](super::Config).
        field: &'static str,
    },
    /// A duration below what the other settings require.
    #[error("{field} must be at least {min_ms} ms ({because}); it is {actual_ms} ms")]
    TooShort {
        /// The setting, as named in [`Config`](super::Config).
        field: &'static str,
        /// The least it may be, in milliseconds.
        min_ms: u128,
        /// What it is, in milliseconds.
        actual_ms: u128,
        /// Where the bound comes from.
        because: &'static str,
    },
    /// A value outside what can work.
    #[error("{field} is out of range: {reason}")]
    OutOfRange {
        /// The setting, as named in [`Config`](super::Config).
        field: &'static str,
        /// Why it cannot work.
        reason: &'static str,
    },
    /// The key prefix is empty or would add a second hash tag.
    #[error("key prefix {0:?} is empty or contains '{{' or '}}', which would break the key's single hash tag")]
    KeyPrefix(String),
    /// The server URL cannot be used.
    #[error("invalid Redis URL {url:?}: {reason}")]
    Url {
        /// The URL, its password redacted.
        url: String,
        /// What is wrong, and what is supported.
        reason: String,
    },
}

/// The longest any duration setting may be: a year. Longer ones are refused
/// (`ConfigError::OutOfRange`), so that no deadline computed from them can
/// overflow; a per-call wait longer than this is cut to it.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A limit as given by a user: refused when zero.
pub fn limit(value: u32) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(value).ok_or(ConfigError::Zero { field: "limit" })
}
