//! The simulated Redis: a turmoil host that speaks RESP and runs the core's
//! reference model of the lease set, on the simulation's clock.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;

use inflight_core::model::{ModelConnection, RedisModel};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

use crate::ledger::Ledger;

pub const PORT: u16 = 6379;
/// The model's clock at the start of the simulation, in Unix milliseconds.
const EPOCH_MS: u64 = 1_700_000_000_000;

/// What the simulated server shares with the harness.
#[derive(Clone)]
pub struct ServerState {
    pub model: Rc<RefCell<RedisModel>>,
    pub ledger: Rc<RefCell<Ledger>>,
    /// Replies still to be lost on purpose (one each), keeping the connection.
    pub drop_replies: Rc<Cell<u32>>,
    /// Key names of the scenario, to attribute the model's denials.
    pub keys: &'static [(&'static str, u32)],
}

fn now_ms() -> u64 {
    EPOCH_MS + turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}

/// The host's software. A restart (bounce) starts from an empty data set, as a
/// Redis without persistence would.
pub async fn serve(state: ServerState) -> turmoil::Result {
    *state.model.borrow_mut() = RedisModel::new(now_ms());
    let listener = TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(serve_connection(stream, state.clone()));
    }
}

async fn serve_connection(mut stream: TcpStream, state: ServerState) {
    let mut connection = ModelConnection::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let replies = {
            let mut model = state.model.borrow_mut();
            model.now_ms = now_ms();
            let replies = model.handle_each(&mut connection, &buf[..n]);
            for record in model.acquires.drain(..) {
                if record.status == 0 {
                    if let Some(key) = key_name(state.keys, &record.key) {
                        state.ledger.borrow_mut().server_denied(key);
                    }
                }
            }
            replies
        };
        let Ok(replies) = replies else {
            return; // garbage from a client: drop it, as Redis does
        };
        for reply in replies {
            let lose = state.drop_replies.get();
            if lose > 0 {
                state.drop_replies.set(lose - 1);
                continue;
            }
            if stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

/// `sim:{load|k1}:leases` -> `k1`.
fn key_name(keys: &'static [(&'static str, u32)], redis_key: &[u8]) -> Option<&'static str> {
    let text = std::str::from_utf8(redis_key).ok()?;
    let subject = text.split('|').nth(1)?.split('}').next()?;
    keys.iter().map(|(k, _)| *k).find(|k| *k == subject)
}
