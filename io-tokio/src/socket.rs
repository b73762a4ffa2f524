//! One connection's I/O: the task that connects, and the reads and writes
//! the driver does itself.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use inflight_core::{ConnectionId, Endpoint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::connector::Connector;

/// What connection tasks report. A connected task hands the driver its
/// stream: the driver reads replies and writes requests itself, with no
/// task hop either way.
pub(crate) enum IoEvent<S> {
    Connected(ConnectionId, S),
    Closed(ConnectionId, Option<String>),
}

/// One connection attempt: connect (the core's connect deadline bounds it:
/// it closes, that is aborts, the task when due), then hand the stream to
/// the driver.
pub(crate) async fn run_connection<C: Connector>(
    connector: Arc<C>,
    endpoint: Endpoint,
    id: ConnectionId,
    sentinel: bool,
    events: mpsc::UnboundedSender<IoEvent<C::Io>>,
) {
    let stream = match sentinel {
        true => connector.connect_sentinel(&endpoint).await,
        false => connector.connect(&endpoint).await,
    };
    let event = match stream {
        Ok(io) => IoEvent::Connected(id, io),
        Err(error) => IoEvent::Closed(id, Some(error.to_string())),
    };
    let _ = events.send(event);
}

/// An open connection as the driver holds it: the stream, and the bytes not
/// written yet. The driver never waits on a write: what the kernel does
/// not take now stays here and goes when the socket is writable again, so
/// a peer that stops reading cannot stop the driver from reading others.
pub(crate) struct Socket<S> {
    id: ConnectionId,
    stream: S,
    outbox: VecDeque<Bytes>,
    /// Written since the last flush (TLS holds bytes until flushed).
    unflushed: bool,
}

/// What the driver's sockets did.
pub(crate) enum SocketEvent {
    Read(ConnectionId, io::Result<usize>),
    WriteFailed(ConnectionId, io::Error),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    pub(crate) fn new(id: ConnectionId, stream: S) -> Self {
        Self {
            id,
            stream,
            outbox: VecDeque::new(),
            unflushed: false,
        }
    }

    pub(crate) fn id(&self) -> ConnectionId {
        self.id
    }

    /// Drops the first `written` bytes of the outbox.
    fn consume(&mut self, mut written: usize) {
        while let Some(front) = self.outbox.front_mut() {
            if written < front.len() {
                front.advance(written);
                return;
            }
            written -= front.len();
            self.outbox.pop_front();
        }
    }

    /// Queues `data`, written at the driver's next poll of its sockets.
    pub(crate) fn send(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.outbox.push_back(data);
        }
    }

    /// Writes and flushes what it can: `Ready(Ok)` once everything is out.
    /// Everything queued goes in one vectored write where the stream takes
    /// one (TCP does), so a batch costs one system call.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outbox.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let count = self.outbox.len().min(MAX_SLICES);
            for (slice, data) in slices.iter_mut().zip(&self.outbox) {
                *slice = IoSlice::new(data);
            }
            let written = ready!(Pin::new(&mut self.stream).poll_write_vectored(cx, &slices[..count]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.unflushed = true;
            self.consume(written);
        }
        if self.unflushed {
            ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }
}

/// The most chunks one vectored write takes (each is a whole batch of
/// requests; more wait for the next write).
const MAX_SLICES: usize = 16;

/// Writes what every socket has queued, then reads from whichever has bytes
/// first (one socket per cluster node), trying them from `start` on so
/// that a busy one does not starve the rest. Resolves with a read or a
/// failed write; pending writes wake it when the socket can take more.
pub(crate) async fn poll_sockets<S: AsyncRead + AsyncWrite + Unpin>(
    sockets: &mut [Socket<S>],
    buf: &mut [u8],
    start: usize,
) -> SocketEvent {
    std::future::poll_fn(|cx| {
        for socket in sockets.iter_mut() {
            if let Poll::Ready(Err(error)) = socket.poll_drain(cx) {
                return Poll::Ready(SocketEvent::WriteFailed(socket.id, error));
            }
        }
        let count = sockets.len();
        for offset in 0..count {
            let socket = &mut sockets[(start + offset) % count];
            let mut read = ReadBuf::new(buf);
            if let Poll::Ready(result) = Pin::new(&mut socket.stream).poll_read(cx, &mut read) {
                return Poll::Ready(SocketEvent::Read(socket.id, result.map(|()| read.filled().len())));
            }
        }
        Poll::Pending
    })
    .await
}
