//! What a sentinel says, read without trust: its answers (an address, the
//! other sentinels) and its published messages (`+switch-master`,
//! `+odown`, `-odown`). Anything malformed is no news; an address must
//! look like one (a host without spaces, a port other than 0).

use bytes::Bytes;

use crate::address::Endpoint;
use crate::event::{ConnectionId, SentinelError};
use crate::resp::Frame;

/// What the watch heard.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum News {
    /// A sentinel named the primary: in answer to the question, or by a
    /// switch it announced.
    Primary(Endpoint),
    /// A sentinel found the primary down (`true`, `+odown`) or back (`-odown`).
    Down(bool),
    /// A sentinel could not be used (`ConnectionId`: its connection).
    Failed(ConnectionId, SentinelError),
    /// Every sentinel failed in a row: the watch backs off, and this is the
    /// most telling of their errors.
    AllFailed(ConnectionId, SentinelError),
}

/// What the watch asked, in the order the replies come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Question {
    Auth,
    Master,
    Sentinels,
    Subscribed,
    /// A liveness `PING` on the subscribed watch.
    Pong,
}

/// What a reply to a [`Question`] said.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// Where the primary is (`get-master-addr-by-name`).
    Primary(Endpoint),
    /// The other sentinels it knows of.
    Sentinels(Vec<Endpoint>),
    /// One channel's subscription confirmed.
    Subscribed,
    /// The liveness `PING` answered.
    Pong,
    /// Accepted, nothing learned (`AUTH`, or a list an ACL refused).
    Nothing,
}

/// The reply `frame` of `sentinel` to `question`, about `master`.
pub(super) fn answer(
    question: Question,
    frame: Frame,
    sentinel: &Endpoint,
    master: &Bytes,
) -> Result<Answer, SentinelError> {
    let sentinel = || sentinel.to_string();
    match (question, frame) {
        (Question::Auth, Frame::SimpleString(ok)) if &ok[..] == b"OK" => Ok(Answer::Nothing),
        (Question::Auth, Frame::Error(reason)) => Err(SentinelError::Auth {
            sentinel: sentinel(),
            reason: reason.to_string(),
        }),
        (Question::Master, Frame::Array(items)) => match address(&items) {
            Some(primary) => Ok(Answer::Primary(primary)),
            None => Err(SentinelError::Unexpected {
                sentinel: sentinel(),
                reply: describe(&Frame::Array(items)),
            }),
        },
        (Question::Master, Frame::Null) => Err(SentinelError::UnknownMaster {
            sentinel: sentinel(),
            master: String::from_utf8_lossy(master).into_owned(),
        }),
        (Question::Master, Frame::Error(reason)) if reason.contains("unknown command") => {
            Err(SentinelError::NotASentinel { sentinel: sentinel() })
        }
        (Question::Sentinels, Frame::Array(items)) => Ok(Answer::Sentinels(sentinels(&items).collect())),
        // A sentinel that will not list the others (an ACL) is still of
        // use; the list is left as it is.
        (Question::Sentinels, Frame::Error(_)) => Ok(Answer::Nothing),
        (Question::Subscribed, Frame::Array(items)) if kind(&items) == Some(&b"subscribe"[..]) => {
            Ok(Answer::Subscribed)
        }
        (Question::Pong, Frame::Array(items)) if kind(&items) == Some(&b"pong"[..]) => Ok(Answer::Pong),
        (Question::Master, Frame::Error(reason)) if reason.starts_with("NOAUTH") || reason.starts_with("WRONGPASS") => {
            Err(SentinelError::Auth {
                sentinel: sentinel(),
                reason: reason.to_string(),
            })
        }
        (_, frame) => Err(SentinelError::Unexpected {
            sentinel: sentinel(),
            reply: describe(&frame),
        }),
    }
}

/// Whether `frame` is a published message (which may come at any time).
pub(super) fn is_message(frame: &Frame) -> bool {
    matches!(frame, Frame::Array(items) if kind(items) == Some(&b"message"[..]))
}

/// A published message (`+switch-master`, `+odown`, `-odown`) about
/// `master`; anything else is no news.
pub(super) fn message(master: &Bytes, frame: &Frame) -> Option<News> {
    let Frame::Array(items) = frame else {
        return None;
    };
    let [Frame::BulkString(kind), Frame::BulkString(channel), Frame::BulkString(text)] = &items[..] else {
        return None;
    };
    if &kind[..] != b"message" {
        return None;
    }
    let mut words = text.split(|byte| *byte == b' ').filter(|word| !word.is_empty());
    match &channel[..] {
        // `<master> <old ip> <old port> <new ip> <new port>`
        b"+switch-master" => {
            let [name, _, _, ip, port] = [
                words.next()?,
                words.next()?,
                words.next()?,
                words.next()?,
                words.next()?,
            ];
            (name == &master[..])
                .then(|| endpoint(ip, port))
                .flatten()
                .map(News::Primary)
        }
        // `master <master> <ip> <port> …`
        b"+odown" | b"-odown" => {
            let [role, name] = [words.next()?, words.next()?];
            (role == b"master" && name == &master[..]).then(|| News::Down(&channel[..] == b"+odown"))
        }
        _ => None,
    }
}

/// The sentinels a `SENTINEL sentinels` reply names (each a field list
/// with `ip` and `port`).
fn sentinels(items: &[Frame]) -> impl Iterator<Item = Endpoint> + '_ {
    items.iter().filter_map(|item| {
        let Frame::Array(fields) = item else { return None };
        let field = |name: &[u8]| {
            fields.chunks(2).find_map(|pair| match pair {
                [Frame::BulkString(key), Frame::BulkString(value)] if &key[..] == name => Some(value.clone()),
                _ => None,
            })
        };
        endpoint(&field(b"ip")?, &field(b"port")?)
    })
}

/// The kind of a pub/sub reply (`subscribe`, `message`).
fn kind(items: &[Frame]) -> Option<&[u8]> {
    match items.first() {
        Some(Frame::BulkString(kind)) => Some(&kind[..]),
        _ => None,
    }
}

/// `[ip, port]`, as `get-master-addr-by-name` answers.
fn address(items: &[Frame]) -> Option<Endpoint> {
    match items {
        [Frame::BulkString(ip), Frame::BulkString(port)] => endpoint(ip, port),
        _ => None,
    }
}

/// An address a sentinel gave: a host (no spaces, not empty) and a port
/// other than 0.
fn endpoint(ip: &[u8], port: &[u8]) -> Option<Endpoint> {
    let host = std::str::from_utf8(ip).ok()?;
    let port: u16 = std::str::from_utf8(port).ok()?.parse().ok()?;
    let plausible = !host.is_empty() && host.len() <= 255 && host.bytes().all(|b| b.is_ascii_graphic());
    (plausible && port != 0).then(|| Endpoint::Tcp {
        host: host.to_string(),
        port,
    })
}

fn describe(frame: &Frame) -> String {
    let mut text = format!("{frame:?}");
    text.truncate(120);
    text
}
