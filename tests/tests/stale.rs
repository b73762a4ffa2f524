//! Ghost leases after long stalls (issue 18), against a real redis-server:
//! requests held back for longer than the lease TTL (a paused server, a
//! proxy that sits on bytes) must not come back as leases nobody holds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use inflight_core::resp::Frame;
use inflight_tests::{Mode, RedisServer, Relay, Rng};
use inflight_tokio::{Key, Limiter};

const PREFIX: &str = "stale";
const SUBJECTS: [&str; 3] = ["a", "b", "c"];
const LIMIT: u32 = 10;
const LIVENESS: Duration = Duration::from_millis(500);

async fn limiter(url: &str) -> Limiter {
    Limiter::builder(url)
        .key_prefix(PREFIX)
        .default_limit(LIMIT)
        .lease_ttl(Duration::from_secs(1))
        .timeout(Duration::from_millis(150))
        .request_liveness(LIVENESS)
        .connect_timeout(Duration::from_millis(300))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .connect()
        .await
        .expect("connect")
}

/// Lease ids the callers hold right now.
type Held = Arc<Mutex<HashSet<String>>>;

/// Callers that acquire, hold 1-20 ms and let go, until `stop` (bounded to
/// 2,000 rounds each).
fn load(limiter: &Limiter, held: &Held, stop: &Arc<AtomicBool>, seed: u64) -> Vec<tokio::task::JoinHandle<()>> {
    (0..8)
        .map(|n| {
            let (limiter, held, stop) = (limiter.clone(), held.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng(seed * 31 + n + 1);
                for _ in 0..2_000 {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let key = Key::new("tier", SUBJECTS[rng.below(3) as usize]).unwrap();
                    match limiter.acquire(&key).await {
                        Ok(permit) => {
                            let id = permit.lease_id().expect("enforced").to_string();
                            held.lock().unwrap().insert(id.clone());
                            tokio::time::sleep(Duration::from_millis(1 + rng.below(20))).await;
                            held.lock().unwrap().remove(&id);
                            drop(permit);
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            })
        })
        .collect()
}

/// Every lease in Redis now, as ids.
fn leases_in_redis(server: &RedisServer) -> Vec<String> {
    let mut client = server.client();
    let mut all = Vec::new();
    for subject in SUBJECTS {
        let key = Bytes::from(format!("{PREFIX}:{{tier|{subject}}}:leases"));
        match client.call(&[b"ZRANGE", &key, b"0", b"-1"]).unwrap() {
            Frame::Array(ids) => all.extend(ids.into_iter().map(|id| match id {
                Frame::BulkString(id) => String::from_utf8(id.to_vec()).unwrap(),
                other => panic!("{other:?}"),
            })),
            other => panic!("ZRANGE answered {other:?}"),
        }
    }
    all
}

/// After the stall ends, within one liveness budget (plus a reconnect and a
/// round trip), every lease Redis holds belongs to a permit a caller holds.
/// A lease not held then and still there 200 ms later is a ghost (a release
/// on its way would be done by then; a ghost lives a whole TTL).
async fn assert_no_ghosts(server: &RedisServer, held: &Held) {
    tokio::time::sleep(LIVENESS + Duration::from_millis(150)).await;
    let suspects: Vec<String> = {
        let in_redis = leases_in_redis(server);
        let held = held.lock().unwrap();
        in_redis.into_iter().filter(|id| !held.contains(id)).collect()
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let still: HashSet<String> = leases_in_redis(server).into_iter().collect();
    let held = held.lock().unwrap();
    let ghosts: Vec<&String> = suspects
        .iter()
        .filter(|id| still.contains(*id) && !held.contains(*id))
        .collect();
    assert!(
        ghosts.is_empty(),
        "{} leases nobody holds, e.g. {:?}",
        ghosts.len(),
        &ghosts[..ghosts.len().min(3)]
    );
}

async fn stall_under_load(stall: impl FnOnce(&RedisServer, &Relay), heal: impl FnOnce(&RedisServer, &Relay)) {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let (a, b) = (limiter(&relay.url()).await, limiter(&relay.url()).await);
    let held: Held = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = load(&a, &held, &stop, 1);
    tasks.extend(load(&b, &held, &stop, 2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stall(&server, &relay);
    tokio::time::sleep(Duration::from_secs(3)).await;
    heal(&server, &relay);
    assert_no_ghosts(&server, &held).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    // The callers were really at work on both sides of the stall.
    let stats = (a.stats(), b.stats());
    assert!(stats.0.granted > 20 && stats.1.granted > 20, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_longer_than_the_ttl_leaves_no_lease_nobody_holds() {
    stall_under_load(|server, _| server.pause(), |server, _| server.resume()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_holding_requests_longer_than_the_ttl_leaves_no_lease_nobody_holds() {
    stall_under_load(
        |_, relay| relay.set(Mode::HoldRequests),
        |_, relay| relay.set(Mode::Forward),
    )
    .await;
}
