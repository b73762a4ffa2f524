//! Replays every committed fuzz corpus file and saved crash through the same
//! target bodies `cargo fuzz` runs, on stable, without the fuzzer.

use std::path::{Path, PathBuf};
use std::time::Instant;

use inflight_testkit::fuzzing;

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for folder in [fuzz.join("corpus").join(target), fuzz.join("artifacts").join(target)] {
        if let Ok(entries) = std::fs::read_dir(&folder) {
            files.extend(entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no corpus committed for {target} under {}",
        fuzz.display()
    );
    files
}

fn replay(target: &str, body: impl Fn(&[u8])) {
    for path in inputs(target) {
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&data)));
        assert!(outcome.is_ok(), "{target} fails on {}", path.display());
    }
}

#[test]
fn reply_decode_corpus() {
    let start = Instant::now();
    replay("reply_decode", |data| fuzzing::reply_decode(data, start));
}

#[test]
fn client_ops_corpus() {
    let start = Instant::now();
    replay("client_ops", |data| fuzzing::client_ops(data, start));
}

#[test]
fn key_encoding_corpus() {
    replay("key_encoding", fuzzing::key_encoding);
}

#[test]
fn config_url_corpus() {
    let start = Instant::now();
    replay("config_url", |data| fuzzing::config_url(data, start));
}

#[test]
fn cluster_replies_corpus() {
    let start = Instant::now();
    replay("cluster_replies", |data| fuzzing::cluster_replies(data, start));
}

#[test]
fn handshake_corpus() {
    let start = Instant::now();
    replay("handshake", |data| fuzzing::handshake(data, start));
}

#[test]
fn sentinel_replies_corpus() {
    let start = Instant::now();
    replay("sentinel_replies", |data| fuzzing::sentinel_replies(data, start));
}
