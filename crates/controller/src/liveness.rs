//! Which brokers are alive, from their heartbeats (BROKER_HEARTBEAT) to this controller. Not
//! replicated: brokers send heartbeats to every controller, and only the leader acts on what
//! its own table says. A broker is dead once its heartbeat is older than the timeout it
//! announced, or at once when its connection closes (a killed process resets it).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::replicas::Candidate;

/// What one heartbeat said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub cluster: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub address: String,
    pub timeout: Duration,
    pub epoch: i32,
    pub max_offset: i64,
    pub confirm_offset: i64,
    pub priority: i32,
    /// The connection it came on, so closing that connection ends the broker's life at once.
    pub channel_id: Option<u64>,
}

#[derive(Debug)]
struct Beat {
    heartbeat: Heartbeat,
    last: Instant,
    /// Set when its connection closed: dead regardless of `last`.
    disconnected: bool,
}

impl Beat {
    fn alive_at(&self, now: Instant) -> bool {
        !self.disconnected && now.saturating_duration_since(self.last) <= self.heartbeat.timeout
    }
}

/// The liveness table (`BrokerHeartbeatManager` in RocketMQ).
#[derive(Debug, Default)]
pub struct Liveness {
    beats: Mutex<HashMap<(String, i64), Beat>>,
}

impl Liveness {
    fn beats(&self) -> MutexGuard<'_, HashMap<(String, i64), Beat>> {
        self.beats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn beat(&self, heartbeat: Heartbeat, now: Instant) {
        let key = (heartbeat.broker_name.clone(), heartbeat.broker_id);
        self.beats().insert(
            key,
            Beat {
                heartbeat,
                last: now,
                disconnected: false,
            },
        );
    }

    pub fn is_alive(&self, broker_name: &str, broker_id: i64, now: Instant) -> bool {
        self.beats()
            .get(&(broker_name.to_owned(), broker_id))
            .is_some_and(|beat| beat.alive_at(now))
    }

    /// The live brokers of a set, as election candidates.
    pub fn candidates(&self, broker_name: &str, now: Instant) -> Vec<Candidate> {
        self.beats()
            .iter()
            .filter(|((name, _), beat)| name == broker_name && beat.alive_at(now))
            .map(|((_, id), beat)| Candidate {
                id: *id,
                epoch: beat.heartbeat.epoch,
                max_offset: beat.heartbeat.max_offset,
                priority: beat.heartbeat.priority,
            })
            .collect()
    }

    /// Marks the brokers whose heartbeats came on `channel_id` dead; returns their set names.
    pub fn channel_closed(&self, channel_id: u64) -> Vec<String> {
        let mut names = Vec::new();
        for ((name, _), beat) in self.beats().iter_mut() {
            if beat.heartbeat.channel_id == Some(channel_id) && !beat.disconnected {
                beat.disconnected = true;
                names.push(name.clone());
            }
        }
        names
    }

    /// Forgets brokers dead for longer than `keep`, so the table does not keep every broker
    /// ever seen.
    pub fn forget_older_than(&self, keep: Duration, now: Instant) {
        self.beats().retain(|_, beat| {
            now.saturating_duration_since(beat.last) <= beat.heartbeat.timeout + keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(id: i64, channel: u64) -> Heartbeat {
        Heartbeat {
            cluster: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: id,
            address: format!("10.0.0.{id}:10911"),
            timeout: Duration::from_secs(3),
            epoch: 2,
            max_offset: 100 * id,
            confirm_offset: 0,
            priority: 0,
            channel_id: Some(channel),
        }
    }

    #[test]
    fn a_broker_dies_when_its_heartbeats_stop_or_its_connection_closes() {
        let liveness = Liveness::default();
        let start = Instant::now();
        liveness.beat(heartbeat(1, 10), start);
        liveness.beat(heartbeat(2, 20), start);
        assert!(liveness.is_alive("broker-a", 1, start + Duration::from_secs(3)));
        assert!(!liveness.is_alive("broker-a", 1, start + Duration::from_millis(3001)));
        assert_eq!(liveness.channel_closed(20), vec!["broker-a".to_owned()]);
        assert!(!liveness.is_alive("broker-a", 2, start));
        let candidates = liveness.candidates("broker-a", start);
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].max_offset, 100);
        // A new heartbeat (a restarted broker, a new connection) brings it back.
        liveness.beat(heartbeat(2, 21), start + Duration::from_secs(1));
        assert!(liveness.is_alive("broker-a", 2, start + Duration::from_secs(1)));
        liveness.forget_older_than(Duration::from_secs(60), start + Duration::from_secs(70));
        assert!(
            liveness.candidates("broker-a", start).is_empty(),
            "forgotten, not merely dead"
        );
    }
}
