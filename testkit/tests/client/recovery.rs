//! Restarts, failovers and flushes: the loss is found at the handshake, held
//! leases are written back before anything new is admitted, new grants are
//! held for the recovery window, replicas are refused, fencing tokens rise.

use super::*;
use inflight_core::event::{DataLoss, Reassertion};
use inflight_core::Recovery;

fn losses(pair: &Pair) -> Vec<(DataLoss, usize)> {
    pair.events
        .iter()
        .filter_map(|event| match event {
            Event::DataLoss { loss, held, .. } => Some((*loss, *held)),
            _ => None,
        })
        .collect()
}

fn reassertions(pair: &Pair) -> Vec<Reassertion> {
    pair.events
        .iter()
        .filter_map(|event| match event {
            Event::Reasserted { outcome, .. } => Some(*outcome),
            _ => None,
        })
        .collect()
}

/// A grant's fencing token (0 without one), or `None` if not granted.
fn granted(pair: &mut Pair, limit: u32) -> Option<u64> {
    let request = pair.acquire("t", "s", limit);
    pair.exchange();
    match pair.outcome(request) {
        Some(Outcome::Granted(lease)) => Some(lease.fencing_token().unwrap_or(0)),
        _ => None,
    }
}

#[test]
fn an_empty_restart_is_found_and_held_leases_are_back_before_anything_new_is_granted() {
    let mut pair = Pair::connected(config(), start());
    assert!(granted(&mut pair, 2).is_some());
    assert!(granted(&mut pair, 2).is_some());
    assert_eq!(pair.client.held_leases(), 2);
    pair.restart_server(false);
    assert!(pair.server.all_live_leases().is_empty(), "the restart lost them");
    // An acquire made while the connection is down waits for the handshake,
    // which writes back first: it is then held, not granted over the limit.
    let during = pair.acquire("t", "s", 2);
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::Emptied, 2)]);
    assert_eq!(reassertions(&pair), vec![Reassertion::Restored; 2]);
    assert_eq!(pair.server.all_live_leases().len(), 2, "both leases are back");
    assert_eq!(
        pair.outcome(during),
        Some(&Outcome::Unavailable(Unavailable::Recovering))
    );
    let stats = pair.client.stats();
    assert_eq!(
        (stats.data_losses, stats.leases_restored, stats.over_admissions),
        (1, 2, 0)
    );
    // After the window the limit is what it was: full.
    pair.advance(config().default_recovery_window() + ms(1)); // Redis drops a key once its clock is past the expiry, not at it
    let after = pair.acquire("t", "s", 2);
    pair.exchange();
    assert_eq!(pair.outcome(after), Some(&Outcome::Exceeded));
}

#[test]
fn a_client_that_never_saw_the_loss_is_held_by_the_server() {
    let mut first = Pair::connected(config(), start());
    assert!(granted(&mut first, 1).is_some());
    first.restart_server(false);
    first.exchange();
    assert_eq!(losses(&first), vec![(DataLoss::Emptied, 1)]);
    // A replica that starts now knows nothing of the loss; the hold key its
    // acquire script checks stops it.
    let mut late = Pair::with_entropy(config(), first.now, [9; 16]);
    late.server = std::mem::take(&mut first.server);
    late.accept();
    late.exchange();
    assert!(losses(&late).is_empty(), "nothing to compare with");
    let refused = late.acquire("t", "other", 5);
    late.exchange();
    assert_eq!(
        late.outcome(refused),
        Some(&Outcome::Unavailable(Unavailable::Recovering))
    );
    late.advance(config().default_recovery_window() + ms(1)); // Redis drops a key once its clock is past the expiry, not at it
    assert!(granted(&mut late, 5).is_some(), "the hold ends with the window");
}

#[test]
fn a_restart_with_its_data_is_reported_and_finds_the_leases_intact() {
    let mut pair = Pair::connected(config(), start());
    assert!(granted(&mut pair, 2).is_some());
    pair.restart_server(true);
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::Restarted, 1)]);
    assert_eq!(reassertions(&pair), vec![Reassertion::Survived]);
    assert_eq!(pair.server.all_live_leases().len(), 1);
}

#[test]
fn a_flush_is_found_at_the_next_handshake() {
    let mut pair = Pair::connected(config(), start());
    assert!(granted(&mut pair, 2).is_some());
    pair.server.flush_all();
    pair.cut();
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::Emptied, 1)]);
    assert_eq!(pair.server.all_live_leases().len(), 1);
}

#[test]
fn released_and_lost_leases_are_not_written_back() {
    let mut pair = Pair::connected(config(), start());
    let kept = pair.acquire("t", "s", 5);
    let _gone = pair.acquire("t", "s", 5);
    pair.exchange();
    assert!(matches!(pair.outcome(kept), Some(Outcome::Granted(_))));
    pair.release(1);
    pair.exchange();
    assert_eq!(pair.client.held_leases(), 1);
    pair.restart_server(false);
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::Emptied, 1)]);
    assert_eq!(pair.server.all_live_leases().len(), 1);
}

#[test]
fn over_admission_during_the_loss_is_detected_when_written_back() {
    let mut pair = Pair::connected(config(), start());
    assert!(granted(&mut pair, 1).is_some());
    pair.restart_server(false);
    // Before this client is back, another (new) one takes the only slot.
    let mut other = Pair::with_entropy(config(), pair.now, [9; 16]);
    other.server = std::mem::take(&mut pair.server);
    other.accept();
    other.exchange();
    assert!(granted(&mut other, 1).is_some());
    pair.server = std::mem::take(&mut other.server);
    pair.exchange();
    assert_eq!(reassertions(&pair), vec![Reassertion::OverLimit]);
    assert_eq!(pair.client.stats().over_admissions, 1);
}

#[test]
fn with_recovery_off_the_loss_is_only_reported() {
    let config = Config {
        recovery: Recovery::Off,
        ..config()
    };
    let mut pair = Pair::connected(config.clone(), start());
    assert!(granted(&mut pair, 1).is_some());
    pair.restart_server(false);
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::Emptied, 0)]);
    assert!(pair.server.all_live_leases().is_empty());
    assert!(granted(&mut pair, 1).is_some(), "over-admitted: nothing held it back");
}

#[test]
fn a_replica_is_refused_at_the_handshake() {
    let mut pair = Pair::new(config(), start());
    pair.server.replica = true;
    pair.accept();
    pair.exchange();
    assert!(pair
        .events
        .iter()
        .any(|event| matches!(event, Event::ConnectFailed(_, ConnectionError::Replica(role)) if role == "slave")));
    assert_eq!(
        inflight_testkit::connection(&pair.client),
        None,
        "backing off, not ready"
    );
}

#[test]
fn fencing_tokens_rise_across_grants_renewals_and_an_empty_restart() {
    // Without asking for tokens, a grant has none.
    let mut pair = Pair::connected(config(), start());
    assert_eq!(granted(&mut pair, 5), Some(0));
    let fenced = Config {
        fencing_tokens: true,
        ..config()
    };
    let mut pair = Pair::connected(fenced, start());
    let first = granted(&mut pair, 5).unwrap();
    assert!(first > 0);
    let second = granted(&mut pair, 5).unwrap();
    assert!(second > first);
    let renewal = pair.renew(0);
    pair.exchange();
    match pair.events.iter().rev().find_map(|e| match e {
        Event::Renewed(r, Renewal::Extended(lease)) if *r == renewal => lease.fencing_token(),
        _ => None,
    }) {
        Some(token) => assert_eq!(token, first, "a renewal keeps the grant's token"),
        None => panic!("renewal not extended"),
    }
    pair.restart_server(false);
    pair.exchange();
    pair.advance(config().default_recovery_window() + ms(1)); // Redis drops a key once its clock is past the expiry, not at it
    let third = granted(&mut pair, 5).unwrap();
    assert!(third > second, "above every earlier token: {third} after {second}");
}

#[test]
fn a_failover_to_a_replica_that_missed_the_last_grant_is_found_and_repaired() {
    let mut pair = Pair::connected(config(), start());
    assert!(granted(&mut pair, 2).is_some());
    let replica = pair.server.clone(); // in sync up to here
    assert!(granted(&mut pair, 2).is_some()); // never replicated
    pair.restart_server(false);
    pair.server = inflight_testkit::model::RedisModel::promoted_from(&replica, replica.now_ms + 5, |_, _| true);
    pair.exchange();
    assert_eq!(losses(&pair), vec![(DataLoss::FailedOver, 2)]);
    let mut found = reassertions(&pair);
    found.sort_by_key(|r| *r as u8);
    assert_eq!(found, vec![Reassertion::Survived, Reassertion::Restored]);
    assert_eq!(pair.server.all_live_leases().len(), 2);
}

fn waiting_for(replicas: u32) -> Config {
    Config {
        replica_acks: Some(inflight_core::ReplicaAcks {
            replicas,
            timeout: Duration::from_millis(50),
        }),
        ..config()
    }
}

#[test]
fn with_replica_acks_a_grant_is_delivered_only_once_wait_confirms_it() {
    let mut pair = Pair::connected(waiting_for(1), start());
    pair.server.replicas = 1;
    let burst = pair.acquire_burst("t", "s", 5, 3);
    pair.to_server(usize::MAX); // the batch and its WAIT
    pair.to_client(usize::MAX);
    assert!(burst
        .iter()
        .all(|r| matches!(pair.outcome(*r), Some(Outcome::Granted(_)))));
    assert_eq!(pair.client.held_leases(), 3);
}

#[test]
fn with_replica_acks_a_wait_that_falls_short_releases_the_grants() {
    let mut pair = Pair::connected(waiting_for(2), start());
    pair.server.replicas = 1;
    let burst = pair.acquire_burst("t", "s", 5, 2);
    pair.exchange();
    for request in burst {
        assert_eq!(
            pair.outcome(request),
            Some(&Outcome::Unavailable(Unavailable::NotReplicated {
                acked: 1,
                wanted: 2
            }))
        );
    }
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty(), "released again");
    assert_eq!(pair.client.stats().not_replicated, 2);
    pair.assert_no_leak();
}

#[test]
fn replica_acks_must_be_possible_within_the_acquire_timeout() {
    let mut config = waiting_for(1);
    config.replica_acks = Some(inflight_core::ReplicaAcks {
        replicas: 1,
        timeout: config.acquire_timeout,
    });
    assert!(config.validate().is_err());
    config.replica_acks = Some(inflight_core::ReplicaAcks {
        replicas: 0,
        timeout: Duration::from_millis(5),
    });
    assert!(config.validate().is_err());
}

#[test]
fn a_cluster_replica_reached_without_cluster_mode_says_cluster_mode_first() {
    let mut pair = Pair::new(config(), start());
    pair.server.replica = true;
    pair.server.cluster_enabled = true;
    pair.accept();
    pair.exchange();
    assert!(pair
        .events
        .iter()
        .any(|event| matches!(event, Event::ConnectFailed(_, ConnectionError::ClusterMode))));
}
