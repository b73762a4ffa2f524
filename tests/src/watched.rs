//! A `redis-server` (or sentinel) process that cannot outlive its test
//! binary: it runs under a small shell that SIGKILLs it when our end of the
//! shell's stdin closes, so a fixture kept in a `static` (never dropped)
//! leaves no server behind when the binary exits.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp_client::RespClient;

pub struct Watched {
    /// The watchdog shell; `None` once the process was killed.
    child: Option<Child>,
    /// The redis-server's own pid.
    pid: u32,
}

impl Watched {
    /// Runs `redis-server args…` and waits until it answers `PING` on
    /// `port`. `None` if it exited first (most likely the port was taken);
    /// a panic with `install_hint` if there is no `redis-server`.
    pub fn spawn(args: &[String], port: u16, install_hint: &str) -> Option<Self> {
        let child = Command::new("sh")
            .args([
                "-c",
                "command -v redis-server >/dev/null || exit 127; \
                 redis-server \"$@\" >/dev/null 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null",
                "sh",
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run sh");
        let mut child = child;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let Ok(pid) = line.trim().parse::<u32>() else {
            let _ = child.wait();
            panic!("{install_hint}");
        };
        let mut process = Self {
            child: Some(child),
            pid,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            if RespClient::connect(addr).and_then(|mut c| c.call(&[b"PING"])).is_ok() {
                return Some(process);
            }
            let alive = Command::new("kill").args(["-0", &pid.to_string()]).status();
            if !alive.is_ok_and(|status| status.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        process.kill();
        None
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, then the watchdog is reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-9", &self.pid.to_string()]).status();
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.kill();
    }
}
