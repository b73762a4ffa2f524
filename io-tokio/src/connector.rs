//! How the driver reaches a server. The driver is generic over this trait so
//! the same code runs on real sockets and on a simulator's (turmoil, madsim).

use std::future::Future;
use std::io;

use inflight_core::Endpoint;
use tokio::io::{AsyncRead, AsyncWrite};

/// Opens byte streams to a Redis server.
pub trait Connector: Send + Sync + 'static {
    /// The byte stream a connection runs on.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Opens a stream to `endpoint`. The driver bounds the time it may take.
    fn connect(&self, endpoint: &Endpoint) -> impl Future<Output = io::Result<Self::Io>> + Send;

    /// Opens a stream to a sentinel (Redis Sentinel) at `endpoint`: the
    /// same as [`Connector::connect`] unless the sentinels are reached
    /// otherwise than the data nodes (see [`SentinelsApart`](crate::SentinelsApart)).
    /// A connector that wraps another must forward this too, or its
    /// sentinels are reached as its data nodes are.
    fn connect_sentinel(&self, endpoint: &Endpoint) -> impl Future<Output = io::Result<Self::Io>> + Send {
        self.connect(endpoint)
    }
}

/// Host and port of a TCP endpoint, or the error a TCP-only connector gives.
pub fn tcp_endpoint(endpoint: &Endpoint) -> io::Result<(&str, u16)> {
    endpoint.as_tcp().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{endpoint} is not a TCP address, and this connector speaks only TCP"),
        )
    })
}

/// Plain TCP. With `TCP_NODELAY` (the default) every write leaves at once:
/// requests are small and latency-bound, and the driver already sends all
/// it has in one write. Without it (`coalescing`), the kernel holds small
/// writes while earlier bytes are unacknowledged (Nagle): less CPU per
/// request under heavy pipelining, up to a round trip more latency for a
/// request sent while others are in flight.
#[derive(Clone, Copy, Debug)]
pub struct TcpConnector {
    nodelay: bool,
}

impl TcpConnector {
    /// `TCP_NODELAY` on: every write leaves at once.
    pub const fn new() -> Self {
        Self { nodelay: true }
    }

    /// `TCP_NODELAY` off: the kernel coalesces pipelined writes (Nagle).
    pub const fn coalescing() -> Self {
        Self { nodelay: false }
    }
}

impl Default for TcpConnector {
    fn default() -> Self {
        Self::new()
    }
}

impl Connector for TcpConnector {
    type Io = tokio::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Io> {
        let (host, port) = tcp_endpoint(endpoint)?;
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.set_nodelay(self.nodelay)?;
        Ok(stream)
    }
}

/// A Unix domain socket (`redis+unix:///path`), for a Redis on the same host.
#[cfg(all(unix, not(madsim)))]
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixConnector;

#[cfg(all(unix, not(madsim)))]
impl Connector for UnixConnector {
    type Io = tokio::net::UnixStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Io> {
        match endpoint {
            Endpoint::Unix(path) => tokio::net::UnixStream::connect(path).await,
            other => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{other} is not a Unix socket path"),
            )),
        }
    }
}
