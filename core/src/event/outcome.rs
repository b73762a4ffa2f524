//! How a call ends for its caller: a lease, a refusal, a renewal, or why
//! Redis could not give a trustworthy answer.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::errors::ConnectionError;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::server_error::ServerError;

/// A granted lease. Give it back with `Client::release`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub(crate) id: LeaseId,
    pub(crate) keys: SubjectKeys,
    pub(crate) expires_at: Instant,
    pub(crate) fencing_token: u64,
    /// When its grant was read: releases report how long it was held.
    pub(crate) granted_at: Instant,
    /// Until when Redis may still hold it: a release keeps trying until
    /// then. `expires_at` for most; later for a slot handed over, whose
    /// short reservation a renewal on its way extends to a whole TTL.
    pub(crate) release_until: Instant,
}

impl Lease {
    /// The lease's id, the member of the Redis sorted set.
    pub fn id(&self) -> &LeaseId {
        &self.id
    }

    /// How many units of its key's limit it takes.
    pub fn weight(&self) -> u32 {
        self.id.weight()
    }

    /// The Redis key of the lease set this lease lives in.
    pub fn redis_key(&self) -> &Bytes {
        self.keys.leases()
    }

    /// The lease's TTL counted from when its acquire (or last renewal) was
    /// sent: Redis holds it at least until about here, and forgets it on its
    /// own soon after. Releases stop retrying here; renew before it.
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }

    /// The grant's fencing token, if the client asked for tokens
    /// (`Config::fencing_tokens`): strictly greater than every token granted
    /// before it for the same subject (see `docs/operations.md`, "Restarts
    /// and failovers", for what holds across a failover). A resource that
    /// remembers the highest token it has seen can refuse a holder that was
    /// paused past its lease and still believes it holds it.
    pub fn fencing_token(&self) -> Option<u64> {
        (self.fencing_token > 0).then_some(self.fencing_token)
    }
}

/// How one acquire ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Redis recorded the lease: the caller holds a slot until it releases.
    Granted(Lease),
    /// Redis recorded a lease on every subject of `Client::acquire_all`, in
    /// the order they were given: the caller holds a slot of each until it
    /// releases them (one `Client::release` per lease).
    GrantedAll(Vec<Lease>),
    /// Redis, over a trusted connection, counted `limit` live leases (for a
    /// waiting acquire: no slot came before its deadline).
    Exceeded,
    /// `Client::acquire_all` took nothing: its subject of this index (in
    /// the order given) had `limit` live leases, over a trusted connection.
    ExceededAt(usize),
    /// A waiting acquire was refused at once: the server expects the wait
    /// for a slot (the queue ahead of it, at the subject's average hold) to
    /// be about this long, longer than the caller may wait.
    Shed(Duration),
    /// No trustworthy answer (policy `Deny`).
    Unavailable(Unavailable),
    /// No trustworthy answer, let through without a lease (policy `Allow`).
    FailOpen(Unavailable),
}

/// How one renewal (`Client::renew`) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Redis extended the lease; this is it with its new expiry.
    Extended(Lease),
    /// Redis no longer holds the lease (it expired, or was released): the slot
    /// is not held any more, and the lease needs no release.
    Lost,
    /// No trustworthy answer; the lease keeps the expiry it had. Whatever the
    /// unavailable policy, a renewal never fails open: only the holder knows
    /// whether to go on.
    Unavailable(Unavailable),
}

/// Why an acquire got no trustworthy answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// No reply within the acquire timeout.
    #[error("no reply within the acquire timeout")]
    Timeout,
    /// `max_in_flight` acquires were already waiting: failed fast.
    #[error("too many acquires in flight on the connection")]
    Overloaded,
    /// No connection, and the last attempt to make one failed for this
    /// reason (its `source`).
    #[error("not connected to Redis")]
    NotConnected(#[source] ConnectionError),
    /// The connection was lost (for this reason, its `source`) before the
    /// reply came.
    #[error("the connection was lost before the reply")]
    ConnectionLost(#[source] ConnectionError),
    /// Redis refused the command (its `source`); [`ServerError::kind`] says
    /// why.
    #[error("Redis answered with an error")]
    Server(#[source] ServerError),
    /// No cluster primary serves the subject's slot for now (the cluster is
    /// failing over or being resharded).
    #[error("no Redis Cluster primary serves the key's slot for now")]
    NoPrimary,
    /// The script found the lease id tombstoned (already compensated).
    #[error("Redis refused the lease id as already released")]
    Refused,
    /// The request reached Redis after its valid-until (held up by a stall,
    /// a slow proxy or a paused server) and was refused: it took nothing.
    #[error("the request reached Redis too late and was refused")]
    Stale,
    /// The server lost lease data (restarted empty, failed over, flushed)
    /// and the fleet is writing back the leases it holds: new grants wait
    /// until the recovery window ends. Retry after it.
    #[error("Redis lost lease data and is being recovered: no new grants until the fleet has written back its leases")]
    Recovering,
    /// The grant was made, but fewer replicas than `replica_acks` asked for
    /// acknowledged it in time (`WAIT`): it was released again.
    #[error("the grant reached {acked} of {wanted} replicas in time and was released")]
    NotReplicated {
        /// Replicas that acknowledged it.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
}

/// Why a release gave up (the lease will expire at its TTL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseFailure {
    /// Every attempt failed.
    #[error("every attempt failed")]
    AttemptsExhausted,
    /// The lease expired before a release got through.
    #[error("the lease expired before a release got through")]
    Expired,
    /// `max_retrying` releases were already waiting for a retry.
    #[error("too many releases already waiting for a retry")]
    Overloaded,
}

/// How a kept-alive lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLost {
    /// A renewal found it gone from Redis: it expired there (the holder's
    /// process stalled past its TTL), it was released by someone else, or
    /// the server lost it.
    Gone,
    /// No renewal was confirmed before its expiry (Redis unreachable for
    /// longer than the renewal margin): it may be gone.
    Expired,
}
