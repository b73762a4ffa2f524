//! A bare HTTP/1 client over one TCP connection per request, so that a test
//! decides exactly when a client hangs up (dropping the [`Exchange`] closes
//! its socket).

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// One request's response, its body still streaming, and the connection
/// that carries it.
pub struct Exchange {
    pub response: Response<Incoming>,
    connection: JoinHandle<()>,
}

impl Exchange {
    pub fn status(&self) -> StatusCode {
        self.response.status()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.response
            .headers()
            .get(name)
            .map(|value| value.to_str().expect("ASCII header").to_string())
    }

    /// The next data chunk (`None` at the end of the body).
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            let frame = self.response.body_mut().frame().await?.expect("a body frame");
            if let Ok(data) = frame.into_data() {
                return Some(data);
            }
        }
    }

    /// The rest of the body, to its end.
    pub async fn rest(mut self) -> String {
        let mut text = String::new();
        while let Some(chunk) = self.next_chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    }
}

impl Drop for Exchange {
    /// Hangs up: the socket closes mid-body if the body had not ended.
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// `GET path` with `headers`, on a fresh connection to `server`.
pub async fn get(server: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Exchange {
    let stream = TcpStream::connect(server)
        .await
        .expect("connect to the test HTTP server");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1 handshake");
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = Request::get(path).header("host", "localhost");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).expect("a valid request");
    let response = sender.send_request(request).await.expect("an HTTP response");
    Exchange { response, connection }
}
