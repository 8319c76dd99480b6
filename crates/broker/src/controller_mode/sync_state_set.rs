//! A controller-mode master's SyncStateSet: which replicas its sends wait for, and which set it
//! asks the controllers to hold (RocketMQ's `AutoSwitchHAService` rules, with one more step for
//! a replica that joins, see [`decide`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use tidemark_protocol::body::SyncStateSet;
use tidemark_protocol::headers::AlterSyncStateSetRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{now_ms, RemotingClient};
use tracing::info;

use crate::config::BrokerRole;
use crate::ha_progress::Replica;
use crate::role::RoleNow;
use crate::state::BrokerState;

/// How long a slave may go without catching up before the master drops it from the
/// SyncStateSet (RocketMQ's `haMaxTimeSlaveNotCatchup`).
const SLAVE_NOT_CATCHING_UP: Duration = Duration::from_secs(15);

/// This broker as master: its controller-given id and the epoch it was elected in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Term {
    pub own_id: i64,
    pub master_epoch: i32,
}

/// What the master sees of its log and its replicas at one round.
struct Seen<'a> {
    own_id: i64,
    /// The SyncStateSet the controllers hold.
    current: &'a BTreeSet<i64>,
    progress: &'a HashMap<i64, Replica>,
    /// This log's end.
    written: u64,
    /// Where this master's epoch begins in the log.
    epoch_start: i64,
    now: Instant,
}

/// What one round decides.
#[derive(Debug, PartialEq, Eq)]
struct Round {
    /// The replicas sends wait for from now on, this master included.
    counted: BTreeSet<i64>,
    /// The set to ask the controllers for.
    desired: BTreeSet<i64>,
    /// Replicas counted before this round that still join, each with the offset it must reach.
    joining: BTreeMap<i64, u64>,
    /// Replicas counted for the first time: they join from the log end read once they are.
    fresh: Vec<i64>,
}

/// One round of the rules. A member stays while it caught up within
/// [`SLAVE_NOT_CATCHING_UP`], is connected and reports no less than it once had (a slave that
/// cut its log may lack acknowledged records: it leaves at once). A replica joins once it has
/// everything the in-sync replicas have (the confirm offset, this log's end when the master is
/// alone) and reached this master's epoch — in two steps. First it is only counted: sends wait
/// for it from then on. A send acknowledged just before may still be missing from it, so it is
/// asked for only once it has the log end read after it was counted (`joining`); otherwise the
/// controllers could elect it without a record this master acknowledged alone.
fn decide(seen: &Seen<'_>, joining: &BTreeMap<i64, u64>) -> Round {
    let keeps = |id: &i64| {
        seen.progress.get(id).is_some_and(|replica| {
            replica.connected
                && !replica.fell_back()
                && seen.now.saturating_duration_since(replica.caught_up_at) <= SLAVE_NOT_CATCHING_UP
        })
    };
    let mut desired: BTreeSet<i64> = BTreeSet::from([seen.own_id]);
    desired.extend(
        seen.current
            .iter()
            .copied()
            .filter(|id| *id != seen.own_id && keeps(id)),
    );
    let confirm = desired
        .iter()
        .filter(|id| **id != seen.own_id)
        .filter_map(|id| seen.progress.get(id).map(|replica| replica.offset))
        .min()
        .unwrap_or(seen.written);
    let mut still_joining = BTreeMap::new();
    let mut fresh = Vec::new();
    for (id, replica) in seen.progress {
        if *id == seen.own_id || desired.contains(id) {
            continue;
        }
        let in_epoch = i64::try_from(replica.offset).unwrap_or(i64::MAX) >= seen.epoch_start;
        match joining.get(id) {
            // Counted already, so nothing is acknowledged without it any more: what it must
            // reach is fixed, however far the log has grown since.
            Some(since) if keeps(id) && in_epoch => {
                if replica.offset >= *since {
                    desired.insert(*id);
                }
                still_joining.insert(*id, *since);
            }
            Some(_) => {}
            None if replica.connected
                && !replica.fell_back()
                && replica.offset >= confirm
                && in_epoch =>
            {
                fresh.push(*id);
            }
            None => {}
        }
    }
    fresh.sort_unstable();
    // Until the controllers confirm a change, the union of both sets counts (RocketMQ's
    // synchronizing SyncStateSet): a replica is waited for before they may elect it, and
    // until they no longer can.
    let mut counted: BTreeSet<i64> = seen.current.union(&desired).copied().collect();
    counted.extend(still_joining.keys().copied());
    counted.extend(fresh.iter().copied());
    Round {
        counted,
        desired,
        joining: still_joining,
        fresh,
    }
}

/// Master: applies a round of [`decide`] — what sends wait for, the read fence, the role — and
/// asks the controllers for the set when it differs from theirs.
pub(super) async fn maintain_sync_state_set(
    state: &BrokerState,
    client: &RemotingClient,
    leader: &str,
    term: Term,
    current: &SyncStateSet,
    joining: &mut BTreeMap<i64, u64>,
) -> Result<(), String> {
    let (_, written, _) = state.log().positions();
    let epoch_start = state
        .log()
        .epochs()
        .spans(i64::try_from(written).unwrap_or(i64::MAX))
        .last()
        .map_or(0, |span| span.start_offset);
    let progress = state.ha.replica_progress();
    let round = decide(
        &Seen {
            own_id: term.own_id,
            current: &current.sync_state_set,
            progress: &progress,
            written,
            epoch_start,
            now: Instant::now(),
        },
        joining,
    );
    // A send is acknowledged once the in-sync replicas have it: with none but this master, at
    // once (RocketMQ's allAckInSyncStateSet).
    let role = if round.counted.len() > 1 {
        BrokerRole::SyncMaster
    } else {
        BrokerRole::AsyncMaster
    };
    state.ha.set_in_sync(
        term.own_id,
        round
            .counted
            .iter()
            .copied()
            .filter(|id| *id != term.own_id)
            .collect(),
    );
    state.publish_read_fence();
    if state.role.now().role != role {
        state.role.set(RoleNow { role, broker_id: 0 });
    }
    *joining = round.joining;
    if !round.fresh.is_empty() {
        if let Some(counted_at) = counted_at(state).await {
            joining.extend(round.fresh.iter().map(|id| (*id, counted_at)));
        }
    }
    if round.desired == current.sync_state_set {
        return Ok(());
    }
    ask_controllers(state, client, leader, term, current, round.desired).await
}

/// How long a round waits for the progress stream to take what was pushed before a replica
/// was counted; longer, and the replica is counted afresh next round.
const PUBLISHED_WAIT: Duration = Duration::from_millis(500);

/// The log end a replica counted just now must reach before it is asked for. Read after the
/// role is set: every send that found no replica to wait for had its records in the log
/// before this, and a commit answered without waiting has its record in the progress stream's
/// outbox — its end in the log is waited for here. `None` when the stream did not publish in
/// time.
async fn counted_at(state: &BrokerState) -> Option<u64> {
    let (_, written, _) = state.log().positions();
    let outbox = state.progress_stream.outbox();
    match outbox
        .wait_published(outbox.last_pushed(), PUBLISHED_WAIT)
        .await?
    {
        Some(published_end) => Some(written.max(published_end)),
        // Dropped: it never reaches the log (this broker is master no more).
        None => Some(written),
    }
}

async fn ask_controllers(
    state: &BrokerState,
    client: &RemotingClient,
    leader: &str,
    term: Term,
    current: &SyncStateSet,
    desired: BTreeSet<i64>,
) -> Result<(), String> {
    let request = RemotingCommand::request_with_header(
        RequestCode::ControllerAlterSyncStateSet,
        &AlterSyncStateSetRequestHeader {
            broker_name: state.config.broker_name.clone(),
            master_broker_id: term.own_id,
            master_epoch: term.master_epoch,
            invoke_time: Some(now_ms()),
        },
    )
    .with_body(
        SyncStateSet {
            sync_state_set: desired.clone(),
            sync_state_set_epoch: current.sync_state_set_epoch,
        }
        .to_json_bytes(),
    );
    let answer = super::call(client, leader, request).await?;
    if answer.response_code() == ResponseCode::Success {
        info!(?desired, "SyncStateSet changed");
        Ok(())
    } else {
        Err(format!(
            "SyncStateSet {desired:?} refused: {}",
            answer.remark.unwrap_or_default()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha_progress::HaState;

    /// Progress as the master's replication records it: each replica reporting `offset` of a
    /// log that ends at `log_end`.
    fn progress(reports: &[(i64, u64)], log_end: u64) -> HashMap<i64, Replica> {
        let ha = HaState::default();
        for (id, offset) in reports {
            ha.replica_reported(*id, *offset, log_end);
            ha.replica_reported(*id, *offset, log_end);
        }
        ha.replica_progress()
    }

    fn seen<'a>(
        current: &'a BTreeSet<i64>,
        progress: &'a HashMap<i64, Replica>,
        written: u64,
    ) -> Seen<'a> {
        Seen {
            own_id: 1,
            current,
            progress,
            written,
            epoch_start: 0,
            now: Instant::now(),
        }
    }

    #[test]
    fn a_caught_up_replica_is_counted_first_and_asked_for_once_it_has_what_was_acknowledged() {
        let alone = BTreeSet::from([1]);
        // Replica 2 has the whole log as the round reads it: it is counted, not yet asked for.
        let caught_up = progress(&[(2, 500)], 500);
        let first = decide(&seen(&alone, &caught_up, 500), &BTreeMap::new());
        assert_eq!(first.counted, BTreeSet::from([1, 2]));
        assert_eq!(first.desired, alone);
        assert_eq!(first.fresh, vec![2]);
        // Sends acknowledged alone took the log to 540 before 2 was counted: 2 at 520 may lack
        // one of them, so the controllers are not asked yet, though 2 stays counted.
        let joining = BTreeMap::from([(2, 540)]);
        let short = progress(&[(2, 520)], 520);
        let second = decide(&seen(&alone, &short, 520), &joining);
        assert_eq!(second.counted, BTreeSet::from([1, 2]));
        assert_eq!(second.desired, alone);
        assert_eq!(second.joining, joining);
        assert!(second.fresh.is_empty());
        // With 540 it has everything acknowledged without it: now it is asked for, though the
        // log has grown since (what came after waited for it).
        let enough = progress(&[(2, 540)], 560);
        let third = decide(&seen(&alone, &enough, 560), &joining);
        assert_eq!(third.desired, BTreeSet::from([1, 2]));
        assert_eq!(third.counted, BTreeSet::from([1, 2]));
        // Gone before it was asked for: no longer counted.
        let mut gone = progress(&[(2, 530)], 560);
        gone.get_mut(&2).expect("reported").connected = false;
        let fourth = decide(&seen(&alone, &gone, 560), &joining);
        assert_eq!(fourth.counted, alone);
        assert!(fourth.joining.is_empty());
    }

    #[test]
    fn a_member_that_cut_its_log_leaves_but_stays_counted_until_the_controllers_agree() {
        let current = BTreeSet::from([1, 2, 3]);
        let ha = HaState::default();
        ha.replica_reported(2, 100, 100);
        ha.replica_reported(3, 100, 100);
        ha.replica_reported(3, 60, 100);
        let round = decide(
            &seen(&current, &ha.replica_progress(), 100),
            &BTreeMap::new(),
        );
        assert_eq!(round.desired, BTreeSet::from([1, 2]));
        assert_eq!(round.counted, current);
        // Fallen back, it does not rejoin in the same round either.
        assert!(round.fresh.is_empty());
    }

    #[test]
    fn a_replica_behind_the_in_sync_ones_or_this_epoch_does_not_join() {
        let current = BTreeSet::from([1, 2]);
        let reports = progress(&[(2, 300), (3, 250)], 300);
        let behind = decide(&seen(&current, &reports, 300), &BTreeMap::new());
        assert_eq!(behind.counted, current);
        assert!(behind.fresh.is_empty());
        let caught_up = progress(&[(2, 300), (3, 300)], 300);
        let mut before_epoch = seen(&current, &caught_up, 300);
        before_epoch.epoch_start = 400;
        let round = decide(&before_epoch, &BTreeMap::new());
        assert!(round.fresh.is_empty());
        assert_eq!(round.counted, current);
    }
}
