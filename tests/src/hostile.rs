//! A RESP peer that lies on command. It answers honestly from the core's
//! Redis model, except that the next acquire (or renewal) can be answered with
//! bytes of our choosing, executed first (the lease exists, the reply lies) or refused (the
//! server did nothing and says something). Leaks show up in the model.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{ScriptKind, Scripts};
use inflight_testkit::model::{ModelConnection, RedisModel};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How to answer the next acquire (`EVALSHA`/`EVAL` of the acquire script).
#[derive(Clone, Debug)]
pub enum Lie {
    /// Run it on the model, then send these bytes instead of the real reply.
    ExecuteThenSend(Bytes),
    /// Do not run it; send these bytes.
    RefuseWith(Bytes),
    /// Answer honestly, then send these bytes too (replies nobody asked for).
    AppendAfter(Bytes),
}

#[derive(Default)]
struct Shared {
    model: Mutex<RedisModel>,
    next: Mutex<Option<Lie>>,
    next_renewal: Mutex<Option<Lie>>,
    connections: AtomicUsize,
}

pub struct HostilePeer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl HostilePeer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the hostile peer");
        let addr = listener.local_addr().expect("address");
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(stream, shared.clone()));
                }
            }
        });
        Self { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The next acquire gets this answer; later ones are answered honestly.
    pub fn lie_once(&self, lie: Lie) {
        *self.shared.next.lock().unwrap() = Some(lie);
    }

    /// The next renewal gets this answer; later ones are answered honestly.
    pub fn lie_once_to_renewal(&self, lie: Lie) {
        *self.shared.next_renewal.lock().unwrap() = Some(lie);
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Leases the model holds now.
    pub fn live_leases(&self) -> usize {
        let mut model = self.shared.model.lock().unwrap();
        model.now_ms = now_ms();
        model.all_live_leases().len()
    }
}

impl Drop for HostilePeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Which of our scripts a command runs (`EVALSHA` or `EVAL`), if any.
fn script_of(frame: &Frame, scripts: &Scripts) -> Option<ScriptKind> {
    let Frame::Array(items) = frame else { return None };
    let (Some(Frame::BulkString(verb)), Some(Frame::BulkString(body))) = (items.first(), items.get(1)) else {
        return None;
    };
    let verb = verb.to_ascii_uppercase();
    ScriptKind::LOADED.into_iter().find(|kind| {
        let script = scripts.get(*kind);
        (verb == b"EVALSHA" && body.eq_ignore_ascii_case(script.sha.as_bytes()))
            || (verb == b"EVAL" && body[..] == *script.text.as_bytes())
    })
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let mut connection = ModelConnection::new();
    // A second reader sees whole commands, to find the acquire among them.
    let mut commands = ReplyReader::new(ReplyLimits {
        max_frame_bytes: 1 << 20,
        max_array_len: 2 + inflight_core::scripts::MAX_RELEASE_BATCH,
        ..ReplyLimits::default()
    });
    let scripts = Scripts::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        commands.push(&buf[..n]);
        let mut out = Vec::new();
        while let Ok(Some(frame)) = commands.next_frame() {
            let mut encoded = bytes::BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut encoded, &frame, false).expect("re-encode");
            let lie = match script_of(&frame, &scripts) {
                Some(ScriptKind::Acquire) => shared.next.lock().unwrap().take(),
                Some(ScriptKind::Renew) => shared.next_renewal.lock().unwrap().take(),
                _ => None,
            };
            let mut model = shared.model.lock().unwrap();
            model.now_ms = now_ms();
            match lie {
                None => match model.handle(&mut connection, &encoded) {
                    Ok(reply) => out.extend_from_slice(&reply),
                    Err(_) => return,
                },
                Some(Lie::ExecuteThenSend(bytes)) => {
                    let _ = model.handle(&mut connection, &encoded);
                    out.extend_from_slice(&bytes);
                }
                Some(Lie::RefuseWith(bytes)) => out.extend_from_slice(&bytes),
                Some(Lie::AppendAfter(bytes)) => match model.handle(&mut connection, &encoded) {
                    Ok(reply) => {
                        out.extend_from_slice(&reply);
                        out.extend_from_slice(&bytes);
                    }
                    Err(_) => return,
                },
            }
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
