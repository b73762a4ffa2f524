//! The scripts' calls as bytes on the wire, and their digests.

use super::*;

#[test]
fn sha_is_the_sha1_redis_computes() {
    // The SHA1 of "return 1", as `SCRIPT LOAD "return 1"` answers.
    assert_eq!(Script::new("return 1").sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}

#[test]
fn acquire_and_compensate_calls_encode_literally() {
    let scripts = Scripts::default();
    let mut out = BytesMut::new();
    scripts.encode_call(
        &mut out,
        ScriptKind::Acquire,
        Eval::Sha,
        &[b"L", b"T"],
        &[b"1000", b"5", b"id"],
    );
    let sha = &scripts.acquire.sha;
    let expected = format!(
        "*8\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n$1\r\n2\r\n$1\r\nL\r\n$1\r\nT\r\n$4\r\n1000\r\n$1\r\n5\r\n$2\r\nid\r\n"
    );
    assert_eq!(out, expected.as_bytes());

    out.clear();
    scripts.encode_call(
        &mut out,
        ScriptKind::Compensate,
        Eval::Text,
        &[b"L", b"T"],
        &[b"9", b"id"],
    );
    let text = COMPENSATE;
    let expected = format!(
        "*7\r\n$4\r\nEVAL\r\n${}\r\n{text}\r\n$1\r\n2\r\n$1\r\nL\r\n$1\r\nT\r\n$1\r\n9\r\n$2\r\nid\r\n",
        text.len()
    );
    assert_eq!(out, expected.as_bytes());
}

#[test]
fn renew_call_encodes_literally_with_one_key() {
    let scripts = Scripts::default();
    let mut out = BytesMut::new();
    scripts.encode_call(&mut out, ScriptKind::Renew, Eval::Sha, &[b"L"], &[b"1000", b"id"]);
    let sha = &scripts.renew.sha;
    let expected = format!("*6\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n$1\r\n1\r\n$1\r\nL\r\n$4\r\n1000\r\n$2\r\nid\r\n");
    assert_eq!(out, expected.as_bytes());
}

#[test]
fn acquire_many_encodes_literally() {
    let scripts = Scripts::default();
    let keys = crate::key::SubjectKeys::new("p", &crate::key::Key::new("t", "s").unwrap());
    let mut out = BytesMut::new();
    scripts.encode_acquire_many(&mut out, &keys, &[b"a", b"b"], 1000, 5, 99, b"");
    let sha = &scripts.acquire_many.sha;
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let mut expected = format!("*16\r\n{}{}{}", bulk("EVALSHA"), bulk(sha), bulk("7"));
    for key in [
        "p:{t|s}:leases",
        "p:{t|s}:fence",
        "p:{t|s}:queue",
        "p:{t|s}:waiters",
        "p:{t|s}:held",
        "p:{t|s}:gone:a",
        "p:{t|s}:gone:b",
        "1000",
        "5",
        "99",
        "",
        "a",
        "b",
    ] {
        expected.push_str(&bulk(key));
    }
    assert_eq!(String::from_utf8_lossy(&out), expected);
}

#[test]
fn script_load_carries_the_text() {
    let scripts = Scripts::default();
    let mut out = BytesMut::new();
    scripts.encode_load(&mut out, ScriptKind::Compensate);
    let expected = format!(
        "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n${}\r\n{COMPENSATE}\r\n",
        COMPENSATE.len()
    );
    assert_eq!(out, expected.as_bytes());
}
