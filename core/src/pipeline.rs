//! One connection's request FIFO.
//!
//! Redis answers the commands of a connection in the order it received them,
//! so the n-th reply belongs to the n-th request still pending. The pipeline
//! pairs them and nothing else: a request whose caller went away keeps its
//! place, which is why a dropped caller can never shift the next caller's reply
//! onto the wrong request. What a reply *means* is the client's business.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::resp::{Frame, ProtocolError, ReplyLimits, ReplyReader};

/// One connection's request FIFO and reply reader: each reply meets the
/// oldest pending request, so replies cannot be misattributed.
#[derive(Debug)]
pub struct Pipeline<T> {
    pending: VecDeque<(T, Instant)>,
    reader: ReplyReader,
    outgoing: BytesMut,
}

impl<T> Pipeline<T> {
    /// An empty pipeline whose replies must fit `limits`.
    pub fn new(limits: ReplyLimits) -> Self {
        Self {
            pending: VecDeque::new(),
            reader: ReplyReader::new(limits),
            outgoing: BytesMut::new(),
        }
    }

    /// Queues a request: `encode` writes its bytes; its reply is due by `deadline`.
    pub fn send(&mut self, entry: T, deadline: Instant, encode: impl FnOnce(&T, &mut BytesMut)) {
        encode(&entry, &mut self.outgoing);
        self.pending.push_back((entry, deadline));
    }

    /// Everything written since the last call, for the driver to put on the wire.
    pub fn take_outgoing(&mut self) -> Option<Bytes> {
        (!self.outgoing.is_empty()).then(|| self.outgoing.split().freeze())
    }

    /// Bytes read from the connection.
    pub fn receive(&mut self, data: &[u8]) {
        self.reader.push(data);
    }

    /// The next reply with the request it answers. A reply with nothing pending
    /// is a protocol error: the stream is not the one we think it is.
    pub fn next_reply(&mut self) -> Result<Option<(T, Frame)>, ProtocolError> {
        let Some(frame) = self.reader.next_frame()? else {
            return Ok(None);
        };
        let (entry, _) = self.pending.pop_front().ok_or(ProtocolError::Unsolicited)?;
        Ok(Some((entry, frame)))
    }

    /// When the oldest pending request must have been answered. Every request
    /// gets the same budget, so the oldest one is always due first.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.front().map(|(_, deadline)| *deadline)
    }

    /// The requests still waiting for their reply, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &T> {
        self.pending.iter().map(|(entry, _)| entry)
    }

    /// All pending requests, oldest first, leaving the pipeline empty.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.pending.drain(..).map(|(entry, _)| entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::encode_command;
    use std::time::Duration;

    #[test]
    #[allow(clippy::disallowed_methods)] // an arbitrary starting instant
    fn replies_meet_requests_in_order_whatever_the_chunking() {
        let now = Instant::now();
        let mut pipeline = Pipeline::new(ReplyLimits::default());
        pipeline.send("a", now, |_, out| encode_command(out, &[b"PING"]));
        pipeline.send("b", now + Duration::from_secs(1), |_, out| {
            encode_command(out, &[b"PING"])
        });
        assert_eq!(
            pipeline.take_outgoing().unwrap(),
            &b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"[..]
        );
        assert_eq!(pipeline.take_outgoing(), None);
        assert_eq!(pipeline.next_deadline(), Some(now));

        for byte in b":1\r\n:2" {
            pipeline.receive(&[*byte]);
        }
        assert_eq!(pipeline.next_reply().unwrap(), Some(("a", Frame::Integer(1))));
        assert_eq!(pipeline.next_reply().unwrap(), None);
        pipeline.receive(b"\r\n");
        assert_eq!(pipeline.next_reply().unwrap(), Some(("b", Frame::Integer(2))));
        assert_eq!(pipeline.next_deadline(), None);
    }

    #[test]
    fn a_reply_with_nothing_pending_is_an_error() {
        let mut pipeline: Pipeline<()> = Pipeline::new(ReplyLimits::default());
        pipeline.receive(b"+OK\r\n");
        assert_eq!(pipeline.next_reply(), Err(ProtocolError::Unsolicited));
    }
}
