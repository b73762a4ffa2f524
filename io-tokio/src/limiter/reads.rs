//! What a limiter reads from Redis without taking anything: a key's usage
//! and holders, and the busiest keys under its prefix.

use inflight_core::event::RequestId;
use inflight_core::key::SubjectKeys;
use inflight_core::{FreshRequest, Holder, Inspection, Key, Unavailable};
use tokio::sync::oneshot;

use super::Limiter;
use crate::error::Error;
use crate::mailbox::{answer, Command};

/// The most holders `Limiter::holders` lists.
pub const MAX_HOLDERS: u32 = 2_000;

/// A read handed to the driver: its request id, and where its answer comes.
type Sent<T> = (RequestId, oneshot::Receiver<Result<T, Error>>);

/// The most key names `Limiter::busy_keys` reads from Redis before it
/// stops looking (it says so with `BusyKeys::complete`).
pub const MAX_SCANNED_KEYS: usize = 100_000;

/// The busiest keys under the limiter's prefix (see [`Limiter::busy_keys`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusyKeys {
    /// Busiest first: most units held, then most waiting.
    pub keys: Vec<(Key, Usage)>,
    /// How many keys with a lease set the scan found (busy or not).
    pub scanned: usize,
    /// `false` if the scan stopped at [`MAX_SCANNED_KEYS`] names.
    pub complete: bool,
}

/// How much of a key's limit is in use (see [`Limiter::usage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// Units held by live leases (a weight-`w` permit holds `w`).
    pub held: u64,
    /// The key's limit as Redis knows it: recorded by the key's waiting
    /// acquires (the last one's). `None` when none waited lately: a
    /// fail-fast acquire brings its limit with each call and records none,
    /// so only the services know it.
    pub limit_recorded: Option<u32>,
    /// Waiting acquires queued for a slot (whose clients still call).
    pub waiting: u64,
}

impl Usage {
    fn of(inspection: &Inspection) -> Self {
        Self {
            held: inspection.units,
            limit_recorded: inspection.limit_recorded,
            waiting: inspection.waiting,
        }
    }
}

impl Limiter {
    /// How much of `key`'s limit is in use now, across the fleet: the units
    /// its live leases hold (read from Redis; expired leases not pruned yet
    /// do not count), and the limit it is held to as far as this limiter
    /// knows: the one its waiters recorded in Redis, else this limiter's
    /// default. One round trip; read only.
    pub async fn usage(&self, key: &Key) -> Result<Usage, Error> {
        Ok(Usage::of(&self.inspect(key, 0).await?))
    }

    /// Who holds `key`'s slots now: its live leases (at most `MAX_HOLDERS`
    /// of them), each with its weight, expiry and holder label, soonest to
    /// expire first. Reads every live lease of the key: for operators, not
    /// for the request path.
    pub async fn holders(&self, key: &Key) -> Result<Vec<Holder>, Error> {
        Ok(self.inspect(key, MAX_HOLDERS).await?.holders)
    }

    /// The `most` busiest keys under this limiter's prefix, across every
    /// primary: each with its usage, busiest first (most units held, then
    /// most waiting); keys that hold nothing and have nobody waiting are
    /// left out. Walks the key space with `SCAN` (at most
    /// [`MAX_SCANNED_KEYS`] names), then reads each key's usage: for
    /// operators (the `inflight keys` and `inflight top` commands), never
    /// for the request path. A key whose leases change during the walk may
    /// show its usage of a moment later than others'.
    pub async fn busy_keys(&self, most: usize) -> Result<BusyKeys, Error> {
        let (names, complete) = self.scan_all().await?;
        let scanned = names.len();
        let mut keys = Vec::new();
        // Pipelined: a window of reads is handed to the driver before the
        // first answer is awaited, so they go out back to back.
        let names: Vec<Key> = names.into_iter().collect();
        for window in names.chunks(256) {
            let sent = window
                .iter()
                .map(|key| self.send_inspect(key, 0))
                .collect::<Result<Vec<_>, _>>()?;
            for (key, sent) in window.iter().zip(sent) {
                let inspection = self.answered(sent).await?;
                let usage = Usage::of(&inspection);
                if usage.held > 0 || usage.waiting > 0 {
                    keys.push((key.clone(), usage));
                }
            }
        }
        keys.sort_by(|(a_key, a), (b_key, b)| {
            (b.held, b.waiting)
                .cmp(&(a.held, a.waiting))
                .then_with(|| (a_key.namespace(), a_key.subject()).cmp(&(b_key.namespace(), b_key.subject())))
        });
        keys.truncate(most);
        Ok(BusyKeys {
            keys,
            scanned,
            complete,
        })
    }

    /// Every key with a lease set, from every primary (a key a page shows
    /// twice counted once); `false` if it stopped at the bound.
    async fn scan_all(&self) -> Result<(std::collections::HashSet<Key>, bool), Error> {
        let mut names = std::collections::HashSet::new();
        for shard in 0.. {
            let mut cursor = 0;
            loop {
                let Some(page) = self.scan(shard, cursor).await? else {
                    if shard == 0 {
                        // Not even one primary known: nothing was read.
                        return Err(Error::Unavailable {
                            reason: Unavailable::NoPrimary,
                        });
                    }
                    return Ok((names, true));
                };
                names.extend(page.keys);
                if names.len() >= MAX_SCANNED_KEYS {
                    return Ok((names, false));
                }
                if page.cursor == 0 {
                    break;
                }
                cursor = page.cursor;
            }
        }
        unreachable!("the shards are finite")
    }

    async fn scan(&self, shard: usize, cursor: u64) -> Result<Option<inflight_core::KeysPage>, Error> {
        let sent = self.send(|request, reply| Command::Scan {
            request,
            shard,
            cursor,
            count: 1000,
            reply,
        })?;
        self.answered(sent).await
    }

    async fn inspect(&self, key: &Key, holders: u32) -> Result<Inspection, Error> {
        let sent = self.send_inspect(key, holders)?;
        self.answered(sent).await
    }

    /// Hands an inspection to the driver; its answer comes on the receiver.
    fn send_inspect(&self, key: &Key, holders: u32) -> Result<Sent<Inspection>, Error> {
        self.send(|request, reply| Command::Inspect {
            request,
            keys: SubjectKeys::new(&self.shared.key_prefix, key),
            holders,
            reply,
        })
    }

    /// Hands the driver a read made by `command` from its request's name
    /// and reply channel.
    fn send<T>(
        &self,
        command: impl FnOnce(FreshRequest, oneshot::Sender<Result<T, Error>>) -> Command,
    ) -> Result<Sent<T>, Error> {
        let request = self.shared.commands.fresh();
        let id = request.id();
        let (reply, outcome) = oneshot::channel();
        self.shared
            .commands
            .send(command(request, reply))
            .map_err(|_| Error::Stopped)?;
        Ok((id, outcome))
    }

    /// The driver's answer to a read [`Limiter::send`] handed it.
    async fn answered<T>(&self, (request, outcome): Sent<T>) -> Result<T, Error> {
        match answer(&self.shared.commands, request, outcome).await {
            Ok(result) => result,
            Err(_) => Err(Error::Stopped),
        }
    }
}
