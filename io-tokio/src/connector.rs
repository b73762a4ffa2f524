//! How the driver reaches a server. The driver is generic over this trait so
//! the same code runs on real sockets and on a simulator's (turmoil, madsim).

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

/// Opens byte streams to a Redis server.
pub trait Connector: Send + Sync + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    fn connect(&self, host: &str, port: u16) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

/// Plain TCP with `TCP_NODELAY`: requests are small and latency-bound.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Io = tokio::net::TcpStream;

    async fn connect(&self, host: &str, port: u16) -> io::Result<Self::Io> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}
