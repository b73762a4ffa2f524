//! A server that lies: each hostile reply has a documented outcome
//! (docs/fuzzing.md), and none may panic, admit past the limit, or leak.

use std::time::{Duration, Instant};

use bytes::Bytes;
use inflight_tests::{HostilePeer, Lie};
use inflight_tokio::{ConnectionError, Error, Key, Limiter, ProtocolError, RenewError, ServerErrorKind, Unavailable};

async fn limiter(peer: &HostilePeer) -> Limiter {
    Limiter::builder(peer.url())
        .default_limit(1)
        .timeout(Duration::from_millis(200))
        .request_liveness(Duration::from_millis(800))
        .connect()
        .await
        .unwrap()
}

fn key() -> Key {
    Key::new("tier", "hostile").unwrap()
}

async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lie, then: the outcome it must produce, whether the connection must be
/// replaced, and afterwards an honest acquire must work and nothing may leak.
async fn case(lie: Lie, expect: impl Fn(&Error) -> bool, retires: bool) {
    let peer = HostilePeer::start().await;
    let limiter = limiter(&peer).await;
    peer.lie_once(lie.clone());
    let error = limiter.acquire(&key()).await.expect_err("a lie is never a permit");
    assert!(expect(&error), "{lie:?} gave {error:?}");
    assert!(
        !matches!(error, Error::Exceeded { .. }),
        "a lie is never evidence of a denial"
    );
    until("compensation of anything the lie created", || peer.live_leases() == 0).await;
    if retires {
        until("a replacement connection", || peer.connections() == 2).await;
    }
    let permit = limiter.acquire(&key()).await.expect("an honest answer after the lie");
    assert_eq!(
        peer.live_leases(),
        1,
        "exactly one lease: nothing admitted past the limit"
    );
    assert!(matches!(
        limiter.acquire(&key()).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    permit.release().await.unwrap();
    assert_eq!(peer.live_leases(), 0);
    if !retires {
        assert_eq!(peer.connections(), 1, "{lie:?} should not cost the connection");
    }
}

fn executed(bytes: &'static [u8]) -> Lie {
    Lie::ExecuteThenSend(Bytes::from_static(bytes))
}

fn refused(bytes: &'static [u8]) -> Lie {
    Lie::RefuseWith(Bytes::from_static(bytes))
}

fn lost_to(check: impl Fn(&ConnectionError) -> bool) -> impl Fn(&Error) -> bool {
    move |error| matches!(error, Error::Unavailable { reason: Unavailable::ConnectionLost(e) } if check(e))
}

/// Redis's refusal of `kind`, its message kept as Redis wrote it.
fn server_error(kind: ServerErrorKind, prefix: &'static str) -> impl Fn(&Error) -> bool {
    move |error| {
        matches!(error, Error::Unavailable { reason: Unavailable::Server(e) }
            if e.kind() == kind && e.message().starts_with(prefix))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_resp_retires_the_connection() {
    let protocol = |e: &ConnectionError| matches!(e, ConnectionError::Protocol(ProtocolError::Malformed(_)));
    case(executed(b"?what\r\n"), lost_to(protocol), true).await;
    case(executed(b":12x\r\n"), lost_to(protocol), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_of_the_wrong_type_or_arity_retires_the_connection() {
    let unexpected = |e: &ConnectionError| matches!(e, ConnectionError::UnexpectedReply(_));
    case(executed(b":1\r\n"), lost_to(unexpected), true).await;
    case(executed(b"+OK\r\n"), lost_to(unexpected), true).await;
    case(executed(b"*1\r\n:1\r\n"), lost_to(unexpected), true).await;
    case(executed(b"*3\r\n:1\r\n:2\r\n:3\r\n"), lost_to(unexpected), true).await;
    // Two items: an acquire answers four (status, id, fencing token, units
    // reclaimed); a negative count is a lie too.
    case(executed(b"*2\r\n:1\r\n$1\r\nx\r\n"), lost_to(unexpected), true).await;
    case(
        executed(b"*4\r\n:0\r\n$1\r\nx\r\n:0\r\n:-1\r\n"),
        lost_to(unexpected),
        true,
    )
    .await;
    case(
        executed(b"*3\r\n$1\r\n1\r\n$1\r\nx\r\n:1\r\n"),
        lost_to(unexpected),
        true,
    )
    .await;
    case(
        executed(b"*4\r\n:7\r\n$1\r\nx\r\n:0\r\n:0\r\n"),
        lost_to(|e| *e == ConnectionError::EchoMismatch),
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_length_of_2_pow_62_is_refused_without_allocating() {
    let too_large = |e: &ConnectionError| matches!(e, ConnectionError::Protocol(ProtocolError::TooLarge { .. }));
    case(executed(b"$4611686018427387904\r\n"), lost_to(too_large), true).await;
    case(executed(b"*4611686018427387904\r\n"), lost_to(too_large), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_with_nothing_pending_retires_the_connection() {
    let peer = HostilePeer::start().await;
    let limiter = limiter(&peer).await;
    // An honest grant, then one reply too many.
    peer.lie_once(Lie::ExecuteThenSend(Bytes::new()));
    let error = limiter.acquire(&key()).await.unwrap_err();
    assert_eq!(
        error,
        Error::Unavailable {
            reason: Unavailable::Timeout
        }
    );
    // The grant's reply never came; the liveness budget retires the connection
    // and the ambiguous acquire is compensated.
    until("compensation", || peer.live_leases() == 0).await;
    until("a replacement", || peer.connections() == 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_unsolicited_reply_retires_the_connection() {
    let peer = HostilePeer::start().await;
    let limiter = limiter(&peer).await;
    // An honest grant, then a reply nobody asked for.
    peer.lie_once(Lie::AppendAfter(Bytes::from_static(b"+OK\r\n")));
    let permit = limiter
        .acquire(&key())
        .await
        .expect("the honest grant before the extra reply");
    until("a replacement", || peer.connections() == 2).await;
    permit.release().await.expect("released on the fresh connection");
    assert_eq!(peer.live_leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_push_frames_are_malformed_for_a_resp2_connection() {
    let protocol = |e: &ConnectionError| matches!(e, ConnectionError::Protocol(_));
    case(executed(b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n"), lost_to(protocol), true).await;
    case(executed(b"%1\r\n:1\r\n:1\r\n"), lost_to(protocol), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_falls_back_to_eval_and_grants() {
    let peer = HostilePeer::start().await;
    let limiter = limiter(&peer).await;
    peer.lie_once(refused(b"-NOSCRIPT No matching script. Please use EVAL.\r\n"));
    let permit = limiter.acquire(&key()).await.expect("EVAL fallback grants");
    assert_eq!(peer.live_leases(), 1);
    permit.release().await.unwrap();
    assert_eq!(peer.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_refused_before_execution_keep_the_connection() {
    case(
        refused(b"-BUSY Redis is busy running a script.\r\n"),
        server_error(ServerErrorKind::Busy, "BUSY"),
        false,
    )
    .await;
    case(
        refused(b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"),
        server_error(ServerErrorKind::OutOfMemory, "OOM"),
        false,
    )
    .await;
    case(
        refused(b"-LOADING Redis is loading the dataset in memory\r\n"),
        server_error(ServerErrorKind::Loading, "LOADING"),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_that_condemn_the_connection_retire_it() {
    case(
        refused(b"-READONLY You can't write against a read only replica.\r\n"),
        server_error(ServerErrorKind::ReadOnly, "READONLY"),
        true,
    )
    .await;
    case(
        refused(b"-NOAUTH Authentication required.\r\n"),
        server_error(ServerErrorKind::NoAuth, "NOAUTH"),
        true,
    )
    .await;
    case(
        refused(b"-WRONGPASS invalid username-password pair\r\n"),
        server_error(ServerErrorKind::WrongPass, "WRONGPASS"),
        true,
    )
    .await;
}

/// A standalone client cannot follow a redirect (its server hid that it is a
/// cluster node): the acquire is refused, and the healthy connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_a_standalone_client_are_refusals_that_keep_the_connection() {
    case(
        refused(b"-MOVED 3999 127.0.0.1:6381\r\n"),
        server_error(ServerErrorKind::Moved, "MOVED"),
        false,
    )
    .await;
    case(
        refused(b"-ASK 3999 127.0.0.1:6381\r\n"),
        server_error(ServerErrorKind::Ask, "ASK"),
        false,
    )
    .await;
    case(
        refused(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"),
        server_error(ServerErrorKind::TryAgain, "TRYAGAIN"),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_error_after_execution_is_compensated() {
    case(
        executed(b"-ERR something odd\r\n"),
        server_error(ServerErrorKind::Other, "ERR"),
        false,
    )
    .await;
}

/// A lie told to a renewal: the outcome it must produce and whether the
/// connection must be replaced. A renewal is never compensated, so the lease
/// must still be there afterwards, and the next (honest) renewal must work.
async fn renewal_case(lie: Lie, expect: impl Fn(&Result<(), RenewError>) -> bool, retires: bool) {
    let peer = HostilePeer::start().await;
    let limiter = limiter(&peer).await;
    let mut permit = limiter.acquire(&key()).await.unwrap();
    peer.lie_once_to_renewal(lie.clone());
    let outcome = permit.renew().await;
    assert!(expect(&outcome), "{lie:?} gave {outcome:?}");
    assert!(
        permit.is_enforced(),
        "a renewal that got no trustworthy answer keeps the permit"
    );
    if retires {
        until("a replacement connection", || peer.connections() == 2).await;
    } else {
        assert_eq!(peer.connections(), 1, "{lie:?} should not cost the connection");
    }
    assert_eq!(peer.live_leases(), 1, "a renewal is never compensated");
    permit.renew().await.expect("an honest renewal after the lie");
    assert!(matches!(
        limiter.acquire(&key()).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    permit.release().await.unwrap();
    assert_eq!(peer.live_leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_echoing_another_id_retires_the_connection_and_keeps_the_lease() {
    renewal_case(
        executed(b"*3\r\n:1\r\n$3\r\nxyz\r\n:0\r\n"),
        |r| {
            matches!(
                r,
                Err(RenewError::Unavailable {
                    reason: Unavailable::ConnectionLost(ConnectionError::EchoMismatch)
                })
            )
        },
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_with_an_error_is_unavailable_and_not_compensated() {
    renewal_case(
        executed(b"-ERR something odd\r\n"),
        |r| matches!(r, Err(RenewError::Unavailable { reason: Unavailable::Server(e) }) if e.kind() == ServerErrorKind::Other),
        false,
    )
    .await;
    renewal_case(
        refused(b"-READONLY You can't write against a read only replica.\r\n"),
        |r| matches!(r, Err(RenewError::Unavailable { reason: Unavailable::Server(e) }) if e.kind() == ServerErrorKind::ReadOnly),
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_told_noscript_falls_back_to_eval() {
    renewal_case(
        refused(b"-NOSCRIPT No matching script. Please use EVAL.\r\n"),
        |r| r.is_ok(),
        false,
    )
    .await;
}
