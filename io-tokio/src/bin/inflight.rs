//! `inflight holders|usage <redis-url> <namespace> <subject>`: what a key
//! holds, for operators. See `inflight_tokio::cli`.

#[cfg(not(madsim))]
fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("inflight: cannot start a runtime: {error}");
            return std::process::ExitCode::from(1);
        }
    };
    match runtime.block_on(inflight_tokio::cli::run(std::env::args().skip(1))) {
        Ok(out) => {
            print!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(error @ inflight_tokio::cli::CliError::Usage(_)) => {
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
