use std::time::Duration;

use crate::address::Endpoint;
use crate::client::error_class::Redirect;
use crate::client::network::Network;
use crate::client::reconnect::Backoff;
use crate::client::redirects::Next;
use crate::config::Servers;
use crate::event::Stats;

fn seed() -> Network {
    let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1), [0; 16]);
    let endpoint = Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port: 7000,
    };
    let seeds = Servers::Cluster {
        seeds: vec![endpoint],
        tls: false,
    };
    Network::new(&seeds, backoff)
}

#[test]
fn a_request_follows_five_redirects_in_a_row_and_gives_up_at_the_sixth() {
    let mut net = seed();
    let (mut redirects, mut stats) = (0, Stats::default());
    for round in 1..=5 {
        let (next, refresh) = net.redirected(
            0,
            Redirect::Moved,
            "MOVED 3999 127.0.0.1:7001",
            &mut redirects,
            &mut stats,
        );
        assert_eq!((next, refresh), (Next::Route { ask: None }, true), "round {round}");
    }
    assert_eq!(net.nodes.len(), 2, "the node a MOVED names is added once");
    let (next, _) = net.redirected(0, Redirect::Ask, "ASK 3999 127.0.0.1:7001", &mut redirects, &mut stats);
    assert_eq!(next, Next::GiveUp);
    assert_eq!((stats.moved, stats.asked), (5, 0));
}

#[test]
fn a_wait_starts_the_count_again_and_an_ask_goes_once_to_its_target() {
    let mut net = seed();
    let (mut redirects, mut stats) = (4, Stats::default());
    let (next, refresh) = net.redirected(0, Redirect::TryAgain, "TRYAGAIN x", &mut redirects, &mut stats);
    assert_eq!((next, refresh, redirects, stats.try_again), (Next::Later, false, 0, 1));
    let (next, refresh) = net.redirected(0, Redirect::ReadOnly, "READONLY no", &mut redirects, &mut stats);
    assert_eq!((next, refresh), (Next::Later, true));
    let (next, refresh) = net.redirected(0, Redirect::Ask, "ASK 12 127.0.0.1:7002", &mut redirects, &mut stats);
    assert_eq!((next, refresh, stats.asked), (Next::Route { ask: Some(1) }, false, 1));
    let (next, _) = net.redirected(0, Redirect::Moved, "MOVED nowhere", &mut redirects, &mut stats);
    assert_eq!(next, Next::GiveUp, "a redirect that names no node");
}
