//! Test fixtures for `inflight` against a real `redis-server`.
//!
//! [`RedisServer`] starts its own server on a free loopback port and stops it
//! on drop. When `redis-server` is not installed, it fails the test with the
//! command that installs it: a test that needs Redis never passes without it.

pub mod alloc_counter;
pub mod bench;
pub mod composite_load;
pub mod cpu;
pub mod hostile;
pub mod http_client;
pub mod load;
pub mod mutations;
pub mod pki;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod relay;
pub mod resp_client;
pub mod stale_sentinel;
pub mod stateful;
pub mod subject;
pub mod tls_sentinel;
pub mod watched;

pub use hostile::{HostilePeer, Lie};

/// The README's code compiles as written (imports included).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct MainReadme;
pub use pki::TestPki;
pub use redis_cluster::RedisCluster;
pub use redis_sentinel::SentinelSet;
pub use redis_server::RedisServer;
pub use relay::{Mode, Relay};
pub use resp_client::RespClient;

/// A small deterministic generator (xorshift64) for tests' random choices:
/// the same seed gives the same run.
pub struct Rng(pub u64);

impl Rng {
    /// Uniform-enough in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
