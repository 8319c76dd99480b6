//! Removing consume queues nobody needs (mqadmin `cleanExpiredCQ`, `cleanUnusedTopic`, and a
//! deleted topic's queues): the store destroys them; here is which ones.
//!
//! Never touched: the broker's own topics and those the store or the broker write internally
//! (delayed and timer messages, half transactions, POP's revive log, `rmq_sys_*`, LMQ).

use std::collections::BTreeSet;
use std::sync::Arc;

use tidemark_protocol::{RemotingCommand, ResponseCode};
use tracing::info;

use super::{error, success};
use crate::metadata::{SCHEDULE_TOPIC, TIMER_TOPIC};
use crate::state::BrokerState;

/// Topics whose queues no cleanup may destroy.
pub(crate) fn is_internal_topic(state: &BrokerState, topic: &str) -> bool {
    topic == SCHEDULE_TOPIC
        || topic == TIMER_TOPIC
        || topic.starts_with("RMQ_SYS_")
        || topic.starts_with("rmq_sys_")
        || topic.starts_with("%LMQ%")
        || state.metadata.topics.is_system(topic)
}

/// Destroys `topic`'s queues off the async threads; returns how many went.
pub(crate) async fn destroy_topic_queues(
    state: &Arc<BrokerState>,
    topic: &str,
) -> Result<usize, String> {
    let destroyed = state
        .log()
        .destroy_topic_queues(topic)
        .await
        .map_err(|failure| failure.to_string())?;
    if destroyed > 0 {
        state.stats.traffic.drop_topic(topic);
        state.stats.history.drop_topic(topic);
        // POP cursors past the new end would skip the topic's next messages.
        let journaled = state.pop.restart(|destroyed, _| destroyed == topic);
        state
            .pop
            .durable(journaled)
            .await
            .map_err(|failure| format!("POP cursors not reset: {failure}"))?;
    }
    Ok(destroyed)
}

/// CLEAN_EXPIRED_CONSUMEQUEUE (306): queues whose every record retention removed.
pub(super) async fn clean_expired_queues(state: &Arc<BrokerState>) -> RemotingCommand {
    let internal: BTreeSet<String> = state
        .log()
        .queue_topics()
        .into_iter()
        .filter(|topic| is_internal_topic(state, topic))
        .collect();
    let cleaned = state.log().destroy_expired_queues(internal).await;
    let destroyed: BTreeSet<(String, i32)> = match cleaned {
        Ok(destroyed) => destroyed.into_iter().collect(),
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("cleaning expired consume queues failed: {failure}"),
            )
        }
    };
    let journaled = state
        .pop
        .restart(|topic, queue_id| destroyed.contains(&(topic.to_owned(), queue_id)));
    if let Err(failure) = state.pop.durable(journaled).await {
        return error(
            ResponseCode::SystemError,
            format!("expired consume queues cleaned but POP cursors not reset: {failure}"),
        );
    }
    info!(
        queues = destroyed.len(),
        "expired consume queues cleaned on request"
    );
    success()
}

/// CLEAN_UNUSED_TOPIC (316): queues of topics this broker no longer has. A slave also keeps
/// every topic its master has now: its own list follows the master's only on a timer.
pub(super) async fn clean_unused_topics(state: &Arc<BrokerState>) -> RemotingCommand {
    // Queues first, then the topic lists: a topic made meanwhile is in the lists by the time
    // it has queues.
    let candidates = state.log().queue_topics();
    let mut keep: BTreeSet<String> = state.metadata.topics.names().into_iter().collect();
    if state.role.is_slave() {
        match crate::slave_sync::master_topic_names(&state.master, state.remoting_client_config())
            .await
        {
            Some(names) => keep.extend(names),
            None => {
                return error(
                    ResponseCode::SystemError,
                    "the master cannot be reached: a slave cleans unused topics only against \
                     its master's topic list",
                )
            }
        }
    }
    let mut cleaned = Vec::new();
    for topic in candidates {
        if keep.contains(&topic)
            || is_internal_topic(state, &topic)
            || state.metadata.topics.get(&topic).is_some()
        {
            continue;
        }
        match destroy_topic_queues(state, &topic).await {
            Ok(0) => {}
            Ok(_) => cleaned.push(topic),
            Err(failure) => {
                return error(
                    ResponseCode::SystemError,
                    format!("cleaning the queues of unused topic {topic} failed: {failure}"),
                )
            }
        }
    }
    info!(topics = ?cleaned, "unused topics' consume queues cleaned on request");
    success()
}
