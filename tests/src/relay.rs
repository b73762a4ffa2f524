//! A TCP relay between the limiter and a real redis-server that misbehaves on
//! command: it is how the integration tests break the network on purpose.
//!
//! Replies travel frame by frame (decoded with the core's reader and encoded
//! again), so a mode can drop, hold or alter exactly one reply.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bytes flow both ways.
    Forward,
    /// Requests vanish and nothing comes back; connections stay open.
    Blackhole,
    /// Requests reach Redis; its replies are held until the mode changes.
    StallResponses,
    /// Every connection is closed and new ones are refused.
    Cut,
    /// The next reply is dropped, then back to `Forward`.
    DropOneReply,
    /// The next `{status, lease id}` reply echoes a different id, then `Forward`.
    CorruptOneEcho,
    /// Requests are held (a stalled proxy), even past the client's hanging
    /// up, and delivered to Redis when the mode changes.
    HoldRequests,
}

pub struct Relay {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let mode = Arc::new(watch::Sender::new(Mode::Forward));
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let mode = mode.clone();
            let accepted = accepted.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *mode.borrow() == Mode::Cut {
                        drop(client);
                        continue;
                    }
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let mode = mode.clone();
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(target).await {
                            relay(client, server, mode).await;
                        }
                    });
                }
            }
        });
        Self {
            addr,
            mode,
            accepted,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Connections accepted so far (the limiter opens a new one per generation).
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, mode: Arc<watch::Sender<Mode>>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut requests_mode = mode.subscribe();
    let upstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        let mut held: Vec<u8> = Vec::new();
        let mut client_gone = false;
        loop {
            tokio::select! {
                read = client_read.read(&mut buf), if !client_gone => {
                    let n = read?;
                    let current = *requests_mode.borrow_and_update();
                    if n == 0 {
                        if current != Mode::HoldRequests || held.is_empty() {
                            return Ok::<_, std::io::Error>(());
                        }
                        // Hung up with bytes held: they still go, later.
                        client_gone = true;
                        continue;
                    }
                    match current {
                        Mode::Blackhole => continue,
                        Mode::Cut => return Ok(()),
                        Mode::HoldRequests => held.extend_from_slice(&buf[..n]),
                        _ => {
                            server_write.write_all(&held).await?;
                            held.clear();
                            server_write.write_all(&buf[..n]).await?;
                        }
                    }
                }
                changed = requests_mode.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let current = *requests_mode.borrow_and_update();
                    match current {
                        Mode::Cut => return Ok(()),
                        Mode::Blackhole => held.clear(),
                        Mode::HoldRequests => {}
                        _ => {
                            server_write.write_all(&held).await?;
                            held.clear();
                        }
                    }
                    if client_gone {
                        return Ok(());
                    }
                }
            }
        }
    };
    let mut replies_mode = mode.subscribe();
    let downstream = async {
        let mut reader = ReplyReader::new(ReplyLimits {
            max_frame_bytes: 1 << 20,
            ..ReplyLimits::default()
        });
        let mut held: VecDeque<Bytes> = VecDeque::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                read = server_read.read(&mut buf) => {
                    let n = read?;
                    if n == 0 {
                        return Ok::<_, std::io::Error>(());
                    }
                    reader.push(&buf[..n]);
                    while let Some(frame) = reader.next_frame().map_err(std::io::Error::other)? {
                        let current = *replies_mode.borrow_and_update();
                        match current {
                            Mode::Forward => held.push_back(encode(&frame)),
                            Mode::Blackhole => {}
                            Mode::Cut => return Ok(()),
                            Mode::StallResponses | Mode::HoldRequests => held.push_back(encode(&frame)),
                            Mode::DropOneReply => {
                                mode.send_replace(Mode::Forward);
                            }
                            Mode::CorruptOneEcho => {
                                let frame = match frame {
                                    Frame::Array(mut items) if (3..=4).contains(&items.len()) => {
                                        if let Frame::BulkString(echo) = &items[1] {
                                            let mut altered = echo.to_vec();
                                            if let Some(first) = altered.first_mut() {
                                                *first = if *first == b'f' { b'e' } else { b'f' };
                                            }
                                            items[1] = Frame::BulkString(Bytes::from(altered));
                                            mode.send_replace(Mode::Forward);
                                        }
                                        Frame::Array(items)
                                    }
                                    other => other,
                                };
                                held.push_back(encode(&frame));
                            }
                        }
                    }
                }
                changed = replies_mode.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let current = *replies_mode.borrow_and_update();
                    match current {
                        Mode::Cut => return Ok(()),
                        Mode::Blackhole => held.clear(),
                        _ => {}
                    }
                }
            }
            let stalled = *replies_mode.borrow() == Mode::StallResponses;
            if !stalled {
                while let Some(bytes) = held.pop_front() {
                    client_write.write_all(&bytes).await?;
                }
            }
        }
    };
    let mut cut = mode.subscribe();
    let cut = async move {
        loop {
            if *cut.borrow_and_update() == Mode::Cut {
                return;
            }
            if cut.changed().await.is_err() {
                return;
            }
        }
    };
    // The relay lives as long as requests flow: replies that cannot reach a
    // client who hung up do not cut short requests it still holds.
    let downstream = async {
        let _ = downstream.await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut => {}
    }
}

fn encode(frame: &Frame) -> Bytes {
    let mut out = BytesMut::new();
    redis_protocol::resp2::encode::extend_encode(&mut out, frame, false).expect("re-encode a decoded frame");
    out.freeze()
}
