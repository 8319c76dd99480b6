//! The revive service: when a popped message's invisibility ends unacknowledged, it is copied
//! to the group's POP retry topic (`%RETRY%{group}_{topic}`, queue 0) with its reconsume count
//! raised by one — or, once that count would pass the group's retry maximum, to the group's
//! dead-letter topic — and then finished in the POP table. Orderly pops are not copied: their
//! messages stay in flight and the next pop hands them out again in place; the service only
//! wakes the pops waiting on such a queue.
//!
//! A copy carries `TIDEMARK_POP_ORIGIN`. The table journals where each destination's queue
//! ended after the last copy it recorded; at start the service reads every destination queue
//! from there, and a copy of a message still in flight finishes it instead of being made again.
//! So a crash between storing a copy and journaling it cannot deliver the message twice.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::perm;
use tidemark_protocol::headers::pop_retry_topic_v1;
use tidemark_protocol::message::{property, DecodeOptions, MessageRecord};
use tidemark_remoting::now_ms;
use tidemark_store::NewMessage;
use tracing::{info, warn};

use super::{InFlight, QueueKey};
use crate::message_log::LogHandle;
use crate::message_log::{Origin, Stored};
use crate::metadata::dlq_topic;
use crate::metadata_change::TopicChanges;
use crate::parts::{Metadata, Progress};

/// With nothing due sooner, the service still looks this often.
const IDLE: Duration = Duration::from_millis(1_000);
/// Messages revived per pass at most, so a pass never holds the table for long.
const PER_PASS_MAX: usize = 2_000;
/// A copy that failed is tried again this much later.
const RETRY_AFTER_MS: i64 = 1_000;
/// Copies stored in one append at most, and the step after which waiting pops are woken.
const COPIES_PER_APPEND: usize = 64;
/// The POP retry topic's queue count (RocketMQ's `PopAckConstants.retryQueueNum`).
const RETRY_QUEUE_NUMS: i32 = 1;

/// What the revive service touches: the log it reads and copies into, the POP table, the
/// groups' retry limits and the topics it creates, the offsets a queue's POP floor moves, and
/// the door that makes a new retry or dead-letter topic durable and announced.
#[derive(Debug, Clone)]
pub struct Reviver {
    pub log: LogHandle,
    pub pop: Arc<super::PopTable>,
    pub metadata: Arc<Metadata>,
    pub progress: Arc<Progress>,
    pub topic_changes: TopicChanges,
    /// Stamped on the copies.
    pub store_host: std::net::SocketAddr,
}

impl Reviver {
    fn commit_floor(&self, key: &QueueKey) {
        super::commit_floor(&self.pop, &self.progress.offsets, &self.log.log(), key);
    }
}

/// The topic a group popped when it got a message from `topic` (its POP retry topic maps back
/// to the topic it retries).
pub fn popped_topic(group: &str, topic: &str) -> String {
    let v1 = format!("%RETRY%{group}_");
    let v2 = format!("%RETRY%{group}+");
    topic
        .strip_prefix(&v1)
        .or_else(|| topic.strip_prefix(&v2))
        .unwrap_or(topic)
        .to_owned()
}

fn origin_value(key: &QueueKey, offset: i64) -> String {
    format!("{} {} {} {}", key.group, key.topic, key.queue_id, offset)
}

fn parse_origin(value: &str) -> Option<(QueueKey, i64)> {
    let mut fields = value.split(' ');
    let group = fields.next()?;
    let topic = fields.next()?;
    let queue_id = fields.next()?.parse().ok()?;
    let offset = fields.next()?.parse().ok()?;
    fields
        .next()
        .is_none()
        .then(|| (QueueKey::new(group, topic, queue_id), offset))
}

fn read(
    reviver: &Reviver,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> Result<Option<MessageRecord>, String> {
    let entry = reviver
        .log
        .log()
        .queue_entry(topic, queue_id, offset)
        .map_err(|failure| failure.to_string())?;
    let Some(entry) = entry.filter(|entry| !entry.is_hole()) else {
        return Ok(None);
    };
    let Some(bytes) = reviver
        .log
        .log()
        .read_record(entry.commit_log_offset as u64)
        .map_err(|failure| failure.to_string())?
    else {
        return Ok(None);
    };
    MessageRecord::decode(&bytes, 0, DecodeOptions::default())
        .map(|(record, _)| Some(record))
        .map_err(|failure| failure.to_string())
}

/// The copy of `record` (popped from `key`) that goes back to the group, and whether it goes
/// to the dead-letter topic.
fn copy_of(
    reviver: &Reviver,
    key: &QueueKey,
    offset: i64,
    entry: &InFlight,
    record: &MessageRecord,
) -> (NewMessage, bool) {
    let popped = popped_topic(&key.group, &key.topic);
    let reconsume_times = record.reconsume_times.saturating_add(1);
    let dead = reconsume_times > reviver.metadata.groups.retry_max_times(&key.group);
    let mut properties = record.properties.clone();
    if properties.get(property::RETRY_TOPIC).is_none() {
        properties.insert(property::RETRY_TOPIC, popped.clone());
    }
    if properties.get(property::FIRST_POP_TIME).is_none() {
        properties.insert(property::FIRST_POP_TIME, entry.pop_time.to_string());
    }
    properties.remove(property::POP_CK);
    properties.insert(property::POP_ORIGIN, origin_value(key, offset));
    properties.insert(property::WAIT_STORE_MSG_OK, "false");
    let topic = if dead {
        dlq_topic(&key.group)
    } else if key.topic == popped {
        pop_retry_topic_v1(&key.group, &popped)
    } else {
        key.topic.clone()
    };
    (
        NewMessage {
            topic,
            queue_id: 0,
            flag: record.flag,
            sys_flag: record.sys_flag,
            born_timestamp: record.born_timestamp,
            born_host: record.born_host,
            store_host: reviver.store_host,
            reconsume_times,
            prepared_transaction_offset: 0,
            body: record.body.clone(),
            properties,
        },
        dead,
    )
}

/// A copy ready to be stored, and the in-flight message it finishes.
struct Copy {
    key: QueueKey,
    offset: i64,
    message: NewMessage,
    dead: bool,
}

/// Reads one expired message and builds its copy; `Ok(None)`: nothing left to copy (retention
/// removed it; it is finished here). `Err` leaves it in flight to be tried again.
fn prepare(
    reviver: &Reviver,
    key: &QueueKey,
    offset: i64,
    entry: &InFlight,
) -> Result<Option<Copy>, String> {
    let Some(record) = read(reviver, &key.topic, key.queue_id, offset)? else {
        let min = reviver.log.log().min_offset(&key.topic, key.queue_id);
        if offset < min {
            warn!(group = %key.group, topic = %key.topic, queue = key.queue_id, offset, "popped message expired after the store dropped it; finished without a copy");
            let _ = reviver.pop.finish_gone(key, offset);
            reviver.commit_floor(key);
            return Ok(None);
        }
        return Err("message not readable yet".to_owned());
    };
    let (message, dead) = copy_of(reviver, key, offset, entry, &record);
    let (_, created) = reviver.metadata.topics.ensure(
        &message.topic,
        if dead { 1 } else { RETRY_QUEUE_NUMS },
        perm::READ | perm::WRITE,
        now_ms(),
    );
    if created {
        reviver
            .topic_changes
            .publish_blocking()
            .map_err(|failure| format!("new topic {} not persisted: {failure}", message.topic))?;
    }
    Ok(Some(Copy {
        key: key.clone(),
        offset,
        message,
        dead,
    }))
}

/// Stores copies bound for one destination queue in one append (one sync), then finishes
/// their messages; on failure they stay in flight to be tried again.
fn store_copies(reviver: &Reviver, copies: Vec<Copy>, now: i64) -> usize {
    let Some(first) = copies.first() else {
        return 0;
    };
    let destination = first.message.topic.clone();
    let messages: Vec<NewMessage> = copies.iter().map(|copy| copy.message.clone()).collect();
    // Client traffic: the copies count in the destination's traffic (the metrics' retry and
    // dead-letter figures), wake the slave's replication and the destination's held pulls.
    let appended = match reviver
        .log
        .log()
        .append(&messages, Origin::Traffic)
        .and_then(Stored::durable_blocking)
    {
        Ok(appended) => appended,
        Err(failure) => {
            warn!(%failure, %destination, count = copies.len(), "expired popped messages not copied yet; will retry");
            for copy in &copies {
                reviver
                    .pop
                    .revive_failed(&copy.key, copy.offset, now + RETRY_AFTER_MS);
            }
            return 0;
        }
    };
    let mut floors: Vec<QueueKey> = Vec::new();
    for (copy, stored) in copies.iter().zip(&appended) {
        if copy.dead {
            info!(group = %copy.key.group, topic = %copy.key.topic, offset = copy.offset, reconsume_times = copy.message.reconsume_times, "popped message moved to the dead-letter topic");
        }
        let _ = reviver.pop.revived(
            &copy.key,
            copy.offset,
            &destination,
            stored.queue_offset + 1,
        );
        if !floors.contains(&copy.key) {
            floors.push(copy.key.clone());
        }
    }
    for key in &floors {
        reviver.commit_floor(key);
        reviver
            .log
            .held_pulls
            .notify_topic(&popped_topic(&key.group, &key.topic));
    }
    appended.len()
}

/// Revives everything due by `now`; returns how many messages were copied.
///
/// Works through the due messages earliest first, [`COPIES_PER_APPEND`] at a time, waking the
/// waiting pops after each step: a large expiry then hands its first messages out again while
/// the rest are still being copied, instead of after the whole pass.
pub fn revive_due(reviver: &Reviver, now: i64) -> usize {
    let mut taken = 0;
    let mut copied = 0;
    while taken < PER_PASS_MAX {
        let (expired, unblocked) = reviver
            .pop
            .take_expired(now, COPIES_PER_APPEND.min(PER_PASS_MAX - taken));
        if expired.is_empty() && unblocked.is_empty() {
            break;
        }
        taken += expired.len();
        for key in unblocked {
            reviver
                .log
                .held_pulls
                .notify_topic(&popped_topic(&key.group, &key.topic));
        }
        copied += revive_step(reviver, expired, now);
    }
    copied
}

fn revive_step(reviver: &Reviver, expired: Vec<(QueueKey, i64, InFlight)>, now: i64) -> usize {
    let mut by_destination: BTreeMap<String, Vec<Copy>> = BTreeMap::new();
    for (key, offset, entry) in expired {
        match prepare(reviver, &key, offset, &entry) {
            Ok(Some(copy)) => by_destination
                .entry(copy.message.topic.clone())
                .or_default()
                .push(copy),
            Ok(None) => {}
            Err(failure) => {
                warn!(%failure, group = %key.group, topic = %key.topic, offset, "expired popped message not copied yet; will retry");
                reviver
                    .pop
                    .revive_failed(&key, offset, now + RETRY_AFTER_MS);
            }
        }
    }
    by_destination
        .into_values()
        .map(|copies| store_copies(reviver, copies, now))
        .sum()
}

/// Copies the log holds whose messages are still in flight (stored, but the record that
/// finished the message was lost to a crash or a failover) finish their messages.
pub fn recover_copies(reviver: &Reviver) -> usize {
    let mut destinations: Vec<String> = Vec::new();
    for (group, topic) in reviver.pop.groups_in_flight() {
        let popped = popped_topic(&group, &topic);
        destinations.push(pop_retry_topic_v1(&group, &popped));
        destinations.push(dlq_topic(&group));
    }
    destinations.sort();
    destinations.dedup();
    let mut recovered = 0;
    for destination in destinations {
        let end = reviver.log.log().max_offset(&destination, 0);
        let from = reviver
            .pop
            .copies_end(&destination)
            .unwrap_or(0)
            .max(reviver.log.log().min_offset(&destination, 0));
        for offset in from..end {
            let record = match read(reviver, &destination, 0, offset) {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                Err(failure) => {
                    warn!(%failure, %destination, offset, "copy not readable while recovering POP progress");
                    continue;
                }
            };
            let Some((key, origin)) = record
                .properties
                .get(property::POP_ORIGIN)
                .and_then(parse_origin)
            else {
                continue;
            };
            if reviver.pop.is_in_flight(&key, origin) {
                let _ = reviver.pop.revived(&key, origin, &destination, offset + 1);
                recovered += 1;
            }
        }
    }
    if recovered > 0 {
        info!(
            recovered,
            "POP copies made just before a crash or an election were found; their messages are finished"
        );
    }
    recovered
}

/// The revive service of a master.
///
/// Whenever the broker becomes master — at start, and when a controller elects it — it first
/// finishes the messages whose copies its log already holds ([`recover_copies`]): a slave may
/// have received its old master's copy of an expired message but not the record that finished
/// it (the election came between the two), and copying that message again would hand it out
/// twice.
pub(crate) async fn run(reviver: Reviver, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let reviver = Arc::new(reviver);
    let mut was_master = false;
    loop {
        let pass = reviver.clone();
        let master = !reviver.log.role().is_slave();
        let became_master = master && !was_master;
        was_master = master;
        // Store reads and appends may block: keep them off the async workers.
        let _ = tokio::task::spawn_blocking(move || {
            if !master {
                return;
            }
            if became_master {
                recover_copies(&pass);
            }
            revive_due(&pass, now_ms());
            if let Err(failure) = pass.pop.compact_if_due() {
                warn!(%failure, "POP journal not compacted; will retry");
            }
        })
        .await;
        let wait = match reviver.pop.next_deadline() {
            Some(due) => {
                Duration::from_millis((due - now_ms()).clamp(0, IDLE.as_millis() as i64) as u64)
            }
            None => IDLE,
        };
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
            _ = reviver.pop.wake().notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_topics_map_back_to_the_popped_topic() {
        assert_eq!(popped_topic("G", "%RETRY%G_T"), "T");
        assert_eq!(popped_topic("G", "%RETRY%G+T"), "T");
        assert_eq!(popped_topic("G", "T"), "T");
        assert_eq!(popped_topic("G", "%RETRY%H_T"), "%RETRY%H_T");
    }

    #[test]
    fn origins_round_trip() {
        let key = QueueKey::new("G", "%RETRY%G_T", 0);
        assert_eq!(parse_origin(&origin_value(&key, 9)), Some((key, 9)));
        assert_eq!(parse_origin("G T x 1"), None);
        assert_eq!(parse_origin("G T 1 2 3"), None);
    }
}
