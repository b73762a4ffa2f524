//! Renewals: extending, lost leases, late and stale renewals.

use super::*;

#[test]
fn a_renewal_keeps_a_lease_alive_past_its_first_ttl() {
    let config = Config {
        lease_ttl: Duration::from_secs(1),
        ..config()
    };
    let mut pair = Pair::connected(config, start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    let first_expiry = pair.held[0].expires_at();

    pair.advance(ms(800));
    let renewal = pair.renew(0);
    pair.exchange();
    let Some(Renewal::Extended(lease)) = renewed(&pair, renewal) else {
        panic!("{:?}", renewed(&pair, renewal));
    };
    assert_eq!(lease.expires_at(), first_expiry + ms(800));
    assert_eq!(pair.held[0].expires_at(), lease.expires_at());

    // Past the first TTL the slot is still taken...
    pair.advance(ms(500));
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert_eq!(pair.outcome(b), Some(&Outcome::Exceeded));
    // ...and once the renewed TTL is over, it is free, and the lease is lost.
    pair.advance(ms(600));
    let lost = pair.renew(0);
    pair.exchange();
    assert_eq!(renewed(&pair, lost), Some(&Renewal::Lost));
    let stats = pair.client.stats();
    assert_eq!((stats.renewals, stats.leases_lost), (1, 1));
}

#[test]
fn a_renewal_that_comes_too_late_cannot_bring_a_released_lease_back() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    // The renewal is written, then the connection dies with its bytes in flight.
    let renewal = pair.renew(0);
    pair.cut();
    assert!(matches!(
        renewed(&pair, renewal),
        Some(Renewal::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    // Nothing is compensated for a renewal: the holder still has its slot.
    pair.settle();
    assert_eq!(pair.server.all_live_leases().len(), 1);
    pair.release(0);
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
    // The renewal's bytes land after the release: still nothing.
    pair.land_ghosts();
    assert!(pair.server.all_live_leases().is_empty());
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
}

#[test]
fn a_renewal_times_out_without_touching_the_connection_or_the_lease() {
    let mut pair = Pair::connected(config(), start());
    let (connection, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    pair.server.flush_scripts(); // and the renewal goes the NOSCRIPT way
    let renewal = pair.renew(0);
    pair.to_server(usize::MAX);
    pair.advance(config().acquire_timeout);
    assert_eq!(
        renewed(&pair, renewal),
        Some(&Renewal::Unavailable(Unavailable::Timeout))
    );
    pair.settle();
    assert_eq!(inflight_testkit::connection(&pair.client), Some((connection, true)));
    assert_eq!(pair.server.all_live_leases().len(), 1, "a renewal is never compensated");
    // The next renewal goes through (by EVAL after the NOSCRIPT, or reloaded).
    let again = pair.renew(0);
    pair.exchange();
    assert!(matches!(renewed(&pair, again), Some(Renewal::Extended(_))));
    pair.assert_no_leak();
}

#[test]
fn a_renewal_that_runs_too_late_changes_nothing_and_says_so() {
    let mut pair = Pair::connected(short_ttl(), start());
    pair.acquire("t", "s", 1);
    pair.exchange();
    let renewal = pair.renew(0);
    pair.to_server(0); // written, not yet delivered
    pair.advance(Duration::from_millis(2_100)); // past its liveness: retired
    assert!(matches!(
        renewed(&pair, renewal),
        Some(Renewal::Unavailable(Unavailable::Timeout))
    ));
    pair.land_ghosts();
    assert_eq!(pair.server.renewals.last(), Some(&inflight_core::scripts::STALE));
}
