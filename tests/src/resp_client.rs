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

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Frame> {
        let mut out = BytesMut::new();
        encode_command(&mut out, args);
        self.call_raw(&out)
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
