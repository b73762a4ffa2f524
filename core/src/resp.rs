//! RESP2 framing: commands out, replies in.
//!
//! Encoding and decoding are done by `redis-protocol`. Before a reply is
//! handed to it, [`scan`] walks the frame headers and enforces our limits, so a
//! hostile or broken peer cannot make us allocate for a 2^62-byte bulk string,
//! recurse through a deeply nested array, or buffer an endless line: each of
//! those is a [`ProtocolError`], which retires the connection.

use bytes::BytesMut;
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::encode::extend_encode_borrowed;
use redis_protocol::resp2::types::BorrowedFrame;

pub use redis_protocol::resp2::types::BytesFrame as Frame;

/// Bounds on what a peer may send us. The request path's replies are tiny
/// (an array of two, three per batched acquire); the operators' reads
/// (holders, key scans) are what sets the defaults, and they ask for no
/// more than the limits allow. Memory stays bounded either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Longest bulk string, and longest unfinished frame kept in the buffer.
    pub max_frame_bytes: usize,
    /// Longest line (simple string, error, integer, length header). Lines are
    /// searched for their end on every read, so a short cap keeps a peer that
    /// trickles an endless line one byte at a time from costing quadratic time.
    pub max_line_bytes: usize,
    /// Most elements in one array.
    pub max_array_len: usize,
    /// Deepest nesting of arrays.
    pub max_depth: usize,
}

impl ReplyLimits {
    /// What a cluster's slot table reply needs at least: `CLUSTER SHARDS` of
    /// a large, fragmented cluster runs to thousands of items.
    pub const TOPOLOGY: ReplyLimits = ReplyLimits {
        max_frame_bytes: 4 * 1024 * 1024,
        max_line_bytes: 4 * 1024,
        max_array_len: 32 * 1024,
        max_depth: 4,
    };

    /// The larger of each bound.
    pub fn at_least(self, other: ReplyLimits) -> ReplyLimits {
        ReplyLimits {
            max_frame_bytes: self.max_frame_bytes.max(other.max_frame_bytes),
            max_line_bytes: self.max_line_bytes.max(other.max_line_bytes),
            max_array_len: self.max_array_len.max(other.max_array_len),
            max_depth: self.max_depth.max(other.max_depth),
        }
    }
}

impl Default for ReplyLimits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 512 * 1024,
            max_line_bytes: 4 * 1024,
            max_array_len: 4 * 1024,
            max_depth: 4,
        }
    }
}

/// The peer sent bytes we will not (or cannot) decode. Trust in the stream is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Bytes that are not RESP.
    #[error("malformed RESP reply: {0}")]
    Malformed(&'static str),
    /// A frame larger than the reply limits allow.
    #[error("RESP frame declares {len} bytes or elements, over the limit of {limit}")]
    TooLarge {
        /// What the frame declares.
        len: u64,
        /// What the limits allow.
        limit: usize,
    },
    /// Arrays nested deeper than the reply limits allow.
    #[error("RESP arrays nested deeper than {0}")]
    TooDeep(usize),
    /// A reply with no request waiting for it: the stream is not ours.
    #[error("a reply arrived with no request pending on the connection")]
    Unsolicited,
}

/// Appends one command (a RESP array of bulk strings) to `out`.
pub fn encode_command(out: &mut BytesMut, args: &[&[u8]]) {
    // Most commands have at most 10 arguments: a fixed array keeps those
    // allocation-free. Batched acquires have more.
    let mut fixed = [const { BorrowedFrame::Null }; 10];
    let mut long = Vec::new();
    let frames: &mut [BorrowedFrame] = if args.len() <= fixed.len() {
        &mut fixed[..args.len()]
    } else {
        long.resize(args.len(), BorrowedFrame::Null);
        &mut long
    };
    for (frame, arg) in frames.iter_mut().zip(args) {
        *frame = BorrowedFrame::BulkString(arg);
    }
    extend_encode_borrowed(out, &BorrowedFrame::Array(frames), false)
        .expect("encoding into a growable buffer cannot fail");
}

/// Incremental reply decoder: bytes go in as they arrive, whole frames come out.
#[derive(Debug)]
pub struct ReplyReader {
    buf: BytesMut,
    limits: ReplyLimits,
}

impl ReplyReader {
    /// A reader that refuses frames beyond `limits`.
    pub fn new(limits: ReplyLimits) -> Self {
        Self {
            buf: BytesMut::new(),
            limits,
        }
    }

    /// Bytes as they arrive.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtocolError> {
        match scan(&self.buf, &self.limits, 0)? {
            None if self.buf.len() > self.limits.max_frame_bytes => Err(ProtocolError::TooLarge {
                len: self.buf.len() as u64,
                limit: self.limits.max_frame_bytes,
            }),
            None => Ok(None),
            Some(_) => match decode_bytes_mut(&mut self.buf) {
                Ok(Some((frame, _, _))) => Ok(Some(frame)),
                // The scan accepted what the decoder refuses: treat it as garbage.
                Ok(None) | Err(_) => Err(ProtocolError::Malformed("rejected by the RESP decoder")),
            },
        }
    }

    /// Bytes received but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// Walks one frame's headers. `Ok(Some(n))`: a whole frame of `n` bytes is at
/// the front of `buf`; `Ok(None)`: it is incomplete so far.
pub fn scan(buf: &[u8], limits: &ReplyLimits, depth: usize) -> Result<Option<usize>, ProtocolError> {
    let Some((&kind, rest)) = buf.split_first() else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(rest, limits.max_line_bytes)? else {
        return Ok(None);
    };
    let line = &rest[..line_end];
    let header = 1 + line_end + 2;
    match kind {
        b'+' | b'-' => Ok(Some(header)),
        b':' => {
            parse_int(line)?;
            Ok(Some(header))
        }
        b'$' => {
            let len = parse_int(line)?;
            if len == -1 {
                return Ok(Some(header));
            }
            let len = checked_len(len, limits.max_frame_bytes)?;
            let total = header + len + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[header + len..total] != b"\r\n" {
                return Err(ProtocolError::Malformed("bulk string not terminated by CRLF"));
            }
            Ok(Some(total))
        }
        b'*' => {
            let len = parse_int(line)?;
            if len == -1 {
                return Ok(Some(header));
            }
            let len = checked_len(len, limits.max_array_len)?;
            if depth + 1 > limits.max_depth {
                return Err(ProtocolError::TooDeep(limits.max_depth));
            }
            let mut offset = header;
            for _ in 0..len {
                match scan(&buf[offset..], limits, depth + 1)? {
                    Some(n) => offset += n,
                    None => return Ok(None),
                }
            }
            Ok(Some(offset))
        }
        _ => Err(ProtocolError::Malformed("unknown RESP2 frame type")),
    }
}

fn find_crlf(buf: &[u8], max: usize) -> Result<Option<usize>, ProtocolError> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(i)),
        None if buf.len() > max => Err(ProtocolError::TooLarge {
            len: buf.len() as u64,
            limit: max,
        }),
        None => Ok(None),
    }
}

fn parse_int(line: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(ProtocolError::Malformed("invalid integer in RESP header"))
}

fn checked_len(len: i64, limit: usize) -> Result<usize, ProtocolError> {
    let len = u64::try_from(len).map_err(|_| ProtocolError::Malformed("negative RESP length"))?;
    if len > limit as u64 {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    Ok(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn decode_all(input: &[u8]) -> Result<Vec<Frame>, ProtocolError> {
        let mut reader = ReplyReader::new(ReplyLimits::default());
        reader.push(input);
        let mut frames = Vec::new();
        while let Some(frame) = reader.next_frame()? {
            frames.push(frame);
        }
        Ok(frames)
    }

    const REPLIES: &[u8] = b"+PONG\r\n*2\r\n:1\r\n$4\r\nab\r\n\r\n-ERR boom\r\n:-7\r\n$-1\r\n*-1\r\n*0\r\n$0\r\n\r\n";

    #[test]
    fn command_encoding_is_a_resp_array_of_bulk_strings() {
        let mut out = BytesMut::new();
        encode_command(&mut out, &[b"PING"]);
        assert_eq!(&out[..], b"*1\r\n$4\r\nPING\r\n");
        out.clear();
        encode_command(&mut out, &[b"ZREM", b"k", b""]);
        assert_eq!(&out[..], b"*3\r\n$4\r\nZREM\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn decodes_every_reply_kind() {
        let frames = decode_all(REPLIES).unwrap();
        assert_eq!(
            frames,
            vec![
                Frame::SimpleString(Bytes::from_static(b"PONG")),
                Frame::Array(vec![
                    Frame::Integer(1),
                    Frame::BulkString(Bytes::from_static(b"ab\r\n"))
                ]),
                Frame::Error("ERR boom".into()),
                Frame::Integer(-7),
                Frame::Null,
                Frame::Null,
                Frame::Array(vec![]),
                Frame::BulkString(Bytes::new()),
            ]
        );
    }

    #[test]
    fn any_split_point_decodes_the_same_as_whole_input() {
        let whole = decode_all(REPLIES).unwrap();
        for split in 0..=REPLIES.len() {
            let mut reader = ReplyReader::new(ReplyLimits::default());
            let mut frames = Vec::new();
            for part in [&REPLIES[..split], &REPLIES[split..]] {
                reader.push(part);
                while let Some(frame) = reader.next_frame().unwrap() {
                    frames.push(frame);
                }
            }
            assert_eq!(frames, whole, "split at {split}");
            assert_eq!(reader.buffered(), 0);
        }
    }

    #[test]
    fn huge_declared_lengths_are_refused_before_any_allocation() {
        let huge = format!("${}\r\n", 1u64 << 62);
        assert!(matches!(
            decode_all(huge.as_bytes()),
            Err(ProtocolError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_all(b"*1000000\r\n"),
            Err(ProtocolError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_all(b"$9223372036854775807\r\n"),
            Err(ProtocolError::TooLarge { .. })
        ));
    }

    #[test]
    fn deep_nesting_and_endless_lines_are_refused() {
        assert_eq!(decode_all(&b"*1\r\n".repeat(10)), Err(ProtocolError::TooDeep(4)));
        let endless = vec![b'a'; 5 * 1024];
        let mut line = b"+".to_vec();
        line.extend_from_slice(&endless);
        assert!(matches!(decode_all(&line), Err(ProtocolError::TooLarge { .. })));
    }

    #[test]
    fn a_line_trickled_byte_by_byte_is_cut_off_at_the_line_limit() {
        let limits = ReplyLimits::default();
        let mut reader = ReplyReader::new(limits);
        reader.push(b"+");
        let mut fed = 1;
        let error = loop {
            reader.push(b"a");
            fed += 1;
            match reader.next_frame() {
                Ok(None) => assert!(fed <= limits.max_line_bytes + 2, "still buffering after {fed} bytes"),
                Ok(Some(frame)) => panic!("{frame:?}"),
                Err(error) => break error,
            }
        };
        assert!(matches!(error, ProtocolError::TooLarge { .. }));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for input in [
            &b"?x\r\n"[..],
            b":abc\r\n",
            b"$3\r\nabcXY",
            b"$-5\r\n",
            b"*-2\r\n",
            b">1\r\n:1\r\n",
            b"%1\r\n",
        ] {
            assert!(decode_all(input).is_err(), "{input:?}");
        }
    }
}
