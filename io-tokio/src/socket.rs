//! One connection's I/O: the task that connects, and the reads and writes
//! the driver does itself.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use inflight_core::{ConnectionId, Endpoint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use crate::connector::Connector;

/// What connection tasks report. A connected task hands the driver both
/// halves of its stream: the driver reads replies and writes requests
/// itself, with no task hop either way.
pub(crate) enum IoEvent<R, W> {
    Connected(ConnectionId, R, W),
    Closed(ConnectionId, Option<String>),
}

pub(crate) type Reader<C> = ReadHalf<<C as Connector>::Io>;
pub(crate) type Writer<C> = WriteHalf<<C as Connector>::Io>;

/// One connection attempt: connect (the core's connect deadline bounds it:
/// it closes, that is aborts, the task when due), then hand both halves to
/// the driver.
pub(crate) async fn run_connection<C: Connector>(
    connector: Arc<C>,
    endpoint: Endpoint,
    id: ConnectionId,
    events: mpsc::UnboundedSender<IoEvent<Reader<C>, Writer<C>>>,
) {
    match connector.connect(&endpoint).await {
        Ok(io) => {
            let (reader, writer) = tokio::io::split(io);
            let _ = events.send(IoEvent::Connected(id, reader, writer));
        }
        Err(error) => {
            let _ = events.send(IoEvent::Closed(id, Some(error.to_string())));
        }
    }
}

/// A connection's write half and the bytes not written yet. The driver
/// writes without ever waiting on a socket: what the kernel does not take
/// now stays here and goes when the socket is writable again, so a peer
/// that stops reading cannot stop the driver from reading other replies.
pub(crate) struct Outbox<W> {
    writer: W,
    queue: VecDeque<Bytes>,
    /// Written since the last flush (TLS holds bytes until flushed).
    unflushed: bool,
}

impl<W: AsyncWrite + Unpin> Outbox<W> {
    pub(crate) fn new(writer: W) -> Self {
        Self {
            writer,
            queue: VecDeque::new(),
            unflushed: false,
        }
    }

    pub(crate) fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.queue.push_back(data);
        }
    }

    /// Whether anything waits to be written or flushed.
    pub(crate) fn busy(&self) -> bool {
        !self.queue.is_empty() || self.unflushed
    }

    /// Writes and flushes what it can: `Ready(Ok)` once everything is out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(front) = self.queue.front_mut() {
            match Pin::new(&mut self.writer).poll_write(cx, front) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.unflushed = true;
                    front.advance(n);
                    if front.is_empty() {
                        self.queue.pop_front();
                    }
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.unflushed {
            match Pin::new(&mut self.writer).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                other => return other,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Writes on every connection that has bytes waiting, and resolves once one
/// of them is drained or fails. The select guards that one is `busy`.
pub(crate) async fn write_any<W: AsyncWrite + Unpin>(
    writers: &mut [(ConnectionId, Outbox<W>)],
) -> (ConnectionId, io::Result<()>) {
    std::future::poll_fn(|cx| {
        for (id, outbox) in writers.iter_mut().filter(|(_, outbox)| outbox.busy()) {
            if let Poll::Ready(result) = outbox.poll_drain(cx) {
                return Poll::Ready((*id, result));
            }
        }
        Poll::Pending
    })
    .await
}

/// Reads from whichever connection has bytes first (one per cluster node),
/// trying them from `start` on so that a busy one does not starve the rest.
/// The select guards `!readers.is_empty()`.
pub(crate) async fn read_any<R: AsyncRead + Unpin>(
    readers: &mut [(ConnectionId, R)],
    buf: &mut [u8],
    start: usize,
) -> (ConnectionId, io::Result<usize>) {
    std::future::poll_fn(|cx| {
        let count = readers.len();
        for offset in 0..count {
            let (id, reader) = &mut readers[(start + offset) % count];
            let mut read = ReadBuf::new(buf);
            match Pin::new(reader).poll_read(cx, &mut read) {
                Poll::Ready(result) => return Poll::Ready((*id, result.map(|()| read.filled().len()))),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    })
    .await
}
