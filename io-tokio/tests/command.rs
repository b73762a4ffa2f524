//! The `inflight` binary's exit codes and streams: help on stdout with
//! success, a misuse on stderr with 2, an unreachable server with 1.

#![cfg(not(madsim))]

use std::process::Command;

fn inflight(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_inflight"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn help_succeeds_on_stdout() {
    for flag in ["--help", "-h"] {
        let (code, stdout, stderr) = inflight(&[flag]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("usage: inflight <command>"), "{stdout}");
        assert!(stderr.is_empty(), "{stderr}");
    }
}

#[test]
fn misuse_exits_2_with_the_reason_and_the_usage() {
    let (code, stdout, stderr) = inflight(&["keys"]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("inflight: a command and a Redis URL are needed"),
        "{stderr}"
    );
    assert!(stderr.contains("usage: inflight"), "{stderr}");
}

#[test]
fn an_unreachable_server_exits_1_naming_it() {
    let (code, _, stderr) = inflight(&["usage", "redis://127.0.0.1:1", "ns", "subject"]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("inflight: cannot connect") && stderr.contains("127.0.0.1:1"),
        "{stderr}"
    );
}
