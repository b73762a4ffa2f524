//! The fuzz targets' bodies, each run on a few inputs chosen by hand: the
//! small and empty ones, and lies a hostile server might tell.

use std::time::Instant;

use inflight_testkit::fuzzing::{
    client_ops, cluster_replies, config_url, handshake, handshake_replies, key_encoding, reply_decode,
};

#[allow(clippy::disallowed_methods)] // an arbitrary starting instant
fn start() -> Instant {
    Instant::now()
}

#[test]
fn targets_accept_empty_and_small_inputs() {
    for data in [&b""[..], b"\x00", b"\xff\xff\xff", b"*2\r\n:1\r\n$3\r\nabc\r\n"] {
        client_ops(data, start());
        reply_decode(data, start());
        key_encoding(data);
        config_url(data, start());
        cluster_replies(data, start());
        handshake(data, start());
    }
}

#[test]
fn a_hostile_handshake_never_admits_through_a_replica_or_before_recovery() {
    // A replica, then a server whose marker is new (lost data).
    let replica = "\x05+PONG\r\n*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:0\r\n";
    handshake(replica.as_bytes(), start());
    let mut emptied = vec![7u8];
    let honest = handshake_replies(None);
    let text = String::from_utf8(honest)
        .unwrap()
        .replace("*2\r\n:0\r\n$6\r\nmarker\r\n", "*2\r\n:1\r\n$3\r\nnew\r\n");
    emptied.extend_from_slice(text.as_bytes());
    handshake(&emptied, start());
}

#[test]
fn cluster_replies_follow_redirects_and_survive_lies() {
    for lie in [
        &b"\x00\x00-MOVED 1 127.0.0.1:7002\r\n"[..],
        b"\x00\x01-ASK 9000 127.0.0.1:7000\r\n-TRYAGAIN x\r\n",
        b"\x02\x55-MOVED 99999 nowhere\r\n-ASK\r\n-READONLY no\r\n-CLUSTERDOWN down\r\n",
    ] {
        cluster_replies(lie, start());
    }
}

#[test]
fn reply_decode_survives_a_bulk_length_of_2_pow_62() {
    reply_decode(b"\x03$4611686018427387904\r\n", start());
}
