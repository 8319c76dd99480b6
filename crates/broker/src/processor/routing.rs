//! Where a message goes instead of its topic: a delay level's schedule queue, or its group's
//! dead-letter topic. Used by sends and by CONSUMER_SEND_MSG_BACK alike; both edit the
//! message's parsed properties, which the store encodes once.

use tidemark_protocol::body::perm;
use tidemark_protocol::message::property;
use tidemark_protocol::message::Properties;
use tidemark_remoting::now_ms;
use tidemark_store::{NewMessage, TIMER_TOPIC};

use crate::metadata::{dlq_topic, DLQ_QUEUE_NUMS};
use crate::state::BrokerState;

/// A RocketMQ 5 timer property that cannot be read as a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadTimer;

/// The delivery time a message's timer properties ask for, read as RocketMQ 5 reads them:
/// `TIMER_DELAY_SEC` (from now) first, then `TIMER_DELAY_MS` (from now), then
/// `TIMER_DELIVER_MS` (absolute). `Ok(None)`: not a timer message, or one already resolved
/// (`TIMER_OUT_MS` set: a delivered timer message sent again is not timed again).
pub(super) fn timer_deliver_ms(
    properties: &Properties,
    now_ms: i64,
) -> Result<Option<i64>, BadTimer> {
    if properties.get(property::TIMER_OUT_MS).is_some() {
        return Ok(None);
    }
    let number = |name: &str| -> Result<Option<i64>, BadTimer> {
        properties
            .get(name)
            .map(|value| value.trim().parse::<i64>().map_err(|_| BadTimer))
            .transpose()
    };
    if let Some(seconds) = number(property::TIMER_DELAY_SEC)? {
        return Ok(Some(now_ms.saturating_add(seconds.saturating_mul(1000))));
    }
    if let Some(millis) = number(property::TIMER_DELAY_MS)? {
        return Ok(Some(now_ms.saturating_add(millis)));
    }
    number(property::TIMER_DELIVER_MS)
}

/// Drops a message's timer properties (a delay level takes precedence over them).
pub(super) fn drop_timer(properties: &mut Properties) {
    for name in [
        property::TIMER_DELIVER_MS,
        property::TIMER_DELAY_SEC,
        property::TIMER_DELAY_MS,
    ] {
        properties.remove(name);
    }
}

/// Parks `message` in the timer topic until `deliver_ms`; the timer service stores it again in
/// its real topic and queue then.
pub(super) fn to_timer(message: &mut NewMessage, deliver_ms: i64) {
    let properties = &mut message.properties;
    properties.insert(property::TIMER_OUT_MS, deliver_ms.to_string());
    properties.insert(property::REAL_TOPIC, message.topic.clone());
    properties.insert(property::REAL_QUEUE_ID, message.queue_id.to_string());
    message.topic = TIMER_TOPIC.to_owned();
    message.queue_id = 0;
}

/// Sends `message` to `%DLQ%{group}` (one queue, readable and writable as RocketMQ 4.9.7 creates
/// it; releases before apache/rocketmq#2437 made it write-only), creating the topic on first use.
/// Returns whether it created the topic: the caller persists it before answering.
#[must_use]
pub(super) fn to_dead_letter(state: &BrokerState, message: &mut NewMessage, group: &str) -> bool {
    let topic = dlq_topic(group);
    let (_, created) =
        state
            .metadata
            .topics
            .ensure(&topic, DLQ_QUEUE_NUMS, perm::READ | perm::WRITE, now_ms());
    message.properties.remove(property::DELAY_TIME_LEVEL);
    message.topic = topic;
    message.queue_id = 0;
    created
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(pairs: &[(&str, &str)]) -> Properties {
        let mut properties = Properties::new();
        for (name, value) in pairs {
            properties.insert(*name, *value);
        }
        properties
    }

    #[test]
    fn timer_properties_are_read_in_rocketmqs_order() {
        let now = 1_000_000;
        assert_eq!(timer_deliver_ms(&properties(&[]), now), Ok(None));
        assert_eq!(
            timer_deliver_ms(&properties(&[("TIMER_DELIVER_MS", "1000500")]), now),
            Ok(Some(1_000_500))
        );
        assert_eq!(
            timer_deliver_ms(
                &properties(&[("TIMER_DELIVER_MS", "5"), ("TIMER_DELAY_MS", "250")]),
                now
            ),
            Ok(Some(1_000_250)),
            "a relative delay in ms beats an absolute time"
        );
        assert_eq!(
            timer_deliver_ms(
                &properties(&[("TIMER_DELAY_MS", "250"), ("TIMER_DELAY_SEC", "3")]),
                now
            ),
            Ok(Some(1_003_000)),
            "seconds beat milliseconds"
        );
        assert_eq!(
            timer_deliver_ms(&properties(&[("TIMER_DELAY_SEC", "soon")]), now),
            Err(BadTimer)
        );
        assert_eq!(
            timer_deliver_ms(
                &properties(&[("TIMER_DELAY_SEC", "3"), ("TIMER_OUT_MS", "7")]),
                now
            ),
            Ok(None),
            "a delivered timer message is not timed again"
        );
    }
}
