//! Dead letters and retries an operator can act on. RocketMQ shows a group's dead-letter topic
//! like any other and leaves resending to hand-written tools; replaying retries means resetting
//! the whole `%RETRY%group`, every original topic mixed (apache/rocketmq#2604). Here:
//!
//! - TIDEMARK_GET_DEAD_LETTERS lists a group's dead letters with what an operator asks first:
//!   the original topic, keys, how often it was retried, when it was born and when it died.
//! - TIDEMARK_RESEND_DEAD_LETTERS sends some or all of them again: back to the group through
//!   its retry topic with a fresh count (only this group sees them), or to the original topic
//!   (every group subscribed to it does).
//! - TIDEMARK_REPLAY_RETRIES puts the retry messages of one original topic that the group
//!   already consumed back into its retry topic, leaving the others alone.
//!
//! A copy keeps the message's body, keys, tags and unique id (consumers see the same message
//! id); each resend or replay is a progress history entry naming what it copied.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use tidemark_protocol::body::{perm, DeadLetter, DeadLetterList, ResentMessage, ResentMessages};
use tidemark_protocol::headers::{
    GetDeadLettersRequestHeader, ReplayRetriesRequestHeader, ResendDeadLettersRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{encode_offset_msg_id, property, DecodeOptions, MessageRecord};
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{now_ms, Channel};
use tidemark_store::{GetStatus, NewMessage};

use super::append::store_error_response;
use super::{bad_header, error, success};
use crate::history::{Actor, ChangeKind};
use crate::metadata::{dlq_topic, retry_topic};
use crate::state::BrokerState;

const PAGE_DEFAULT: i32 = 32;
const PAGE_MAX: i32 = 1024;
/// One resend or replay copies at most this many messages; the answer lists what it copied.
const COPIES_MAX: usize = 10_000;
/// A listing looks at most this many dead letters (with a topic filter most may not match);
/// `nextOffset` says where to go on.
const LIST_SCAN_MAX: usize = 20_000;
/// Messages read from a queue per store call.
const READ_BATCH: usize = 256;
const READ_BYTES: usize = 16 << 20;

pub(super) fn list(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetDeadLettersRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let topic = dlq_topic(&header.consumer_group);
    let max_offset = state.log().max_offset(&topic, 0);
    let start = header
        .offset
        .unwrap_or(0)
        .max(state.log().min_offset(&topic, 0));
    let wanted = header.max_count.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX) as usize;
    let mut messages = Vec::new();
    let mut next_offset = start;
    let mut scanned = 0;
    let read = scan(state, &topic, 0, start, max_offset, |record| {
        next_offset = record.queue_offset + 1;
        scanned += 1;
        if original_topic(record).is_some_and(|original| {
            header
                .topic
                .as_deref()
                .is_none_or(|wanted| wanted == original)
        }) {
            messages.push(dead_letter(record));
        }
        messages.len() < wanted && scanned < LIST_SCAN_MAX
    });
    if let Err(reason) = read {
        return error(ResponseCode::SystemError, reason);
    }
    let body = DeadLetterList {
        broker_name: state.config.broker_name.clone(),
        messages,
        next_offset: if next_offset >= max_offset {
            max_offset
        } else {
            next_offset
        },
        max_offset,
    };
    success().with_body(body.to_json_bytes())
}

fn dead_letter(record: &MessageRecord) -> DeadLetter {
    let text = |name: &str| record.properties.get(name).unwrap_or_default().to_owned();
    DeadLetter {
        queue_offset: record.queue_offset,
        msg_id: encode_offset_msg_id(record.store_host, record.physical_offset),
        origin_msg_id: text(property::ORIGIN_MESSAGE_ID),
        uniq_key: text(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        original_topic: original_topic(record).unwrap_or_default().to_owned(),
        tags: text(property::TAGS),
        keys: text(property::KEYS),
        reconsume_times: record.reconsume_times,
        born_timestamp: record.born_timestamp,
        died_timestamp: record.store_timestamp,
        body_size: i32::try_from(record.body.len()).unwrap_or(i32::MAX),
    }
}

/// The topic a retry or dead-letter message was first sent to.
fn original_topic(record: &MessageRecord) -> Option<&str> {
    record.properties.get(property::RETRY_TOPIC)
}

/// Where copies go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destination {
    /// The group's retry topic, with a fresh count: only the group consumes them again.
    Retry,
    /// The original topic: every group subscribed to it consumes them.
    Origin,
}

pub(super) async fn resend(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ResendDeadLettersRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let destination = match header.destination.as_deref().unwrap_or("retry") {
        "retry" => Destination::Retry,
        "origin" => Destination::Origin,
        other => {
            return error(
                ResponseCode::SystemError,
                format!("destination {other:?} is neither `retry` nor `origin`"),
            )
        }
    };
    let chosen: Option<BTreeSet<i64>> = match header.offsets.as_deref().map(parse_offsets) {
        None => None,
        Some(Ok(offsets)) => Some(offsets),
        Some(Err(reason)) => return error(ResponseCode::SystemError, reason),
    };
    let group = &header.consumer_group;
    let source = dlq_topic(group);
    let (first, end) = match &chosen {
        Some(offsets) => (
            offsets.first().copied().unwrap_or(0),
            offsets.last().map_or(0, |last| last + 1),
        ),
        None => (
            state.log().min_offset(&source, 0),
            state.log().max_offset(&source, 0),
        ),
    };
    let mut picked = Vec::new();
    let read = scan(state, &source, 0, first, end, |record| {
        let named = chosen
            .as_ref()
            .is_none_or(|offsets| offsets.contains(&record.queue_offset));
        let of_topic = header
            .topic
            .as_deref()
            .is_none_or(|topic| original_topic(record) == Some(topic));
        if named && of_topic {
            picked.push(record.clone());
        }
        picked.len() < COPIES_MAX
    });
    if let Err(reason) = read {
        return error(ResponseCode::SystemError, reason);
    }
    if let Some(offsets) = &chosen {
        let found: BTreeSet<i64> = picked.iter().map(|record| record.queue_offset).collect();
        if let Some(missing) = offsets.difference(&found).next() {
            return error(
                ResponseCode::SystemError,
                format!("{source} has no message at offset {missing}"),
            );
        }
    }
    let copies = match copies(state, group, &picked, destination) {
        Ok(copies) => copies,
        Err(refusal) => return refusal,
    };
    let detail = match destination {
        Destination::Retry => format!("dead letters to {}", retry_topic(group)),
        Destination::Origin => "dead letters to their original topics".to_owned(),
    };
    let dry_run = header.dry_run.unwrap_or(false);
    store_and_record(
        state,
        Change {
            channel,
            request,
            group,
            kind: ChangeKind::Resend,
            detail,
            dry_run,
        },
        &picked,
        copies,
    )
    .await
}

pub(super) async fn replay_retries(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ReplayRetriesRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let group = &header.consumer_group;
    let source = retry_topic(group);
    let Some(config) = state.metadata.topics.get(&source) else {
        return error(
            ResponseCode::TopicNotExist,
            format!("{group} has no retry topic {source} on this broker"),
        );
    };
    let mut picked = Vec::new();
    for queue_id in 0..config.write_queue_nums.max(config.read_queue_nums) {
        // Only what the group consumed: what it has not reached it gets anyway.
        let Some(consumed) = state.progress.offsets.query(&source, group, queue_id) else {
            continue;
        };
        let first = match state
            .log()
            .offset_by_timestamp(&source, queue_id, header.since_ms)
        {
            Ok(first) => first,
            Err(failure) => return error(ResponseCode::SystemError, failure.to_string()),
        };
        let read = scan(state, &source, queue_id, first, consumed, |record| {
            if record.store_timestamp >= header.since_ms
                && original_topic(record) == Some(header.topic.as_str())
            {
                picked.push(record.clone());
            }
            picked.len() < COPIES_MAX
        });
        if let Err(reason) = read {
            return error(ResponseCode::SystemError, reason);
        }
    }
    let copies = match copies(state, group, &picked, Destination::Retry) {
        Ok(copies) => copies,
        Err(refusal) => return refusal,
    };
    let detail = format!(
        "retry messages of {} stored since {} back into {source}",
        header.topic, header.since_ms
    );
    let dry_run = header.dry_run.unwrap_or(false);
    store_and_record(
        state,
        Change {
            channel,
            request,
            group,
            kind: ChangeKind::RetryReplay,
            detail,
            dry_run,
        },
        &picked,
        copies,
    )
    .await
}

/// "3,5,9" → the offsets; anything else is an error naming the bad piece.
fn parse_offsets(text: &str) -> Result<BTreeSet<i64>, String> {
    let offsets = text
        .split(',')
        .map(str::trim)
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            piece
                .parse::<i64>()
                .ok()
                .filter(|offset| *offset >= 0)
                .ok_or_else(|| format!("{piece:?} is not a queue offset"))
        })
        .collect::<Result<BTreeSet<i64>, String>>()?;
    if offsets.is_empty() {
        return Err("no offsets given".to_owned());
    }
    if offsets.len() > COPIES_MAX {
        return Err(format!("more than {COPIES_MAX} offsets in one request"));
    }
    Ok(offsets)
}

/// Reads `topic`'s queue from `from` up to (not including) `until`, decoding each message and
/// handing it to `take` until it answers false. Messages retention removed are skipped.
fn scan(
    state: &BrokerState,
    topic: &str,
    queue_id: i32,
    from: i64,
    until: i64,
    mut take: impl FnMut(&MessageRecord) -> bool,
) -> Result<(), String> {
    let mut offset = from;
    while offset < until {
        let got = state
            .log()
            .get(topic, queue_id, offset, READ_BATCH, READ_BYTES, |_| true)
            .map_err(|failure| format!("{topic} not readable at {offset}: {failure}"))?;
        if got.next_begin_offset <= offset {
            return Ok(());
        }
        if got.status == GetStatus::Found {
            for raw in &got.messages {
                let (record, _) = MessageRecord::decode(raw, 0, DecodeOptions::default())
                    .map_err(|failure| format!("{topic} holds an unreadable message: {failure}"))?;
                if record.queue_offset >= until {
                    return Ok(());
                }
                if !take(&record) {
                    return Ok(());
                }
            }
        }
        offset = got.next_begin_offset;
    }
    Ok(())
}

/// The new messages for `picked`, bound for `destination`; refused when a topic they need
/// does not exist or the group cannot retry.
fn copies(
    state: &BrokerState,
    group: &str,
    picked: &[MessageRecord],
    destination: Destination,
) -> Result<Vec<NewMessage>, RemotingCommand> {
    let retry_queues = match destination {
        Destination::Retry => {
            let queues = state
                .metadata
                .groups
                .get(group)
                .map_or(1, |config| config.retry_queue_nums);
            if queues <= 0 {
                return Err(error(
                    ResponseCode::SystemError,
                    format!("{group} has no retry queues (retryQueueNums 0)"),
                ));
            }
            state.metadata.topics.ensure(
                &retry_topic(group),
                queues,
                perm::READ | perm::WRITE,
                now_ms(),
            );
            queues
        }
        Destination::Origin => 0,
    };
    // The store takes a batch for one queue: each destination topic gets one queue per request.
    let turn = now_ms().unsigned_abs() as usize;
    let mut copies = Vec::with_capacity(picked.len());
    for record in picked {
        let mut properties = record.properties.clone();
        for stale in [
            property::DELAY_TIME_LEVEL,
            property::REAL_TOPIC,
            property::REAL_QUEUE_ID,
        ] {
            properties.remove(stale);
        }
        let (topic, queues) = match destination {
            Destination::Retry => (retry_topic(group), retry_queues),
            Destination::Origin => {
                let Some(original) = original_topic(record).map(str::to_owned) else {
                    return Err(error(
                        ResponseCode::SystemError,
                        format!(
                            "the message at offset {} names no original topic",
                            record.queue_offset
                        ),
                    ));
                };
                let Some(config) = state.metadata.topics.get(&original) else {
                    return Err(error(
                        ResponseCode::TopicNotExist,
                        format!("original topic {original} does not exist on this broker"),
                    ));
                };
                properties.remove(property::RETRY_TOPIC);
                (original, config.write_queue_nums.max(1))
            }
        };
        copies.push(NewMessage {
            topic,
            queue_id: i32::try_from(turn % queues as usize).unwrap_or(0),
            flag: record.flag,
            sys_flag: record.sys_flag,
            born_timestamp: record.born_timestamp,
            born_host: record.born_host,
            store_host: state.store_host(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: record.body.clone(),
            properties,
        });
    }
    Ok(copies)
}

/// A resend or replay as the history records it.
struct Change<'a> {
    channel: &'a Channel,
    request: &'a RemotingCommand,
    group: &'a str,
    kind: ChangeKind,
    detail: String,
    /// Answer what would be sent, storing and recording nothing.
    dry_run: bool,
}

/// Stores `copies` of `picked`, records the change in the group's history, and answers what
/// was copied where.
async fn store_and_record(
    state: &BrokerState,
    change: Change<'_>,
    picked: &[MessageRecord],
    copies: Vec<NewMessage>,
) -> RemotingCommand {
    let mut body = ResentMessages {
        broker_name: state.config.broker_name.clone(),
        messages: Vec::new(),
        entry: -1,
    };
    if change.dry_run {
        body.messages = picked
            .iter()
            .zip(&copies)
            .map(|(record, copy)| ResentMessage {
                source_offset: record.queue_offset,
                msg_id: encode_offset_msg_id(record.store_host, record.physical_offset),
                topic: copy.topic.clone(),
            })
            .collect();
        return success().with_body(body.to_json_bytes());
    }
    if copies.is_empty() {
        return success().with_body(body.to_json_bytes());
    }
    if let Some(refusal) = super::refuse_writes_if_read_only(state) {
        return refusal;
    }
    let topics: Vec<String> = copies.iter().map(|copy| copy.topic.clone()).collect();
    let mut stored = Vec::with_capacity(copies.len());
    let mut failed = None;
    for batch in copies.chunk_by(|one, next| one.topic == next.topic) {
        match state.log().put(batch.to_vec()).await {
            Ok(appended) => stored.extend(appended),
            Err(failure) => {
                failed = Some(store_error_response(&failure));
                break;
            }
        }
    }
    if stored.is_empty() {
        if let Some(refusal) = failed {
            return refusal;
        }
    }
    let store_host = state.store_host();
    for ((record, topic), appended) in picked.iter().zip(topics).zip(&stored) {
        body.messages.push(ResentMessage {
            source_offset: record.queue_offset,
            msg_id: encode_offset_msg_id(
                store_host,
                i64::try_from(appended.commit_log_offset).unwrap_or(i64::MAX),
            ),
            topic,
        });
    }
    let Change {
        channel,
        request,
        group,
        kind,
        detail,
        ..
    } = change;
    let mut detail = format!("{detail}: {} from offsets ", body.messages.len());
    for (index, message) in body.messages.iter().enumerate() {
        if index == 20 {
            let _ = write!(detail, " and {} more", body.messages.len() - 20);
            break;
        }
        let separator = if index == 0 { "" } else { ", " };
        let _ = write!(detail, "{separator}{}", message.source_offset);
    }
    let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
    let (entry, recorded) = state.progress.history.record_with_detail(
        now_ms(),
        group,
        kind,
        request.code,
        actor,
        Vec::new(),
        detail,
    );
    body.entry = i64::try_from(entry).unwrap_or(i64::MAX);
    state
        .progress
        .history
        .count_resent(group, kind, body.messages.len() as u64);
    if let Err(failure) = state.progress.history.durable(recorded).await {
        return error(
            ResponseCode::SystemError,
            format!("messages stored but their history entry not durable: {failure}"),
        );
    }
    tracing::info!(%group, kind = kind.name(), messages = body.messages.len(), "messages sent again by an operator");
    if let Some(mut refusal) = failed {
        // What was stored before the failure stands, and is recorded; the answer says so.
        refusal.remark = Some(format!(
            "{} of {} messages sent again (history entry {}), then: {}",
            body.messages.len(),
            picked.len(),
            body.entry,
            refusal.remark.unwrap_or_default()
        ));
        return refusal;
    }
    success().with_body(body.to_json_bytes())
}

#[cfg(test)]
mod tests {
    use super::parse_offsets;

    #[test]
    fn offsets_are_a_comma_list_of_queue_offsets() {
        assert_eq!(
            parse_offsets("3, 5,9,5").map(|set| set.into_iter().collect::<Vec<_>>()),
            Ok(vec![3, 5, 9])
        );
        assert!(parse_offsets("").is_err());
        assert!(parse_offsets("3,x").is_err());
        assert!(parse_offsets("-1").is_err());
    }
}
