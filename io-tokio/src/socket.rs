//! One connection's I/O: the task that connects and writes, and the read
//! the driver does itself.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use inflight_core::{ConnectionId, Endpoint};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf, ReadHalf};
use tokio::sync::mpsc;

use crate::connector::Connector;

/// What connection tasks report. A connected task hands the driver its
/// stream's read half: the driver reads replies itself, one hop fewer per
/// reply than relaying them through the task.
pub(crate) enum IoEvent<R> {
    Connected(ConnectionId, R),
    Closed(ConnectionId, Option<String>),
}

pub(crate) type Reader<C> = ReadHalf<<C as Connector>::Io>;

/// One connection's task: connect, hand the read half to the driver, then
/// write what the driver sends until either side ends or the driver aborts
/// the task. Writing here, apart from the driver's reads, means a peer that
/// stops reading cannot stop us from reading its replies.
pub(crate) async fn run_connection<C: Connector>(
    connector: Arc<C>,
    endpoint: Endpoint,
    id: ConnectionId,
    events: mpsc::UnboundedSender<IoEvent<Reader<C>>>,
    mut outgoing: mpsc::UnboundedReceiver<Bytes>,
) {
    // The core's connect deadline bounds this: it closes (aborts) us when due.
    let io = match connector.connect(&endpoint).await {
        Ok(io) => io,
        Err(error) => {
            let _ = events.send(IoEvent::Closed(id, Some(error.to_string())));
            return;
        }
    };
    let (reader, mut writer) = tokio::io::split(io);
    if events.send(IoEvent::Connected(id, reader)).is_err() {
        return;
    }
    let written = async {
        while let Some(data) = outgoing.recv().await {
            writer.write_all(&data).await?;
            writer.flush().await?;
        }
        Ok::<_, io::Error>(())
    }
    .await;
    if let Err(error) = written {
        let _ = events.send(IoEvent::Closed(id, Some(error.to_string())));
    }
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
