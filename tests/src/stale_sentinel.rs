//! A sentinel that is wrong on purpose: it names a fixed address as the
//! primary (a replica, say, as a sentinel cut off from the others during a
//! failover would), lists no other sentinel, and confirms subscriptions,
//! then says nothing more. What a real sentinel will not do on demand.

use std::net::SocketAddr;

use bytes::BytesMut;
use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct StaleSentinel {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl StaleSentinel {
    /// Listens on a free loopback port; names `127.0.0.1:primary_port`.
    pub async fn start(primary_port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the stale sentinel");
        let addr = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, primary_port));
            }
        });
        Self { addr, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for StaleSentinel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, primary_port: u16) {
    let mut reader = ReplyReader::new(ReplyLimits::default());
    let mut buffer = vec![0u8; 4096];
    loop {
        let n = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        reader.push(&buffer[..n]);
        let mut out = BytesMut::new();
        while let Ok(Some(Frame::Array(args))) = reader.next_frame() {
            let words: Vec<Vec<u8>> = args
                .iter()
                .map(|arg| match arg {
                    Frame::BulkString(word) => word.to_ascii_lowercase(),
                    _ => Vec::new(),
                })
                .collect();
            match words.iter().map(Vec::as_slice).collect::<Vec<_>>()[..] {
                [b"sentinel", b"get-master-addr-by-name", _] => {
                    let port = primary_port.to_string();
                    out.extend_from_slice(format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len()).as_bytes());
                }
                [b"sentinel", b"sentinels", _] => out.extend_from_slice(b"*0\r\n"),
                [b"subscribe", ..] => {
                    for (n, channel) in args.iter().skip(1).enumerate() {
                        if let Frame::BulkString(channel) = channel {
                            out.extend_from_slice(
                                format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n", channel.len()).as_bytes(),
                            );
                            out.extend_from_slice(channel);
                            out.extend_from_slice(format!("\r\n:{}\r\n", n + 1).as_bytes());
                        }
                    }
                }
                _ => out.extend_from_slice(b"+OK\r\n"),
            }
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
