//! What Redis Cluster tells a client about where slots live: the replies of
//! `CLUSTER SHARDS` (Redis 7) and `CLUSTER SLOTS` (older), and the target of
//! a `MOVED` or `ASK` redirect. Parsing only: the `Client` decides what to
//! do with it. Every reply is checked, never trusted: a lie is an error, not
//! a panic or a slot routed nowhere.

use crate::address::Endpoint;
use crate::resp::Frame;
use crate::slot::SLOTS;

/// One shard: the slot ranges it serves (inclusive) and its primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Inclusive `(first, last)` slot ranges.
    pub ranges: Vec<(u16, u16)>,
    /// Where the shard's primary takes connections.
    pub primary: Endpoint,
}

/// Why a topology reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unusable cluster topology reply: {0}")]
pub struct TopologyError(pub(crate) &'static str);

/// Reads a `CLUSTER SHARDS` reply. `asked` is the node that answered: a
/// primary whose endpoint is unknown (`?`) or empty is reached at its host.
/// With `tls`, a node's `tls-port` is used (its `port` is then plain text).
pub fn parse_shards(frame: &Frame, asked: &Endpoint, tls: bool) -> Result<Vec<Shard>, TopologyError> {
    let Frame::Array(shards) = frame else {
        return Err(TopologyError("CLUSTER SHARDS did not answer an array"));
    };
    let mut parsed = Vec::with_capacity(shards.len());
    for shard in shards {
        let fields = map(shard)?;
        let ranges = match field(&fields, "slots") {
            Some(Frame::Array(bounds)) => ranges(bounds)?,
            _ => return Err(TopologyError("a shard without slots")),
        };
        if ranges.is_empty() {
            continue; // a shard that serves nothing (being added or emptied)
        }
        let Some(Frame::Array(nodes)) = field(&fields, "nodes") else {
            return Err(TopologyError("a shard without nodes"));
        };
        let mut primary = None;
        for node in nodes {
            let node = map(node)?;
            if text(field(&node, "role")) == Some("master") {
                primary = Some(shard_node_endpoint(&node, asked, tls)?);
            }
        }
        let Some(primary) = primary else {
            return Err(TopologyError("a shard with slots and no primary"));
        };
        parsed.push(Shard { ranges, primary });
    }
    Ok(parsed)
}

/// Reads a `CLUSTER SLOTS` reply: `[first, last, [host, port, id, …], replicas…]` per range.
pub fn parse_slots(frame: &Frame, asked: &Endpoint) -> Result<Vec<Shard>, TopologyError> {
    let Frame::Array(entries) = frame else {
        return Err(TopologyError("CLUSTER SLOTS did not answer an array"));
    };
    let mut parsed: Vec<Shard> = Vec::new();
    for entry in entries {
        let Frame::Array(items) = entry else {
            return Err(TopologyError("a slot range that is not an array"));
        };
        let (Some(first), Some(last), Some(Frame::Array(primary))) = (items.first(), items.get(1), items.get(2)) else {
            return Err(TopologyError("a slot range without bounds and primary"));
        };
        let range = range(first, last)?;
        let host = match primary.first() {
            Some(Frame::BulkString(host)) => std::str::from_utf8(host).ok(),
            Some(Frame::Null) => Some(""),
            _ => None,
        };
        let port = match primary.get(1) {
            Some(Frame::Integer(port)) => u16::try_from(*port).ok().filter(|p| *p != 0),
            _ => None,
        };
        let (Some(host), Some(port)) = (host, port) else {
            return Err(TopologyError("a slot range whose primary has no host and port"));
        };
        let primary = endpoint(host, port, asked)?;
        match parsed.iter_mut().find(|shard| shard.primary == primary) {
            Some(shard) => shard.ranges.push(range),
            None => parsed.push(Shard {
                ranges: vec![range],
                primary,
            }),
        }
    }
    Ok(parsed)
}

/// The slot and node of a `MOVED <slot> <host>:<port>` or `ASK …` message.
/// An empty host (a node that does not know its own address) means the
/// host of the node that redirected.
pub fn parse_redirect(message: &str, from: &Endpoint) -> Option<(u16, Endpoint)> {
    let mut words = message.split(' ');
    let _kind = words.next()?;
    let slot = words.next()?.parse::<u16>().ok().filter(|slot| *slot < SLOTS)?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|port| *port != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((slot, endpoint(host, port, from).ok()?))
}

/// A flat `[name, value, name, value…]` map, as RESP2 sends maps.
fn map(frame: &Frame) -> Result<Vec<(&str, &Frame)>, TopologyError> {
    let Frame::Array(items) = frame else {
        return Err(TopologyError("a map that is not an array"));
    };
    if !items.len().is_multiple_of(2) {
        return Err(TopologyError("a map with an odd number of items"));
    }
    items
        .chunks_exact(2)
        .map(|pair| match &pair[0] {
            Frame::BulkString(name) | Frame::SimpleString(name) => std::str::from_utf8(name)
                .map(|name| (name, &pair[1]))
                .map_err(|_| TopologyError("a map key that is not text")),
            _ => Err(TopologyError("a map key that is not a string")),
        })
        .collect()
}

fn field<'a>(fields: &[(&str, &'a Frame)], name: &str) -> Option<&'a Frame> {
    fields.iter().find(|(key, _)| *key == name).map(|(_, value)| *value)
}

fn text(frame: Option<&Frame>) -> Option<&str> {
    match frame? {
        Frame::BulkString(bytes) | Frame::SimpleString(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

fn integer(frame: Option<&Frame>) -> Option<i64> {
    match frame? {
        Frame::Integer(n) => Some(*n),
        _ => None,
    }
}

/// `[first, last, first, last…]`.
fn ranges(bounds: &[Frame]) -> Result<Vec<(u16, u16)>, TopologyError> {
    if !bounds.len().is_multiple_of(2) {
        return Err(TopologyError("slot bounds that do not pair up"));
    }
    bounds.chunks_exact(2).map(|pair| range(&pair[0], &pair[1])).collect()
}

fn range(first: &Frame, last: &Frame) -> Result<(u16, u16), TopologyError> {
    let bound = |frame: &Frame| match frame {
        Frame::Integer(n) => u16::try_from(*n).ok().filter(|slot| *slot < SLOTS),
        _ => None,
    };
    match (bound(first), bound(last)) {
        (Some(first), Some(last)) if first <= last => Ok((first, last)),
        _ => Err(TopologyError("a slot range out of bounds")),
    }
}

/// Where a `CLUSTER SHARDS` node takes connections: its announced endpoint
/// (an IP or a host name, by `cluster-preferred-endpoint-type`), its IP if
/// the endpoint is unknown, and the port we speak (`tls-port` over TLS).
fn shard_node_endpoint(node: &[(&str, &Frame)], asked: &Endpoint, tls: bool) -> Result<Endpoint, TopologyError> {
    let host = match text(field(node, "endpoint")) {
        Some(endpoint) if !endpoint.is_empty() && endpoint != "?" => endpoint,
        _ => text(field(node, "ip")).unwrap_or(""),
    };
    let port = if tls {
        integer(field(node, "tls-port"))
    } else {
        integer(field(node, "port"))
    };
    let Some(port) = port.and_then(|port| u16::try_from(port).ok()).filter(|port| *port != 0) else {
        return Err(TopologyError(if tls {
            "a primary without a tls-port: over TLS, nodes announce their TLS ports only with tls-cluster yes"
        } else {
            "a primary without a plain-text port (a TLS-only cluster needs rediss://)"
        }));
    };
    endpoint(host, port, asked)
}

fn endpoint(host: &str, port: u16, asked: &Endpoint) -> Result<Endpoint, TopologyError> {
    let host = match host {
        "" | "?" => match asked.as_tcp() {
            Some((host, _)) => host,
            None => return Err(TopologyError("a node without an address, asked over a Unix socket")),
        },
        host => host,
    };
    Ok(Endpoint::Tcp {
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn bulk(text: &str) -> Frame {
        Frame::BulkString(Bytes::copy_from_slice(text.as_bytes()))
    }

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
        }
    }

    fn node(role: &str, endpoint: &str, port: i64) -> Frame {
        Frame::Array(vec![
            bulk("id"),
            bulk("abc"),
            bulk("port"),
            Frame::Integer(port),
            bulk("ip"),
            bulk("10.0.0.9"),
            bulk("endpoint"),
            bulk(endpoint),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Frame::Integer(42),
            bulk("health"),
            bulk("online"),
        ])
    }

    fn shard(bounds: &[i64], nodes: Vec<Frame>) -> Frame {
        Frame::Array(vec![
            bulk("slots"),
            Frame::Array(bounds.iter().map(|b| Frame::Integer(*b)).collect()),
            bulk("nodes"),
            Frame::Array(nodes),
        ])
    }

    #[test]
    fn shards_give_each_primary_its_ranges() {
        let reply = Frame::Array(vec![
            shard(
                &[0, 5460, 10923, 10923],
                vec![node("replica", "127.0.0.1", 7004), node("master", "127.0.0.1", 7001)],
            ),
            shard(&[5461, 10922], vec![node("master", "redis-b.example", 7002)]),
            shard(&[], vec![node("master", "127.0.0.1", 7009)]),
        ]);
        let shards = parse_shards(&reply, &tcp("127.0.0.1", 7001), false).unwrap();
        assert_eq!(
            shards,
            vec![
                Shard {
                    ranges: vec![(0, 5460), (10923, 10923)],
                    primary: tcp("127.0.0.1", 7001)
                },
                Shard {
                    ranges: vec![(5461, 10922)],
                    primary: tcp("redis-b.example", 7002)
                },
            ]
        );
    }

    #[test]
    fn an_unknown_endpoint_falls_back_to_the_ip_and_then_the_asked_host() {
        let reply = Frame::Array(vec![shard(&[0, 16383], vec![node("master", "?", 7001)])]);
        let shards = parse_shards(&reply, &tcp("127.0.0.5", 7001), false).unwrap();
        assert_eq!(shards[0].primary, tcp("10.0.0.9", 7001));
    }

    #[test]
    fn lies_are_errors() {
        let asked = tcp("127.0.0.1", 7001);
        for reply in [
            Frame::Integer(3),
            Frame::Array(vec![shard(&[0], vec![node("master", "h", 1)])]),
            Frame::Array(vec![shard(&[0, 16384], vec![node("master", "h", 1)])]),
            Frame::Array(vec![shard(&[9, 3], vec![node("master", "h", 1)])]),
            Frame::Array(vec![shard(&[0, 1], vec![node("replica", "h", 1)])]),
            Frame::Array(vec![shard(&[0, 1], vec![node("master", "h", 0)])]),
            Frame::Array(vec![shard(&[0, 1], vec![node("master", "h", 70000)])]),
            Frame::Array(vec![Frame::Array(vec![bulk("slots")])]),
        ] {
            assert!(parse_shards(&reply, &asked, false).is_err(), "{reply:?}");
        }
        // Over TLS the plain port is not the one to use.
        let reply = Frame::Array(vec![shard(&[0, 1], vec![node("master", "h", 7001)])]);
        assert!(parse_shards(&reply, &asked, true).is_err());
    }

    #[test]
    fn cluster_slots_is_read_too() {
        let primary = |host: &str, port: i64| Frame::Array(vec![bulk(host), Frame::Integer(port), bulk("id")]);
        let reply = Frame::Array(vec![
            Frame::Array(vec![
                Frame::Integer(0),
                Frame::Integer(99),
                primary("127.0.0.1", 7001),
                primary("127.0.0.1", 7004),
            ]),
            Frame::Array(vec![Frame::Integer(100), Frame::Integer(16383), primary("", 7002)]),
            Frame::Array(vec![
                Frame::Integer(200),
                Frame::Integer(200),
                primary("127.0.0.1", 7001),
            ]),
        ]);
        let shards = parse_slots(&reply, &tcp("127.0.0.3", 7002)).unwrap();
        assert_eq!(shards[0].ranges, vec![(0, 99), (200, 200)]);
        assert_eq!(shards[1].primary, tcp("127.0.0.3", 7002));
        assert!(parse_slots(&Frame::Array(vec![Frame::Integer(1)]), &tcp("h", 1)).is_err());
    }

    #[test]
    fn redirects_name_a_slot_and_a_node() {
        let from = tcp("127.0.0.1", 7001);
        assert_eq!(
            parse_redirect("MOVED 3999 127.0.0.1:7002", &from),
            Some((3999, tcp("127.0.0.1", 7002)))
        );
        assert_eq!(parse_redirect("ASK 1 :7003", &from), Some((1, tcp("127.0.0.1", 7003))));
        assert_eq!(parse_redirect("MOVED 1 ::1:7003", &from), Some((1, tcp("::1", 7003))));
        for bad in [
            "MOVED",
            "MOVED x h:1",
            "MOVED 16384 h:1",
            "MOVED 1 h",
            "MOVED 1 h:0",
            "MOVED 1 h:x",
        ] {
            assert_eq!(parse_redirect(bad, &from), None, "{bad}");
        }
    }
}
