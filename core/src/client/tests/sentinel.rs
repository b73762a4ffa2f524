use std::time::{Duration, Instant};

use super::start;

use bytes::BytesMut;

use crate::address::{Credentials, Endpoint};
use crate::client::sentinel::{News, Sentinels, Settings, ASK_INTERVAL};
use crate::event::{ConnectionId, SentinelError};
use crate::resp::{encode_command, ReplyLimits};

fn tcp(port: u16) -> Endpoint {
    Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

fn sentinels(ports: &[u16], credentials: Option<Credentials>) -> Sentinels {
    Sentinels::new(Settings {
        sentinels: ports.iter().map(|port| tcp(*port)).collect(),
        master: "mymaster".into(),
        credentials,
        connect_timeout: Duration::from_secs(1),
        answer_timeout: Duration::from_secs(2),
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_secs(1),
        limits: ReplyLimits::default(),
    })
}

/// Opens the watch and its socket: the connection and where it went.
fn open(watch: &mut Sentinels, now: Instant, id: u64) -> (ConnectionId, Endpoint) {
    let (connection, endpoint) = watch.open(now, || ConnectionId(id)).expect("opens");
    watch.connected(now, connection);
    (connection, endpoint)
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

fn array(items: &[&str]) -> String {
    let mut out = format!("*{}\r\n", items.len());
    for item in items {
        out.push_str(&bulk(item));
    }
    out
}

fn subscribed() -> String {
    ["+switch-master", "+odown", "-odown"]
        .iter()
        .enumerate()
        .map(|(n, channel)| format!("*3\r\n{}{}:{}\r\n", bulk("subscribe"), bulk(channel), n + 1))
        .collect()
}

fn message(channel: &str, text: &str) -> String {
    array(&["message", channel, text])
}

/// A `SENTINEL sentinels` reply naming sentinels on `ports`.
fn others(ports: &[u16]) -> String {
    let mut out = format!("*{}\r\n", ports.len());
    for port in ports {
        out.push_str(&array(&[
            "name",
            "x",
            "ip",
            "127.0.0.1",
            "port",
            &port.to_string(),
            "flags",
            "sentinel",
        ]));
    }
    out
}

#[test]
fn the_watch_asks_learns_the_other_sentinels_subscribes_and_follows_a_switch() {
    let now = start();
    let mut watch = sentinels(
        &[26379],
        Some(Credentials {
            username: None,
            password: "pw".into(),
        }),
    );
    let (id, endpoint) = open(&mut watch, now, 1);
    assert_eq!(endpoint, tcp(26379));
    let (_, written) = watch.take_outgoing().expect("questions to write");
    let mut expected = BytesMut::new();
    encode_command(&mut expected, &[b"AUTH", b"pw"]);
    encode_command(&mut expected, &[b"SENTINEL", b"get-master-addr-by-name", b"mymaster"]);
    encode_command(&mut expected, &[b"SENTINEL", b"sentinels", b"mymaster"]);
    encode_command(&mut expected, &[b"SUBSCRIBE", b"+switch-master", b"+odown", b"-odown"]);
    assert_eq!(&written[..], &expected[..]);
    assert!(watch.poll_timeout().is_some(), "an answer is due");
    let answers = format!(
        "+OK\r\n{}{}{}",
        array(&["127.0.0.1", "6379"]),
        others(&[26380, 26381]),
        subscribed()
    );
    // Byte by byte: a reply split anywhere is read the same.
    let mut news = Vec::new();
    for byte in answers.as_bytes() {
        news.extend(watch.input(now, id, std::slice::from_ref(byte)));
    }
    assert_eq!(news, vec![News::Primary(tcp(6379))]);
    assert_eq!(watch.known(), &[tcp(26379), tcp(26380), tcp(26381)]);
    // Listening: only its liveness `PING` is due.
    let ping = watch.poll_timeout().expect("a liveness ping");
    assert_eq!(ping, now + Duration::from_secs(2));
    let switch = message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380");
    let other_master = message("+switch-master", "othermaster 127.0.0.1 6379 127.0.0.1 7000");
    let down = message("+odown", "master mymaster 127.0.0.1 6379 #quorum 2/2");
    let input = format!("{other_master}{switch}{down}");
    assert_eq!(
        watch.input(now, id, input.as_bytes()),
        vec![News::Primary(tcp(6380)), News::Down(true)]
    );
}

#[test]
fn what_a_sentinel_must_not_say_never_names_a_primary() {
    let now = start();
    let lies = [
        message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 0"),
        message("+switch-master", "mymaster 127.0.0.1 6379"),
        message("+switch-master", "mymaster 1 2 3 99999"),
        message("+switch-master", "mymaster1 127.0.0.1 6379 127.0.0.1 6380"),
        message("+sdown", "mymaster 127.0.0.1 6379 127.0.0.1 6380"),
        array(&["pmessage", "+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380"]),
        ":1\r\n".to_string(),
    ];
    for lie in lies {
        let mut watch = sentinels(&[26379], None);
        let (id, _) = open(&mut watch, now, 1);
        let answers = format!("{}*0\r\n{}", array(&["127.0.0.1", "6379"]), subscribed());
        assert_eq!(watch.input(now, id, answers.as_bytes()), vec![News::Primary(tcp(6379))]);
        assert_eq!(watch.input(now, id, lie.as_bytes()), vec![], "{lie:?}");
    }
}

#[test]
fn a_sentinel_that_cannot_answer_is_given_up_and_the_next_is_asked() {
    let now = start();
    let mut watch = sentinels(&[1, 2, 3], None);
    // A data node given as a sentinel.
    let (id, _) = open(&mut watch, now, 1);
    let news = watch.input(
        now,
        id,
        b"-ERR unknown command 'SENTINEL', with args beginning with: \r\n",
    );
    assert!(
        matches!(&news[..], [News::Failed(_, SentinelError::NotASentinel { .. })]),
        "{news:?}"
    );
    // A sentinel that does not know the master name.
    let (id, endpoint) = open(&mut watch, now, 2);
    assert_eq!(endpoint, tcp(2), "the next sentinel");
    let news = watch.input(now, id, b"*-1\r\n");
    assert!(
        matches!(&news[..], [News::Failed(_, SentinelError::UnknownMaster { .. })]),
        "{news:?}"
    );
    // One that does not answer in time: the round is over, and the most
    // telling error of it is reported.
    let (id, endpoint) = open(&mut watch, now, 3);
    assert_eq!(endpoint, tcp(3));
    let due = watch.poll_timeout().expect("an answer is due");
    let (closed, news) = watch.handle_timeout(due);
    assert_eq!(closed, Some(id));
    assert!(
        matches!(
            &news[..],
            [
                News::Failed(_, SentinelError::Timeout { .. }),
                News::AllFailed(_, SentinelError::NotASentinel { .. })
            ]
        ),
        "{news:?}"
    );
    // The round backs off before the first sentinel is asked again.
    assert!(watch.open(due, || ConnectionId(4)).is_none());
    let retry = watch.poll_timeout().expect("a retry time");
    assert_eq!(watch.open(retry, || ConnectionId(4)).map(|(_, at)| at), Some(tcp(1)));
}

#[test]
fn asking_again_moves_to_the_next_sentinel_at_most_every_interval() {
    let now = start();
    let mut watch = sentinels(&[1, 2], None);
    let (id, _) = open(&mut watch, now, 1);
    // Still asking: the answer on its way is awaited.
    assert_eq!(watch.ask_again(now), None);
    let answers = format!("{}*0\r\n{}", array(&["127.0.0.1", "6379"]), subscribed());
    watch.input(now, id, answers.as_bytes());
    assert_eq!(watch.ask_again(now), Some(id), "closed, to be opened afresh");
    let (id, endpoint) = open(&mut watch, now, 2);
    assert_eq!(endpoint, tcp(2), "never the same sentinel twice in a row");
    watch.input(now, id, answers.as_bytes());
    assert_eq!(watch.ask_again(now), None, "too soon: owed");
    let owed = watch.poll_timeout().expect("the owed ask");
    assert_eq!(owed, now + ASK_INTERVAL);
    assert_eq!(watch.handle_timeout(owed), (Some(id), vec![]));
    assert_eq!(watch.open(owed, || ConnectionId(3)).map(|(_, at)| at), Some(tcp(1)));
}

#[test]
fn every_sentinel_naming_a_replica_in_a_row_is_reported_once_per_round() {
    let mut watch = sentinels(&[1, 2], None);
    assert!(!watch.named_replica());
    watch.primary_confirmed();
    assert!(!watch.named_replica());
    assert!(watch.named_replica(), "both named a replica in a row");
    assert!(!watch.named_replica(), "a new round");
}

#[test]
fn a_subscribed_watch_is_pinged_and_given_up_when_silent() {
    let now = start();
    let mut watch = sentinels(&[1, 2], None);
    let (id, _) = open(&mut watch, now, 1);
    let answers = format!("{}*0\r\n{}", array(&["127.0.0.1", "6379"]), subscribed());
    watch.input(now, id, answers.as_bytes());
    watch.take_outgoing();
    let ping = watch.poll_timeout().expect("a liveness ping");
    assert_eq!(watch.handle_timeout(ping), (None, vec![]));
    let (_, written) = watch.take_outgoing().expect("the PING");
    assert_eq!(&written[..], b"*1\r\n$4\r\nPING\r\n");
    // A message may come before the answer; then the answer.
    let switch = message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380");
    let pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
    assert_eq!(
        watch.input(ping, id, format!("{switch}{pong}").as_bytes()),
        vec![News::Primary(tcp(6380))]
    );
    // The next ping is not answered: the sentinel is given up.
    let next = watch.poll_timeout().expect("the next ping");
    watch.handle_timeout(next);
    let silent = watch.poll_timeout().expect("its answer is due");
    let (closed, news) = watch.handle_timeout(silent);
    assert_eq!(closed, Some(id));
    assert!(
        matches!(&news[..], [News::Failed(_, SentinelError::Timeout { .. })]),
        "{news:?}"
    );
    // And the next sentinel is asked at once.
    assert_eq!(
        watch.poll_timeout(),
        Some(silent),
        "reopened at the client's next timeout"
    );
    assert_eq!(watch.open(silent, || ConnectionId(2)).map(|(_, at)| at), Some(tcp(2)));
}

#[test]
fn a_learned_sentinel_that_cannot_be_reached_is_forgotten_a_given_one_is_not() {
    let now = start();
    let mut watch = sentinels(&[1], None);
    let (id, _) = open(&mut watch, now, 1);
    let answers = format!("{}{}{}", array(&["127.0.0.1", "6379"]), others(&[2, 3]), subscribed());
    assert_eq!(watch.input(now, id, answers.as_bytes()), vec![News::Primary(tcp(6379))]);
    assert_eq!(watch.known(), &[tcp(1), tcp(2), tcp(3)]);
    // The given sentinel's watch is lost; the next, learned, is unreachable.
    let unreachable = |port: u16| SentinelError::Unreachable {
        sentinel: tcp(port).to_string(),
        reason: "connection refused".into(),
    };
    watch.closed(now, id, unreachable(1));
    let (id, endpoint) = open(&mut watch, now, 2);
    assert_eq!(endpoint, tcp(2));
    let news = watch.closed(now, id, unreachable(2));
    assert!(matches!(&news[..], [News::Failed(..)]), "{news:?}");
    assert_eq!(watch.known(), &[tcp(1), tcp(3)], "the learned one is forgotten");
    // The round goes on with the one after it: forgotten too, and with that
    // every sentinel of the round has failed.
    let (id, endpoint) = open(&mut watch, now, 3);
    assert_eq!(endpoint, tcp(3));
    let news = watch.closed(now, id, unreachable(3));
    assert!(matches!(&news[..], [News::Failed(..), News::AllFailed(..)]), "{news:?}");
    assert_eq!(watch.known(), &[tcp(1)]);
    // After the backoff, the given one is asked again, and stays however
    // often it fails.
    let retry = watch.poll_timeout().expect("a retry time");
    let (id, endpoint) = open(&mut watch, retry, 4);
    assert_eq!(endpoint, tcp(1));
    let news = watch.closed(retry, id, unreachable(1));
    assert!(matches!(&news[..], [News::Failed(..), News::AllFailed(..)]), "{news:?}");
    assert_eq!(watch.known(), &[tcp(1)]);
}
