//! The `inflight` operator command, built in this package so that its tests
//! can run it in a terminal (`CARGO_BIN_EXE_inflight_cli`): the same
//! function as `inflight-tokio`'s `inflight` binary.

fn main() -> std::process::ExitCode {
    inflight_tokio::cli::main()
}
