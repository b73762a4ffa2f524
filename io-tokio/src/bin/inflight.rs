//! `inflight holders|usage|keys|top <redis-url> ...`: what the keys hold,
//! for operators. See `inflight --help` and `inflight_tokio::cli`.

#[cfg(not(madsim))]
fn main() -> std::process::ExitCode {
    use inflight_tokio::cli::{run, CliError};
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("inflight: cannot start a runtime: {error}");
            return std::process::ExitCode::from(1);
        }
    };
    let mut stdout = std::io::stdout();
    match runtime.block_on(run(std::env::args().skip(1), &mut stdout)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error @ CliError::Usage(_)) => {
            eprintln!("inflight: {error}");
            std::process::ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("inflight: {error}");
            std::process::ExitCode::from(1)
        }
    }
}

#[cfg(madsim)]
fn main() {}
