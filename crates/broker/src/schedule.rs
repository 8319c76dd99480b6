//! Delay levels (RocketMQ's `ScheduleMessageService`): a message sent with `DELAY` = L waits in
//! queue L−1 of the schedule topic; its queue entry carries the time it is due. This service
//! walks each level's queue in order and, once a message is due, stores it again in its real
//! topic and queue. Progress per level is `delayOffset.json` (`{"offsetTable":{level:offset}}`),
//! persisted like consumer offsets, so a pending message survives a restart and a graceful
//! restart delivers it exactly once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::message::{property, DecodeOptions, MessageRecord};
use tidemark_remoting::now_ms;
use tidemark_store::{NewMessage, SCHEDULE_TOPIC};
use tracing::warn;

use crate::message_log::LogHandle;
use crate::parts::Progress;

/// Parks `message` in the schedule queue of `level` (clamped to the configured levels); the
/// schedule service stores it again in its real topic and queue once due.
/// `levels`: how many are configured (`BrokerState::delay_level_count`).
pub(crate) fn to_schedule(levels: i32, message: &mut NewMessage, level: i32) {
    let level = level.clamp(1, levels.max(1));
    let properties = &mut message.properties;
    properties.insert(property::REAL_TOPIC, message.topic.clone());
    properties.insert(property::REAL_QUEUE_ID, message.queue_id.to_string());
    properties.insert(property::DELAY_TIME_LEVEL, level.to_string());
    message.topic = SCHEDULE_TOPIC.to_owned();
    message.queue_id = level - 1;
}

/// How often due messages are looked for (RocketMQ rescans every 100 ms).
const SCAN_INTERVAL: Duration = Duration::from_millis(100);
/// Messages moved per level per pass, so one busy level cannot starve the others.
const DELIVERIES_PER_PASS_MAX: usize = 256;

/// The message to store in the real topic once `record` is due; `None` when the record does
/// not say where it belongs (it is then skipped).
pub fn redelivery(record: &MessageRecord) -> Option<NewMessage> {
    to_real_topic(record, |properties| {
        properties.remove(property::DELAY_TIME_LEVEL);
    })
}

/// A message parked in a system topic (a delay level's queue, the timer topic) as it goes back
/// to `REAL_TOPIC` / `REAL_QID`, its properties edited by `edit`; `None` when the record does
/// not say where it belongs.
pub fn to_real_topic(
    record: &MessageRecord,
    edit: impl FnOnce(&mut tidemark_protocol::message::Properties),
) -> Option<NewMessage> {
    let topic = record.properties.get(property::REAL_TOPIC)?.to_owned();
    let queue_id = record
        .properties
        .get(property::REAL_QUEUE_ID)?
        .parse()
        .ok()?;
    let mut properties = record.properties.clone();
    edit(&mut properties);
    properties.insert(property::WAIT_STORE_MSG_OK, "false");
    Some(NewMessage {
        topic,
        queue_id,
        flag: record.flag,
        sys_flag: record.sys_flag,
        born_timestamp: record.born_timestamp,
        born_host: record.born_host,
        store_host: record.store_host,
        reconsume_times: record.reconsume_times,
        prepared_transaction_offset: record.prepared_transaction_offset,
        body: record.body.clone(),
        properties,
    })
}

/// Moves every due message of each of `levels`; returns how many were delivered.
pub fn deliver_due(log: &LogHandle, progress: &Progress, levels: i32, now: i64) -> usize {
    let mut delivered = 0;
    for level in 1..=levels {
        let queue_id = level - 1;
        for _ in 0..DELIVERIES_PER_PASS_MAX {
            let stored = progress.delay_offsets.get(level);
            let offset = stored.max(log.log().min_offset(SCHEDULE_TOPIC, queue_id));
            let entry = match log.log().queue_entry(SCHEDULE_TOPIC, queue_id, offset) {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                Err(failure) => {
                    warn!(%failure, level, "schedule queue unreadable; will retry");
                    break;
                }
            };
            if !entry.is_hole() && entry.tags_code > now {
                break;
            }
            let message = if entry.is_hole() {
                None
            } else {
                match log.log().read_record(entry.commit_log_offset as u64) {
                    Ok(Some(bytes)) => MessageRecord::decode(&bytes, 0, DecodeOptions::default())
                        .ok()
                        .and_then(|(record, _)| redelivery(&record)),
                    Ok(None) => None,
                    Err(failure) => {
                        warn!(%failure, level, "delayed message unreadable; will retry");
                        break;
                    }
                }
            };
            if let Some(message) = message {
                if let Err(failure) = log.log().deliver_blocking(&message) {
                    warn!(%failure, level, "delayed message not delivered; will retry");
                    break;
                }
                delivered += 1;
            } else {
                warn!(
                    level,
                    offset, "delayed message without a real topic, or unreadable; skipped"
                );
            }
            progress.delay_offsets.set(level, offset + 1);
        }
    }
    delivered
}

/// The delay levels' service of a master: every [`SCAN_INTERVAL`], the due messages of each of
/// `levels` (the configured `message_delay_level`, fixed at start) go to their real topics.
pub(crate) async fn run(
    log: LogHandle,
    progress: Arc<Progress>,
    levels: i32,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(SCAN_INTERVAL) => {}
        }
        if log.role().is_slave() {
            // A slave's log is the master's copy: delivering is the master's job.
            continue;
        }
        let (pass, progress) = (log.clone(), progress.clone());
        // Appends may wait for fsync (SYNC_FLUSH): keep them off the async workers.
        let _ =
            tokio::task::spawn_blocking(move || deliver_due(&pass, &progress, levels, now_ms()))
                .await;
    }
}
