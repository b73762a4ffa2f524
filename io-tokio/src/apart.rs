//! Sentinels reached otherwise than the data nodes: TLS to one and plain TCP
//! to the other (a sentinel's `tls-port` is set apart from the data nodes'),
//! or any two connectors a user composes.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use inflight_core::Endpoint;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::connector::Connector;

/// A [`Connector`] that reaches the sentinels with `sentinels` and the data
/// nodes with `nodes`. [`Limiter::sentinel_builder`](crate::Limiter::sentinel_builder)
/// picks one when the sentinels' scheme and [`Builder::node_tls`](crate::Builder::node_tls)
/// differ; `connect_with` takes one built by hand.
#[derive(Clone, Debug)]
pub struct SentinelsApart<S, N> {
    sentinels: S,
    nodes: N,
}

impl<S: Connector, N: Connector> SentinelsApart<S, N> {
    /// Sentinels through `sentinels`, data nodes through `nodes`.
    pub fn new(sentinels: S, nodes: N) -> Self {
        Self { sentinels, nodes }
    }
}

impl<S: Connector, N: Connector> Connector for SentinelsApart<S, N> {
    type Io = EitherIo<S::Io, N::Io>;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Io> {
        self.nodes.connect(endpoint).await.map(EitherIo::Right)
    }

    async fn connect_sentinel(&self, endpoint: &Endpoint) -> io::Result<Self::Io> {
        self.sentinels.connect_sentinel(endpoint).await.map(EitherIo::Left)
    }
}

/// One stream of two kinds: a sentinel's (`Left`) or a data node's (`Right`).
#[derive(Debug)]
pub enum EitherIo<L, R> {
    /// A sentinel's.
    Left(L),
    /// A data node's.
    Right(R),
}

impl<L: AsyncRead + Unpin, R: AsyncRead + Unpin> AsyncRead for EitherIo<L, R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EitherIo::Left(io) => Pin::new(io).poll_read(cx, buf),
            EitherIo::Right(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl<L: AsyncWrite + Unpin, R: AsyncWrite + Unpin> AsyncWrite for EitherIo<L, R> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            EitherIo::Left(io) => Pin::new(io).poll_write(cx, buf),
            EitherIo::Right(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            EitherIo::Left(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            EitherIo::Right(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            EitherIo::Left(io) => io.is_write_vectored(),
            EitherIo::Right(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EitherIo::Left(io) => Pin::new(io).poll_flush(cx),
            EitherIo::Right(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EitherIo::Left(io) => Pin::new(io).poll_shutdown(cx),
            EitherIo::Right(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}
