//! A Redis Cluster around the reference model, for the simulator: which
//! host owns which slot, one slot migrating at a time, and the answers a
//! real node gives a command for a slot it does not (or no longer) serve —
//! `MOVED`, `ASK`, `TRYAGAIN` — following the rules of Redis's
//! `getNodeByQuery`. The data itself lives in one [`RedisModel`] (the
//! cluster's, as if every replica were in sync): a key is *on* the migration
//! source until its slot's keys have been moved, then on the target.

use bytes::Bytes;

use crate::model::RedisModel;
use inflight_core::resp::Frame;
use inflight_core::slot::{slot_of, SLOTS};

/// One slot on its way from one host to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    pub slot: u16,
    pub from: usize,
    pub to: usize,
    /// The slot's keys have been copied to `to` (and deleted on `from`).
    pub keys_moved: bool,
}

#[derive(Clone, Debug)]
pub struct ModelCluster {
    /// `host:port` of each host, as redirects and `CLUSTER SHARDS` name them.
    pub addresses: Vec<(String, u16)>,
    /// The owning host per slot.
    owners: Vec<usize>,
    pub migration: Option<Migration>,
}

/// One connection's cluster state: the `ASKING` flag, good for one command.
#[derive(Clone, Debug, Default)]
pub struct ClusterConnection {
    asking: bool,
}

impl ModelCluster {
    /// `addresses.len()` hosts; the first `primaries` share the slots in
    /// equal ranges, the others are replicas until promoted.
    pub fn new(addresses: Vec<(String, u16)>, primaries: usize) -> Self {
        let per = usize::from(SLOTS).div_ceil(primaries);
        let owners = (0..usize::from(SLOTS)).map(|slot| slot / per).collect();
        Self {
            addresses,
            owners,
            migration: None,
        }
    }

    pub fn owner(&self, slot: u16) -> usize {
        self.owners[usize::from(slot)]
    }

    /// Gives `slot` to `host` at once (setting up the initial layout).
    pub fn assign(&mut self, slot: u16, host: usize) {
        self.owners[usize::from(slot)] = host;
    }

    /// The primaries: hosts that own a slot.
    pub fn primaries(&self) -> Vec<usize> {
        let mut hosts: Vec<usize> = self.owners.clone();
        hosts.sort_unstable();
        hosts.dedup();
        hosts
    }

    /// A failover: every slot of `failed` goes to `replica`.
    pub fn promote(&mut self, failed: usize, replica: usize) {
        for owner in &mut self.owners {
            if *owner == failed {
                *owner = replica;
            }
        }
        if let Some(migration) = &mut self.migration {
            if migration.from == failed {
                migration.from = replica;
            }
            if migration.to == failed {
                migration.to = replica;
            }
        }
    }

    /// `SETSLOT … NODE` on both sides: the migration is over.
    pub fn finish_migration(&mut self) {
        if let Some(migration) = self.migration.take() {
            self.owners[usize::from(migration.slot)] = migration.to;
        }
    }

    /// What `host` answers instead of running `args`, if anything.
    pub fn intercept(
        &self,
        host: usize,
        conn: &mut ClusterConnection,
        model: &mut RedisModel,
        args: &[Bytes],
    ) -> Option<Frame> {
        let name = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
        let asking = std::mem::take(&mut conn.asking);
        match name.as_str() {
            "ASKING" => {
                conn.asking = true;
                return Some(Frame::SimpleString(Bytes::from_static(b"OK")));
            }
            "CLUSTER" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"SHARDS")) => {
                return Some(self.shards());
            }
            _ => {}
        }
        let keys = command_keys(&name, args)?;
        let slot = slot_of(keys.first()?);
        if keys.iter().any(|key| slot_of(key) != slot) {
            return Some(Frame::Error(
                "CROSSSLOT Keys in request don't hash to the same slot".into(),
            ));
        }
        let owner = self.owner(slot);
        let migration = self.migration.as_ref().filter(|m| m.slot == slot);
        // Which of the keys this host holds now.
        let holds = |model: &mut RedisModel, key: &Bytes| match migration {
            Some(m) if host == m.from => !m.keys_moved && model.exists(key),
            Some(m) if host == m.to => m.keys_moved && model.exists(key),
            _ => model.exists(key),
        };
        let existing = keys.iter().filter(|key| holds(model, key)).count();
        let missing = keys.len() - existing;
        match migration {
            Some(m) if host == owner && host == m.from && missing > 0 => Some(if existing > 0 {
                try_again()
            } else {
                self.redirect("ASK", slot, m.to)
            }),
            _ if host == owner => None,
            Some(m) if host == m.to && asking => (keys.len() > 1 && missing > 0).then(try_again),
            _ => Some(self.redirect("MOVED", slot, owner)),
        }
    }

    fn redirect(&self, kind: &str, slot: u16, host: usize) -> Frame {
        let (name, port) = &self.addresses[host];
        Frame::Error(format!("{kind} {slot} {name}:{port}").into())
    }

    /// `CLUSTER SHARDS` as Redis 7 answers it (primaries only).
    fn shards(&self) -> Frame {
        let bulk = |text: &str| Frame::BulkString(Bytes::copy_from_slice(text.as_bytes()));
        let mut shards = Vec::new();
        for host in self.primaries() {
            let mut bounds = Vec::new();
            let mut slot = 0usize;
            while slot < usize::from(SLOTS) {
                if self.owners[slot] != host {
                    slot += 1;
                    continue;
                }
                let first = slot;
                while slot < usize::from(SLOTS) && self.owners[slot] == host {
                    slot += 1;
                }
                bounds.extend([Frame::Integer(first as i64), Frame::Integer(slot as i64 - 1)]);
            }
            let (name, port) = &self.addresses[host];
            let node = Frame::Array(vec![
                bulk("id"),
                bulk(&format!("{host:040}")),
                bulk("port"),
                Frame::Integer(i64::from(*port)),
                bulk("ip"),
                bulk("?"),
                bulk("endpoint"),
                bulk(name),
                bulk("role"),
                bulk("master"),
                bulk("health"),
                bulk("online"),
            ]);
            shards.push(Frame::Array(vec![
                bulk("slots"),
                Frame::Array(bounds),
                bulk("nodes"),
                Frame::Array(vec![node]),
            ]));
        }
        Frame::Array(shards)
    }
}

fn try_again() -> Frame {
    Frame::Error("TRYAGAIN Multiple keys request during rehashing of slot".into())
}

/// The keys a command names: a script's declared keys, `ZREM`'s key.
fn command_keys<'a>(name: &str, args: &'a [Bytes]) -> Option<&'a [Bytes]> {
    match name {
        "EVALSHA" | "EVAL" => {
            let count: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            args.get(3..3 + count)
        }
        "ZREM" => args.get(1..2),
        // A shard channel routes like a key.
        "SSUBSCRIBE" | "SUNSUBSCRIBE" => args.get(1..),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConnection;
    use inflight_core::key::{Key, SubjectKeys};
    use inflight_core::resp::encode_command;

    fn call(
        cluster: &ModelCluster,
        host: usize,
        conn: &mut ClusterConnection,
        model: &mut RedisModel,
        args: &[&[u8]],
    ) -> Frame {
        let mut out = bytes::BytesMut::new();
        encode_command(&mut out, args);
        let mut plain = ModelConnection::new();
        let replies = model
            .handle_each_with(&mut plain, &out, |model, args| {
                cluster.intercept(host, conn, model, args)
            })
            .unwrap();
        let mut reader = inflight_core::resp::ReplyReader::new(inflight_core::resp::ReplyLimits::TOPOLOGY);
        reader.push(&replies[0]);
        reader.next_frame().unwrap().unwrap()
    }

    #[test]
    fn redirects_follow_the_redis_rules() {
        let keys = SubjectKeys::new("m", &Key::new("t", "acme").unwrap());
        let slot = keys.slot();
        let addresses = (0..3).map(|i| (format!("redis{i}"), 6379)).collect();
        let mut cluster = ModelCluster::new(addresses, 2);
        cluster.assign(slot, 0);
        let mut model = RedisModel::new(1_000_000);
        let mut conn = ClusterConnection::default();
        let zrem = [&b"ZREM"[..], keys.leases(), b"id"];
        let error = |frame: Frame| match frame {
            Frame::Error(message) => message.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(call(&cluster, 0, &mut conn, &mut model, &zrem), Frame::Integer(0));
        assert_eq!(
            error(call(&cluster, 1, &mut conn, &mut model, &zrem)),
            format!("MOVED {slot} redis0:6379")
        );
        // Migrating to host 1, keys not moved: a missing key is asked for there.
        cluster.migration = Some(Migration {
            slot,
            from: 0,
            to: 1,
            keys_moved: false,
        });
        assert_eq!(
            error(call(&cluster, 0, &mut conn, &mut model, &zrem)),
            format!("ASK {slot} redis1:6379")
        );
        // Without ASKING the target sends it back; with it, it answers.
        assert!(error(call(&cluster, 1, &mut conn, &mut model, &zrem)).starts_with("MOVED"));
        call(&cluster, 1, &mut conn, &mut model, &[b"ASKING"]);
        assert_eq!(call(&cluster, 1, &mut conn, &mut model, &zrem), Frame::Integer(0));
        // ASKING is good for one command only.
        assert!(error(call(&cluster, 1, &mut conn, &mut model, &zrem)).starts_with("MOVED"));
        cluster.finish_migration();
        assert!(error(call(&cluster, 0, &mut conn, &mut model, &zrem)).starts_with("MOVED"));
        let shards = call(&cluster, 2, &mut conn, &mut model, &[b"CLUSTER", b"SHARDS"]);
        let table = inflight_core::cluster::parse_shards(
            &shards,
            &inflight_core::Endpoint::Tcp {
                host: "x".into(),
                port: 1,
            },
            false,
        )
        .unwrap();
        assert_eq!(table.len(), 2);
    }
}
