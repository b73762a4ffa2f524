//! Who a server is: what each handshake learns (`ROLE`, `INFO`, our
//! lease-data marker), and what a change since the last handshake says
//! about the lease data it holds.

use bytes::Bytes;

use crate::event::DataLoss;
use crate::resp::Frame;

/// What one handshake learned about its server. Each part is `None` when
/// the server would not say (an ACL may forbid `INFO`, say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Identity {
    /// `run_id`: new at every start of the server process.
    pub(super) run_id: Option<Bytes>,
    /// `master_replid`: the history of the data set; new when a replica is
    /// promoted or a server starts without its data.
    pub(super) replid: Option<Bytes>,
    /// `master_replid2`: the history a promoted replica continued from.
    pub(super) replid2: Option<Bytes>,
    /// Our marker's value, and whether this handshake wrote it.
    pub(super) marker: Option<Bytes>,
    pub(super) marker_created: bool,
}

/// The replication id Redis reports when there is no second history.
const NO_REPLID: &[u8] = b"0000000000000000000000000000000000000000";

impl Identity {
    /// Reads `run_id`, `master_replid` and `master_replid2` from an `INFO` text.
    pub(super) fn learn_info(&mut self, info: &[u8]) {
        for (name, value) in info_fields(info) {
            let value = (!value.is_empty() && value.len() <= 64).then(|| Bytes::copy_from_slice(value));
            match name {
                b"run_id" => self.run_id = value,
                b"master_replid" => self.replid = value,
                b"master_replid2" => self.replid2 = value.filter(|v| v != NO_REPLID),
                _ => {}
            }
        }
    }

    /// Why data held on this server's last run (`before`) may be gone now.
    /// A marker written anew is proof; a new replication id or run id is
    /// reason to suspect (a snapshot or a lagging replica misses the last
    /// writes). Unknown parts prove nothing either way.
    pub(super) fn loss_since(&self, before: &Identity) -> Option<DataLoss> {
        let changed = |now: &Option<Bytes>, then: &Option<Bytes>| matches!((now, then), (Some(a), Some(b)) if a != b);
        if before.marker.is_some() && (self.marker_created || changed(&self.marker, &before.marker)) {
            return Some(DataLoss::Emptied);
        }
        if changed(&self.replid, &before.replid) {
            return Some(if self.continues(before) {
                DataLoss::FailedOver
            } else {
                DataLoss::Restarted
            });
        }
        changed(&self.run_id, &before.run_id).then_some(DataLoss::Restarted)
    }

    /// Whether this server is a promoted replica of `other` (its second
    /// replication id is `other`'s id).
    pub(super) fn continues(&self, other: &Identity) -> bool {
        matches!((&self.replid2, &other.replid), (Some(a), Some(b)) if a == b)
    }
}

/// The `name:value` lines of an `INFO` text (section headers and blank
/// lines skipped).
pub(super) fn info_fields(info: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    info.split(|byte| *byte == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|byte| *byte == b':')?;
        Some((&line[..colon], &line[colon + 1..]))
    })
}

/// The eviction policy an `INFO` text names when the server may evict
/// keys: `maxmemory` set and `maxmemory_policy` other than `noeviction`.
/// (With `maxmemory` 0, Redis never evicts, whatever the policy.)
pub(super) fn eviction(info: &[u8]) -> Option<String> {
    let mut limited = false;
    let mut policy = None;
    for (name, value) in info_fields(info) {
        match name {
            b"maxmemory" => limited = value != b"0",
            b"maxmemory_policy" if value.len() <= 32 => policy = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }
    policy.filter(|policy| limited && policy != "noeviction")
}

/// The server's version when an `INFO` text says it is older than Redis
/// 7.0, whose commands the scripts use (`SET … GET`, `ZADD … GT`,
/// `ZMSCORE`, `SPUBLISH`). Valkey reports `redis_version` 7.2.4 and up.
pub(super) fn too_old(info: &[u8]) -> Option<String> {
    info_fields(info).find_map(|(name, value)| {
        let major: u32 = std::str::from_utf8(value).ok()?.split('.').next()?.parse().ok()?;
        (name == b"redis_version" && major < 7).then(|| String::from_utf8_lossy(value).into_owned())
    })
}

/// What an `INFO` text says of `cluster_enabled`, if anything.
pub(super) fn cluster_enabled(info: &[u8]) -> Option<bool> {
    info_fields(info).find_map(|field| match field {
        (b"cluster_enabled", b"1") => Some(true),
        (b"cluster_enabled", b"0") => Some(false),
        _ => None,
    })
}

/// What a `ROLE` reply says: `Ok(())` for a primary, `Err(role)` for
/// anything else, `None` if it is not a `ROLE` reply at all.
pub(super) fn primary(frame: &Frame) -> Option<Result<(), String>> {
    let Frame::Array(items) = frame else {
        return None;
    };
    match items.first() {
        Some(Frame::BulkString(role)) if &role[..] == b"master" => Some(Ok(())),
        Some(Frame::BulkString(role)) if role.len() <= 32 => Some(Err(String::from_utf8_lossy(role).into_owned())),
        _ => None,
    }
}

/// What a `MARK` reply says: `{created, value}`.
pub(super) fn marker(frame: &Frame) -> Option<(bool, Bytes)> {
    let Frame::Array(items) = frame else {
        return None;
    };
    match &items[..] {
        [Frame::Integer(created @ (0 | 1)), Frame::BulkString(value)] if value.len() <= 128 => {
            Some((*created == 1, value.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(run_id: &str, replid: &str, replid2: &str, marker: &str) -> Identity {
        let mut id = Identity::default();
        id.learn_info(
            format!("# Server\r\nrun_id:{run_id}\r\n# Replication\r\nmaster_replid:{replid}\r\nmaster_replid2:{replid2}\r\n")
                .as_bytes(),
        );
        id.marker = Some(Bytes::from(marker.to_owned()));
        id
    }

    #[test]
    fn the_same_server_lost_nothing() {
        let a = identity("r1", "x", "0000000000000000000000000000000000000000", "m1");
        assert_eq!(a.replid2, None);
        assert_eq!(a.loss_since(&a.clone()), None);
    }

    #[test]
    fn a_new_marker_is_an_emptied_server_whatever_else_changed() {
        let before = identity("r1", "x", "", "m1");
        let mut after = identity("r2", "y", "", "m2");
        assert_eq!(after.loss_since(&before), Some(DataLoss::Emptied));
        after.marker = Some(Bytes::from_static(b"m1"));
        after.marker_created = true;
        assert_eq!(after.loss_since(&before), Some(DataLoss::Emptied));
    }

    #[test]
    fn a_promoted_replica_is_a_failover_and_a_new_run_a_restart() {
        let before = identity("r1", "x", "", "m1");
        assert_eq!(
            identity("r9", "y", "x", "m1").loss_since(&before),
            Some(DataLoss::FailedOver)
        );
        assert_eq!(
            identity("r9", "y", "", "m1").loss_since(&before),
            Some(DataLoss::Restarted)
        );
        assert_eq!(
            identity("r9", "x", "", "m1").loss_since(&before),
            Some(DataLoss::Restarted)
        );
    }

    #[test]
    fn what_a_server_will_not_say_proves_nothing() {
        let before = identity("r1", "x", "", "m1");
        assert_eq!(Identity::default().loss_since(&before), None);
        assert_eq!(identity("r1", "x", "", "m1").loss_since(&Identity::default()), None);
    }

    #[test]
    fn a_server_older_than_redis_7_is_named() {
        assert_eq!(too_old(b"# Server\r\nredis_version:6.2.14\r\n"), Some("6.2.14".into()));
        assert_eq!(too_old(b"# Server\r\nredis_version:7.0.15\r\n"), None);
        assert_eq!(too_old(b"# Server\r\nredis_version:8.2.1\r\n"), None);
        assert_eq!(too_old(b"# Server\r\nrun_id:x\r\n"), None, "not said: tried");
    }

    #[test]
    fn eviction_is_a_policy_that_evicts_under_a_memory_limit() {
        let info = |maxmemory: &str, policy: &str| {
            format!("# Memory\r\nmaxmemory:{maxmemory}\r\nmaxmemory_policy:{policy}\r\n")
        };
        assert_eq!(
            eviction(info("0", "allkeys-lru").as_bytes()),
            None,
            "no limit, no eviction"
        );
        assert_eq!(eviction(info("1048576", "noeviction").as_bytes()), None);
        assert_eq!(
            eviction(info("1048576", "volatile-lru").as_bytes()),
            Some("volatile-lru".into())
        );
        assert_eq!(eviction(b"# Server\r\nrun_id:x\r\n"), None, "not said: nothing known");
    }

    #[test]
    fn role_replies_name_the_role() {
        let role = |name: &'static [u8]| Frame::Array(vec![Frame::BulkString(Bytes::from_static(name))]);
        assert_eq!(primary(&role(b"master")), Some(Ok(())));
        assert_eq!(primary(&role(b"slave")), Some(Err("slave".into())));
        assert_eq!(primary(&Frame::Integer(1)), None);
        assert_eq!(primary(&Frame::Array(vec![])), None);
    }
}
