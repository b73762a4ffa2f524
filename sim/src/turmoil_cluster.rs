//! The cluster scenario under turmoil: hosts `redis0`…`redis3` (three
//! primaries and a spare replica) serving one Redis Cluster, and the seed's
//! schedule of slot migrations and failovers.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::rng::Rng;
use crate::server::{promote_spare, serve_connection, start_migration, ServerState, PORT};

/// Hosts of the simulated cluster: three primaries and one spare.
pub const HOSTS: usize = 4;
pub const PRIMARIES: usize = 3;

pub fn host_name(host: usize) -> String {
    format!("redis{host}")
}

/// The addresses the cluster announces: host names, as `cluster-announce-hostname` would.
pub fn addresses() -> Vec<(String, u16)> {
    (0..HOSTS).map(|host| (host_name(host), PORT)).collect()
}

/// One cluster host's software. A restart keeps the data: it is the
/// cluster's (in sync on every replica), not the host's.
pub async fn cluster_host(state: ServerState, host: usize) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(serve_connection(stream, state.clone(), host));
    }
}

/// What the schedule has under way.
#[derive(Default)]
pub struct ClusterChaos {
    /// The migration's next step and when: keys moved, then finished.
    migration_step: Option<Duration>,
    /// How long each of its steps takes, in ms: one migration in four is
    /// slow (a slot of many keys, moved in batches), so that scripts of
    /// several keys meet `TRYAGAIN` for seconds, longer than a release's
    /// attempts would last if each refusal spent one.
    migration_pace: (u64, u64),
    /// A crashed primary and when its replica is promoted.
    failover: Option<(usize, Duration)>,
}

impl ClusterChaos {
    /// Starts a migration or a failover, if none of that kind is under way;
    /// returns what it did.
    pub fn inject(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        server: &ServerState,
        now: Duration,
        chaos: &mut Rng,
        failovers: bool,
    ) -> Option<String> {
        let cluster = server.cluster.as_ref().expect("a cluster scenario");
        let mut map = cluster.lock().unwrap();
        let primaries = map.primaries();
        if failovers && chaos.range(0, 3) == 0 {
            if self.failover.is_some() {
                return None;
            }
            let failed = primaries[chaos.range(0, primaries.len() as u64) as usize];
            let at = now + Duration::from_millis(chaos.range(300, 1500));
            drop(map);
            sim.crash(host_name(failed));
            self.failover = Some((failed, at));
            return Some(format!(
                "{} crashes; its replica takes over at {:.3}s",
                host_name(failed),
                at.as_secs_f64()
            ));
        }
        if map.migration.is_some() {
            return None;
        }
        let note = start_migration(&mut map, server.keys, chaos, host_name);
        self.migration_pace = if chaos.chance(1, 4) { (1000, 4000) } else { (20, 400) };
        let (fastest, slowest) = self.migration_pace;
        self.migration_step = Some(now + Duration::from_millis(chaos.range(fastest, slowest)));
        Some(note)
    }

    /// Advances what is under way at `now`; with `heal`, finishes it all.
    /// Returns notes for the trace.
    pub fn advance(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        server: &ServerState,
        now: Duration,
        chaos: &mut Rng,
        heal: bool,
    ) -> Vec<String> {
        let cluster = server.cluster.as_ref().expect("a cluster scenario");
        let mut notes = Vec::new();
        if let Some((failed, at)) = self.failover {
            if heal || now >= at {
                let spare = promote_spare(&mut cluster.lock().unwrap(), failed, HOSTS);
                // The old primary restarts as the new spare.
                sim.bounce(host_name(failed));
                self.failover = None;
                notes.push(format!(
                    "{} promoted in place of {}",
                    host_name(spare),
                    host_name(failed)
                ));
            }
        }
        if let Some(at) = self.migration_step {
            if heal || now >= at {
                let mut map = cluster.lock().unwrap();
                let migration = map.migration.as_mut().expect("a migration under way");
                if !migration.keys_moved && !heal {
                    migration.keys_moved = true;
                    let (fastest, slowest) = self.migration_pace;
                    self.migration_step = Some(now + Duration::from_millis(chaos.range(fastest, slowest)));
                    notes.push(format!("slot {} keys moved", migration.slot));
                } else {
                    let slot = migration.slot;
                    map.finish_migration();
                    self.migration_step = None;
                    notes.push(format!("slot {slot} now served by its new owner"));
                }
            }
        }
        notes
    }
}
