//! A consumer group's progress per queue, as operators see it (TIDEMARK_GET_CONSUMER_PROGRESS,
//! `tidemark admin consumer-progress`, the metrics endpoint): committed and broker offsets, the
//! age of the oldest unconsumed message, acknowledged ranges, a stuck marker, POP in-flight.

use tidemark_protocol::body::QueueProgressView;

use crate::state::BrokerState;

/// Every readable queue of `topic` (or of every topic the group has progress on) for `group`.
pub fn group_progress(
    state: &BrokerState,
    group: &str,
    topic: Option<&str>,
    now: i64,
) -> Vec<QueueProgressView> {
    let topics = match topic {
        Some(topic) => vec![topic.to_owned()],
        None => state.progress.offsets.topics_of_group(group),
    };
    let threshold = state.live.get().consumer_stuck_threshold_ms as i64;
    let mut queues = Vec::new();
    for topic in topics {
        let Some(config) = state.metadata.topics.get(&topic) else {
            continue;
        };
        let popped = state.pop.views(group, Some(&topic));
        for queue_id in 0..config.read_queue_nums {
            let broker_offset = state.log().max_offset(&topic, queue_id).max(0);
            let progress = state
                .progress
                .offsets
                .queue_progress(&topic, group, queue_id);
            let pop = popped.iter().find(|view| view.queue_id == queue_id);
            let consumer_offset = progress.as_ref().map_or(0, |p| p.offset.max(0));
            let time_lag_ms = if consumer_offset < broker_offset {
                state
                    .log()
                    .store_timestamp_at(&topic, queue_id, consumer_offset)
                    .ok()
                    .flatten()
                    .map_or(0, |stored| (now - stored).max(0))
            } else {
                0
            };
            let stuck_since = progress
                .as_ref()
                .and_then(|p| p.stuck_since(now, threshold, state.boot_timestamp_ms));
            queues.push(QueueProgressView {
                topic: topic.clone(),
                broker_name: state.config.broker_name.clone(),
                queue_id,
                broker_offset,
                consumer_offset,
                // A popping group's finished offsets above its floor are the acknowledged holes.
                acked_above: match pop {
                    Some(pop) => pop.acked_holes,
                    None => progress.as_ref().map_or(0, |p| p.acked.count()),
                },
                acked_ranges: progress
                    .as_ref()
                    .map(|p| p.acked.encode(p.offset))
                    .unwrap_or_default(),
                time_lag_ms,
                stuck_offset: if stuck_since.is_some() {
                    consumer_offset
                } else {
                    -1
                },
                stuck_since_ms: stuck_since.unwrap_or(0),
                pop_in_flight: pop.map(|pop| pop.in_flight as i64),
                pop_visible_again_at_ms: pop.and_then(|pop| pop.oldest_visible_at),
                pop_next_offset: pop.map(|pop| pop.next),
            });
        }
    }
    queues
}
