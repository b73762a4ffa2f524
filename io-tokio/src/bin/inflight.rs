//! `inflight holders|usage|keys|top <redis-url> ...`: what the keys hold,
//! for operators. See `inflight --help` and `inflight_tokio::cli`.

#[cfg(not(madsim))]
fn main() -> std::process::ExitCode {
    inflight_tokio::cli::main()
}

#[cfg(madsim)]
fn main() {}
