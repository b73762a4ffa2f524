//! A blocking RESP client built from the core's own encoder and decoder, for
//! poking at Redis directly in tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};

pub struct RespClient {
    stream: TcpStream,
    reader: ReplyReader,
}

impl RespClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            reader: ReplyReader::new(ReplyLimits {
                max_frame_bytes: 1 << 20,
                ..ReplyLimits::default()
            }),
        })
    }

    /// Sends raw, already-encoded bytes and reads one reply.
    pub fn call_raw(&mut self, bytes: &[u8]) -> std::io::Result<Frame> {
        self.stream.write_all(bytes)?;
        self.read_reply()
    }

    /// Sends one command without reading anything (a subscribed connection
    /// reads its pushes on its own).
    pub fn send_only(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut out = BytesMut::new();
        encode_command(&mut out, args);
        self.stream.write_all(&out)
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Frame> {
        let mut out = BytesMut::new();
        encode_command(&mut out, args);
        self.call_raw(&out)
    }

    /// The server's clock (`TIME`), in milliseconds.
    pub fn server_ms(&mut self) -> u64 {
        match self.call(&[b"TIME"]).expect("TIME") {
            Frame::Array(parts) => match &parts[..] {
                [Frame::BulkString(s), Frame::BulkString(us)] => {
                    let number = |b: &[u8]| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap();
                    number(s) * 1000 + number(us) / 1000
                }
                other => panic!("TIME: {other:?}"),
            },
            other => panic!("TIME: {other:?}"),
        }
    }

    pub fn read_reply(&mut self) -> std::io::Result<Frame> {
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.next_frame() {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(error) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, error)),
            }
            let n = self.stream.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.reader.push(&buf[..n]);
        }
    }
}

/// Reads `count` pipelined replies from `stream` (for the benches that write
/// a window of commands and read the window back), handing each to `check`.
/// An error reply, or the server closing the connection, panics.
pub fn read_replies(
    stream: &mut impl Read,
    reader: &mut ReplyReader,
    buf: &mut [u8],
    count: u64,
    mut check: impl FnMut(Frame),
) {
    let mut seen = 0;
    while seen < count {
        match reader.next_frame().expect("a valid reply") {
            Some(Frame::Error(e)) => panic!("{e}"),
            Some(frame) => {
                check(frame);
                seen += 1;
            }
            None => {
                let n = stream.read(buf).expect("read");
                assert!(n > 0, "redis closed the connection");
                reader.push(&buf[..n]);
            }
        }
    }
}
