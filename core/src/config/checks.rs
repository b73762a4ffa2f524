//! [`Config::validate`]: every setting a user can get wrong, refused with
//! a [`ConfigError`] that names the field.

use super::error::{ConfigError, MAX_DURATION};
use std::time::Duration;

use super::policies::{Recovery, Servers};
use super::Config;

impl Config {
    /// Refuses a setting that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_positive()?;
        self.check_durations()?;
        self.check_counts()?;
        self.check_servers()
    }

    /// A cluster has seeds, reached over TCP, and only database 0.
    fn check_servers(&self) -> Result<(), ConfigError> {
        if let Servers::Sentinel { sentinels, master, .. } = &self.servers {
            if sentinels.is_empty() {
                return Err(ConfigError::Zero {
                    field: "servers.sentinels",
                });
            }
            if sentinels.iter().any(|sentinel| sentinel.as_tcp().is_none()) {
                return Err(ConfigError::OutOfRange {
                    field: "servers.sentinels",
                    reason: "sentinels are reached over TCP, not Unix sockets",
                });
            }
            return crate::sentinel_address::check_master_name(master).map_err(|reason| ConfigError::OutOfRange {
                field: "servers.master",
                reason,
            });
        }
        let Servers::Cluster { seeds, .. } = &self.servers else {
            return Ok(());
        };
        if seeds.is_empty() {
            return Err(ConfigError::Zero { field: "servers.seeds" });
        }
        if seeds.iter().any(|seed| seed.as_tcp().is_none()) {
            return Err(ConfigError::OutOfRange {
                field: "servers.seeds",
                reason: "Redis Cluster nodes are reached over TCP, not Unix sockets",
            });
        }
        if self.database != 0 {
            return Err(ConfigError::OutOfRange {
                field: "database",
                reason: "Redis Cluster has only database 0 (drop the /db from the URL)",
            });
        }
        Ok(())
    }

    /// Durations that must not be zero.
    fn check_positive(&self) -> Result<(), ConfigError> {
        let positive = [
            ("lease_ttl", self.lease_ttl),
            ("acquire_timeout", self.acquire_timeout),
            ("request_liveness", self.request_liveness),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("release.initial_backoff", self.release.initial_backoff),
            ("waiter_lifetime", self.waiter_lifetime),
            ("idle_probe", self.idle_probe),
        ];
        for (field, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::Zero { field });
            }
        }
        Ok(())
    }

    /// Durations against each other and against what Redis can express.
    fn check_durations(&self) -> Result<(), ConfigError> {
        // Every deadline is an instant some of these durations from now:
        // bounded, their sums stay far inside what an `Instant` holds.
        let bounded = [
            ("lease_ttl", self.lease_ttl),
            ("acquire_timeout", self.acquire_timeout),
            ("request_liveness", self.request_liveness),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("reconnect_max_backoff", self.reconnect_max_backoff),
            ("release.initial_backoff", self.release.initial_backoff),
            ("release.max_backoff", self.release.max_backoff),
            ("waiter_lifetime", self.waiter_lifetime),
            ("idle_probe", self.idle_probe),
        ];
        for (field, value) in bounded {
            if value > MAX_DURATION {
                return Err(ConfigError::OutOfRange {
                    field,
                    reason: "longer than a year",
                });
            }
        }
        if let Recovery::Reassert { window: Some(window) } = self.recovery {
            if window > MAX_DURATION {
                return Err(ConfigError::OutOfRange {
                    field: "recovery.window",
                    reason: "longer than a year",
                });
            }
        }
        // Redis expiries are whole milliseconds; a sub-millisecond TTL is zero there.
        if self.lease_ttl < Duration::from_millis(1) {
            return Err(ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 1,
                actual_ms: self.lease_ttl.as_millis(),
                because: "Redis counts expiries in whole milliseconds",
            });
        }
        // A grant is delivered within the acquire timeout of its request, so
        // with a longer TTL no caller is ever handed a lease that has already
        // run out in Redis.
        if self.lease_ttl <= self.acquire_timeout {
            return Err(ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: self.acquire_timeout.as_millis() + 1,
                actual_ms: self.lease_ttl.as_millis(),
                because: "longer than the acquire timeout (`timeout`), so that no grant is delivered already expired",
            });
        }
        if self.request_liveness < self.acquire_timeout {
            return Err(ConfigError::TooShort {
                field: "request_liveness",
                min_ms: self.acquire_timeout.as_millis(),
                actual_ms: self.request_liveness.as_millis(),
                because: "at least the acquire timeout (`timeout`): a caller that stops waiting must not condemn a healthy connection",
            });
        }
        if let Some(acks) = self.replica_acks {
            if acks.replicas == 0 {
                return Err(ConfigError::Zero {
                    field: "replica_acks.replicas",
                });
            }
            if acks.timeout < Duration::from_millis(1) || acks.timeout >= self.acquire_timeout {
                return Err(ConfigError::OutOfRange {
                    field: "replica_acks.timeout",
                    reason: "must be at least 1 ms and shorter than the acquire timeout",
                });
            }
        }
        if let Recovery::Reassert { window: Some(window) } = self.recovery {
            if window < Duration::from_millis(1) {
                return Err(ConfigError::TooShort {
                    field: "recovery.window",
                    min_ms: 1,
                    actual_ms: window.as_millis(),
                    because: "the hold key's expiry is in whole milliseconds",
                });
            }
        }
        if self.reconnect_max_backoff < self.reconnect_initial_backoff {
            return Err(ConfigError::OutOfRange {
                field: "reconnect_max_backoff",
                reason: "smaller than reconnect_initial_backoff",
            });
        }
        if self.release.max_backoff < self.release.initial_backoff {
            return Err(ConfigError::OutOfRange {
                field: "release.max_backoff",
                reason: "smaller than release.initial_backoff",
            });
        }
        Ok(())
    }

    /// Counts that must not be zero, and the key prefix.
    fn check_counts(&self) -> Result<(), ConfigError> {
        let counts = [
            ("max_in_flight", self.max_in_flight),
            ("release.max_attempts", self.release.max_attempts as usize),
            ("release.max_retrying", self.release.max_retrying),
            ("reply_limits.max_frame_bytes", self.reply_limits.max_frame_bytes),
            ("reply_limits.max_line_bytes", self.reply_limits.max_line_bytes),
            ("reply_limits.max_array_len", self.reply_limits.max_array_len),
            ("reply_limits.max_depth", self.reply_limits.max_depth),
        ];
        for (field, value) in counts {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::KeyPrefix(self.key_prefix.clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Endpoint;
    use crate::config::limit;

    #[test]
    fn default_config_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn zero_durations_counts_and_bad_prefixes_are_refused() {
        let bad = |f: fn(&mut Config)| {
            let mut config = Config::default();
            f(&mut config);
            config.validate().unwrap_err()
        };
        assert_eq!(
            bad(|c| c.lease_ttl = Duration::ZERO),
            ConfigError::Zero { field: "lease_ttl" }
        );
        assert!(matches!(
            bad(|c| c.lease_ttl = Duration::from_micros(10)),
            ConfigError::TooShort { .. }
        ));
        assert_eq!(
            bad(|c| c.acquire_timeout = Duration::ZERO),
            ConfigError::Zero {
                field: "acquire_timeout"
            }
        );
        assert_eq!(
            bad(|c| c.max_in_flight = 0),
            ConfigError::Zero { field: "max_in_flight" }
        );
        assert!(matches!(
            bad(|c| c.request_liveness = Duration::from_millis(1)),
            ConfigError::TooShort { .. }
        ));
        // A lease that could run out before its grant is even delivered.
        assert!(matches!(
            bad(|c| c.lease_ttl = c.acquire_timeout),
            ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 251,
                actual_ms: 250,
                ..
            }
        ));
        assert_eq!(
            bad(|c| c.lease_ttl = c.acquire_timeout).to_string(),
            "lease_ttl must be at least 251 ms (longer than the acquire timeout (`timeout`), so that no grant \
             is delivered already expired); it is 250 ms"
        );
        assert!(matches!(
            bad(|c| c.key_prefix = "a{b".into()),
            ConfigError::KeyPrefix(_)
        ));
        assert!(matches!(
            bad(|c| c.key_prefix = String::new()),
            ConfigError::KeyPrefix(_)
        ));
        assert_eq!(limit(0), Err(ConfigError::Zero { field: "limit" }));
        fn seed() -> Endpoint {
            Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 7000,
            }
        }
        assert!(matches!(
            bad(|c| {
                c.servers = Servers::Cluster {
                    seeds: vec![seed()],
                    tls: false,
                };
                c.database = 3;
            }),
            ConfigError::OutOfRange { field: "database", .. }
        ));
        assert_eq!(
            bad(|c| c.servers = Servers::Cluster {
                seeds: vec![],
                tls: false
            }),
            ConfigError::Zero { field: "servers.seeds" }
        );
        assert!(matches!(
            bad(|c| c.servers = Servers::Cluster {
                seeds: vec![seed(), Endpoint::Unix("/tmp/r.sock".into())],
                tls: false
            }),
            ConfigError::OutOfRange {
                field: "servers.seeds",
                ..
            }
        ));
        assert_eq!(limit(3).unwrap().get(), 3);
    }
}
