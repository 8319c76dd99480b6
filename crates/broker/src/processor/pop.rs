//! POP_MESSAGE (200050), PEEK_MESSAGE (200052), NOTIFICATION (200054) and POLLING_INFO
//! (200055): the broker hands out messages with an invisibility time and records each one as
//! in flight (`crate::pop`) before answering, so a crash after the answer cannot hand the same
//! message out again.

use crate::role::RoleNow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tidemark_protocol::body::{perm, SubscriptionGroupConfig, TopicConfig};
use tidemark_protocol::headers::{
    pop_retry_topic_v1, pop_retry_topic_v2, NotificationRequestHeader, NotificationResponseHeader,
    PeekMessageRequestHeader, PollingInfoRequestHeader, PollingInfoResponseHeader,
    PopMessageRequestHeader, PopMessageResponseHeader, PopSource, ORDERLY_REVIVE_QID,
};
use tidemark_protocol::message::QUEUE_OFFSET_POSITION;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_store::GetStatus;

use super::{bad_header, error};
use crate::filter::MessageFilter;
use crate::offsets::Journaled;
use crate::pop::{Popped, QueueKey};
use crate::state::BrokerState;

/// Messages one pop returns at most (RocketMQ refuses more than 32).
const POP_MESSAGES_MAX: i32 = 32;
const POP_BYTES_MAX: usize = 256 * 1024;
/// Longest a pop is held, whatever the client asks.
const POLL_MAX_MS: i64 = 60_000;
/// A request that arrives this long after its poll time already ran out (by the client's
/// clock) is answered POLLING_TIMEOUT at once, as RocketMQ does.
const LATE_BY_MS: i64 = 500;
/// One pop in this many reads the group's retry topic before the topic itself (RocketMQ:
/// 20 %), so retries are not starved by a busy topic.
const RETRY_FIRST_ONE_IN: u64 = 5;
/// The revive queue id a non-orderly receipt carries (Tidemark has no revive topic; any value
/// in RocketMQ's range will do).
const REVIVE_QID: i32 = 0;

fn pseudo_random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos() as u64);
    let mixed = COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ nanos;
    mixed.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 17
}

/// What a pop (or peek) asks for, checked.
struct PopAsk {
    group: String,
    topic: TopicConfig,
    queue_id: i32,
    max: usize,
    invisible_time: i64,
    init_mode: i32,
    orderly: bool,
    attempt_id: Option<String>,
    expression: MessageFilter,
}

/// The checks every POP-family request shares; `Err` is the answer.
fn check_topic_and_group(
    state: &BrokerState,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> Result<(TopicConfig, SubscriptionGroupConfig), RemotingCommand> {
    if state.role.is_slave() {
        return Err(error(
            ResponseCode::NoPermission,
            "POP is served by the master broker only",
        ));
    }
    if !perm::is_readable(state.live.get().broker_permission) {
        return Err(error(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] popping message is forbidden",
                state.config.broker_ip1
            ),
        ));
    }
    let Some(topic_config) = state.metadata.topics.get(topic) else {
        return Err(error(
            ResponseCode::TopicNotExist,
            format!("topic[{topic}] not exist, apply first please!"),
        ));
    };
    if !perm::is_readable(topic_config.perm) {
        return Err(error(
            ResponseCode::NoPermission,
            format!("the topic[{topic}] peeking message is forbidden"),
        ));
    }
    if queue_id < -1 || queue_id >= topic_config.read_queue_nums {
        return Err(error(
            ResponseCode::InvalidParameter,
            format!(
                "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]",
                topic_config.read_queue_nums
            ),
        ));
    }
    let Some((group_config, _)) = state.metadata.groups.find_or_create(
        group,
        state.live.get().auto_create_subscription_group,
        now_ms(),
    ) else {
        return Err(error(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{group}] does not exist"),
        ));
    };
    if !group_config.consume_enable {
        return Err(error(
            ResponseCode::NoPermission,
            format!("subscription group no permission, {group}"),
        ));
    }
    Ok((topic_config, group_config))
}

/// Where a group that never popped a queue starts (RocketMQ's `getInitOffset`): its committed
/// offset if it has one; else the first message for `initMode` 0 and for retry topics; else
/// the first message of a queue that still holds its first message, or the last message.
fn initial_offset(state: &BrokerState, key: &QueueKey, init_mode: i32, min: i64, max: i64) -> i64 {
    if let Some(committed) = state
        .progress
        .offsets
        .query(&key.topic, &key.group, key.queue_id)
    {
        return committed;
    }
    if init_mode == 0 || key.topic.starts_with("%RETRY%") || min <= 0 {
        min
    } else {
        (max - 1).max(0)
    }
}

/// What one pop collected over the queues it read.
#[derive(Default)]
struct Batch {
    messages: Vec<Bytes>,
    start_info: Vec<String>,
    offset_info: Vec<String>,
    order_info: Vec<String>,
    rest: i64,
    journaled: Vec<Journaled>,
    keys: Vec<QueueKey>,
}

impl Batch {
    fn remaining(&self, max: usize) -> usize {
        max.saturating_sub(self.messages.len())
    }
}

fn queue_offset_of(record: &Bytes) -> Option<i64> {
    record
        .get(QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8)
        .and_then(|bytes| bytes.try_into().ok())
        .map(i64::from_be_bytes)
}

/// Pops from one queue into `batch` (skipping a queue another pop is reading, an orderly queue
/// that is blocked, and a queue at its in-flight bound).
fn pop_queue(
    state: &BrokerState,
    ask: &PopAsk,
    topic: &str,
    queue_id: i32,
    source: PopSource,
    now: i64,
    batch: &mut Batch,
) {
    let remaining = batch.remaining(ask.max);
    if remaining == 0 {
        return;
    }
    let key = QueueKey::new(&ask.group, topic, queue_id);
    let Some(claim) = state.pop.claim(key.clone()) else {
        return;
    };
    let plan = claim.plan(now, ask.attempt_id.as_deref());
    let min = state.log().min_offset(topic, queue_id);
    let max = state.log().max_offset(topic, queue_id);
    if plan.blocked {
        batch.rest += (max - plan.next.unwrap_or(max)).max(0);
        return;
    }
    if plan.in_flight >= state.live.get().pop_in_flight_max_per_queue {
        return;
    }
    let start = plan
        .next
        .unwrap_or_else(|| initial_offset(state, &key, ask.init_mode, min, max))
        .clamp(min, max.max(min));
    let mut offsets = Vec::new();
    let mut messages = Vec::new();
    // Orderly: what became visible again goes out first, in order, before anything new.
    for offset in plan.redeliver.iter().filter(|offset| **offset >= min) {
        if offsets.len() >= remaining {
            break;
        }
        if let Ok(result) = state
            .log()
            .get(topic, queue_id, *offset, 1, POP_BYTES_MAX, |_| true)
        {
            if let Some(record) = result.messages.into_iter().next() {
                if queue_offset_of(&record) == Some(*offset) {
                    offsets.push(*offset);
                    messages.push(record);
                }
            }
        }
    }
    let mut next = start;
    // A retried attempt gets the same batch again, nothing new.
    let budget = if plan.same_attempt {
        0
    } else {
        remaining - offsets.len()
    };
    if budget > 0 && start < max {
        let read = state.log().get_matching(
            topic,
            queue_id,
            start,
            budget,
            POP_BYTES_MAX,
            |code| ask.expression.matches_code(code),
            |record| ask.expression.matches_record(record),
        );
        if let Ok(result) = read {
            match result.status {
                GetStatus::Found | GetStatus::NoMatchedMessage | GetStatus::MessageWasRemoving => {
                    next = result.next_begin_offset.max(start);
                }
                _ => {}
            }
            for record in result.messages {
                if let Some(offset) = queue_offset_of(&record) {
                    offsets.push(offset);
                    messages.push(record);
                }
            }
        }
    }
    if offsets.is_empty() && plan.next == Some(next) {
        batch.rest += (max - next).max(0);
        return;
    }
    if ask.orderly {
        if let Some(attempt) = ask.attempt_id.as_deref().filter(|a| !a.is_empty()) {
            claim.note_attempt(attempt);
        }
    }
    let journaled = claim.record(&Popped {
        next,
        pop_time: now,
        visible_at: now.saturating_add(ask.invisible_time),
        orderly: ask.orderly,
        resent: plan.same_attempt,
        offsets: offsets.clone(),
    });
    drop(claim);
    batch.journaled.push(journaled);
    batch.keys.push(key);
    batch.rest += (max - next).max(0);
    if offsets.is_empty() {
        return;
    }
    let flag = source.flag();
    let first = offsets.iter().copied().min().unwrap_or(start);
    batch.start_info.push(format!("{flag} {queue_id} {first}"));
    let listed: Vec<String> = offsets.iter().map(i64::to_string).collect();
    batch
        .offset_info
        .push(format!("{flag} {queue_id} {}", listed.join(",")));
    if ask.orderly {
        let mut least = u32::MAX;
        for offset in &offsets {
            // Deliveries before this one: the client shows it as the reconsume count.
            let count = state
                .pop
                .deliveries(&QueueKey::new(&ask.group, topic, queue_id), *offset)
                .saturating_sub(1);
            least = least.min(count);
            batch
                .order_info
                .push(format!("{flag} qo{queue_id}%{offset} {count}"));
        }
        batch.order_info.push(format!("{flag} {queue_id} {least}"));
    }
    batch.messages.extend(messages);
}

/// The group's POP retry topics that exist, with their source flags.
fn retry_topics(state: &BrokerState, group: &str, topic: &str) -> Vec<(String, PopSource)> {
    [
        (pop_retry_topic_v1(group, topic), PopSource::RetryV1),
        (pop_retry_topic_v2(group, topic), PopSource::RetryV2),
    ]
    .into_iter()
    .filter(|(name, _)| state.metadata.topics.get(name).is_some())
    .collect()
}

fn collect(state: &BrokerState, ask: &PopAsk, now: i64) -> Batch {
    let mut batch = Batch::default();
    let topic = ask.topic.topic_name.as_str();
    let queues: Vec<i32> = if ask.queue_id >= 0 {
        vec![ask.queue_id]
    } else {
        let count = ask.topic.read_queue_nums.max(0);
        let first = if count > 0 {
            (pseudo_random() % count as u64) as i32
        } else {
            0
        };
        (0..count).map(|index| (first + index) % count).collect()
    };
    let retries = if ask.orderly {
        Vec::new()
    } else {
        retry_topics(state, &ask.group, topic)
    };
    let retry_first = pseudo_random().is_multiple_of(RETRY_FIRST_ONE_IN);
    if retry_first {
        for (retry, source) in &retries {
            pop_queue(state, ask, retry, 0, *source, now, &mut batch);
        }
    }
    for queue_id in queues {
        pop_queue(
            state,
            ask,
            topic,
            queue_id,
            PopSource::Topic,
            now,
            &mut batch,
        );
    }
    if !retry_first {
        for (retry, source) in &retries {
            pop_queue(state, ask, retry, 0, *source, now, &mut batch);
        }
    }
    batch
}

/// Waits for everything the batch recorded to be durable, then mirrors the queues' floors
/// into consumer offsets; `Err` is the answer.
async fn settle(state: &BrokerState, batch: &mut Batch) -> Result<(), RemotingCommand> {
    for journaled in std::mem::take(&mut batch.journaled) {
        if let Err(failure) = state.pop.durable(journaled).await {
            return Err(error(
                ResponseCode::SystemError,
                format!("pop not recorded durably, nothing handed out: {failure}"),
            ));
        }
    }
    for key in &batch.keys {
        crate::pop::commit_floor(&state.pop, &state.progress.offsets, &state.log(), key);
    }
    Ok(())
}

/// Hands nothing out before the in-sync replicas hold the pop's records, as a commit or an
/// acknowledgement waits: a master deposed while paused runs the pops queued for it when it
/// resumes, and would hand out again what the group acknowledged on its successor. Nobody
/// confirms such a pop; its messages stay invisible here and come back in their time.
async fn confirmed(state: &BrokerState, made_as: RoleNow) -> Result<(), RemotingCommand> {
    let through = state.progress_stream.outbox().last_pushed();
    match crate::progress_stream::wait_replicated(
        state.log(),
        &state.progress_stream,
        through,
        made_as,
    )
    .await
    {
        ResponseCode::Success => {
            tracing::debug!(through, ?made_as, "pop confirmed");
            Ok(())
        }
        code => Err(error(
            code,
            "messages popped here are not yet confirmed by the in-sync replicas; none handed out",
        )),
    }
}

fn expression_of(
    state: &BrokerState,
    exp_type: Option<&str>,
    exp: Option<&str>,
) -> Result<MessageFilter, RemotingCommand> {
    state
        .selectors
        .filter(
            exp_type,
            exp.filter(|exp| !exp.is_empty()).unwrap_or("*"),
            state.live.get().enable_property_filter,
        )
        .map_err(|(code, remark)| error(code, remark))
}

pub(super) async fn pop(state: &Arc<BrokerState>, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<PopMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if !state.live.get().timer_wheel_enable {
        return error(
            ResponseCode::SystemError,
            "POP needs the timer (timer_wheel_enable is off)",
        );
    }
    if header.max_msg_nums < 1 || header.max_msg_nums > POP_MESSAGES_MAX {
        return error(
            ResponseCode::InvalidParameter,
            format!(
                "the max message count of a pop is 32, asked {}",
                header.max_msg_nums
            ),
        );
    }
    if header.invisible_time <= 0 {
        return error(
            ResponseCode::InvalidParameter,
            format!("invisible time {} is not positive", header.invisible_time),
        );
    }
    let made_as = state.role.now();
    let (topic, _) = match check_topic_and_group(
        state,
        &header.consumer_group,
        &header.topic,
        header.queue_id,
    ) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let expression = match expression_of(state, header.exp_type.as_deref(), header.exp.as_deref()) {
        Ok(expression) => expression,
        Err(answer) => return answer,
    };
    let orderly = header.order.unwrap_or(false);
    let ask = PopAsk {
        group: header.consumer_group.clone(),
        topic,
        queue_id: header.queue_id,
        max: header.max_msg_nums as usize,
        invisible_time: header.invisible_time,
        init_mode: header.init_mode,
        orderly,
        attempt_id: header
            .attempt_id
            .clone()
            .filter(|attempt| !attempt.is_empty()),
        expression,
    };
    let now = now_ms();
    let born = if header.born_time > 0 {
        header.born_time
    } else {
        now
    };
    let poll = header.poll_time.clamp(0, POLL_MAX_MS);
    if poll > 0 && now - born - poll > LATE_BY_MS {
        return error(
            ResponseCode::PollingTimeout,
            "the pop arrived after its poll time",
        );
    }
    let deadline = born.saturating_add(poll).min(now + POLL_MAX_MS);
    let mut suspended = None;
    loop {
        let arrival = (poll > 0).then(|| state.held_pulls.hold_topic(&header.topic));
        let now = now_ms();
        let mut batch = collect(state, &ask, now);
        if let Err(answer) = settle(state, &mut batch).await {
            return answer;
        }
        if !batch.messages.is_empty() {
            if let Err(answer) = confirmed(state, made_as).await {
                return answer;
            }
            return respond(state, &ask, now, batch);
        }
        let left = deadline - now_ms();
        if poll <= 0 || left <= 0 {
            return error(
                ResponseCode::PollingTimeout,
                "no new message in the poll time",
            );
        }
        if suspended.is_none() {
            let live = state.live.get();
            suspended = state.suspended_pops.suspend(
                &header.topic,
                &header.consumer_group,
                header.queue_id,
                live.pop_polling_size,
                live.max_pop_polling_size,
            );
            if suspended.is_none() {
                return error(
                    ResponseCode::PollingFull,
                    "too many pops wait on this queue",
                );
            }
        }
        if let Some(arrival) = arrival {
            let _ = tokio::time::timeout(Duration::from_millis(left as u64), arrival).await;
        }
    }
}

fn respond(state: &BrokerState, ask: &PopAsk, pop_time: i64, batch: Batch) -> RemotingCommand {
    let count = batch.messages.len();
    let mut body = BytesMut::new();
    for message in &batch.messages {
        body.extend_from_slice(message);
    }
    state
        .stats
        .messages_got_total
        .fetch_add(count as u64, Ordering::Relaxed);
    state.stats.traffic.delivered(
        &ask.topic.topic_name,
        &ask.group,
        count as u64,
        body.len() as u64,
    );
    let mut response = RemotingCommand::response(ResponseCode::Success, "FOUND".to_owned())
        .with_header(&PopMessageResponseHeader {
            pop_time,
            invisible_time: ask.invisible_time,
            revive_qid: if ask.orderly {
                ORDERLY_REVIVE_QID
            } else {
                REVIVE_QID
            },
            rest_num: batch.rest,
            start_offset_info: Some(batch.start_info.join(";")),
            msg_offset_info: Some(batch.offset_info.join(";")),
            order_count_info: ask.orderly.then(|| batch.order_info.join(";")),
        });
    response.body = body.freeze();
    response
}

pub(super) fn peek(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<PeekMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let (topic, _) = match check_topic_and_group(
        state,
        &header.consumer_group,
        &header.topic,
        header.queue_id,
    ) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let max = header.max_msg_nums.clamp(1, POP_MESSAGES_MAX) as usize;
    let queues: Vec<(String, i32)> = if header.queue_id >= 0 {
        vec![(header.topic.clone(), header.queue_id)]
    } else {
        (0..topic.read_queue_nums)
            .map(|queue_id| (header.topic.clone(), queue_id))
            .collect()
    };
    let mut messages: Vec<Bytes> = Vec::new();
    let mut rest = 0;
    for (topic, queue_id) in queues.into_iter().chain(
        retry_topics(state, &header.consumer_group, &header.topic)
            .into_iter()
            .map(|(retry, _)| (retry, 0)),
    ) {
        let key = QueueKey::new(&header.consumer_group, &topic, queue_id);
        let min = state.log().min_offset(&topic, queue_id);
        let max_offset = state.log().max_offset(&topic, queue_id);
        let next = state
            .pop
            .cursor(&key)
            .map(|(_, next)| next)
            .unwrap_or_else(|| initial_offset(state, &key, 0, min, max_offset))
            .clamp(min, max_offset.max(min));
        rest += (max_offset - next).max(0);
        let want = max.saturating_sub(messages.len());
        if want == 0 || next >= max_offset {
            continue;
        }
        if let Ok(result) = state
            .log()
            .get(&topic, queue_id, next, want, POP_BYTES_MAX, |_| true)
        {
            messages.extend(result.messages);
        }
    }
    if messages.is_empty() {
        return error(ResponseCode::PullNotFound, "no message to peek");
    }
    let mut body = BytesMut::new();
    for message in &messages {
        body.extend_from_slice(message);
    }
    let mut response = RemotingCommand::response(ResponseCode::Success, "FOUND".to_owned())
        .with_header(&PopMessageResponseHeader {
            pop_time: 0,
            invisible_time: 0,
            revive_qid: 0,
            rest_num: rest,
            start_offset_info: None,
            msg_offset_info: None,
            order_count_info: None,
        });
    response.body = body.freeze();
    response
}

/// Whether the group would get something if it popped now (new messages in a queue that is
/// not blocked, or in its retry topics).
fn has_message(
    state: &BrokerState,
    group: &str,
    topic: &TopicConfig,
    queue_id: i32,
    orderly: bool,
) -> bool {
    let now = now_ms();
    let mut queues: Vec<(String, i32)> = if queue_id >= 0 {
        vec![(topic.topic_name.clone(), queue_id)]
    } else {
        (0..topic.read_queue_nums)
            .map(|queue_id| (topic.topic_name.clone(), queue_id))
            .collect()
    };
    if !orderly {
        queues.extend(
            retry_topics(state, group, &topic.topic_name)
                .into_iter()
                .map(|(retry, _)| (retry, 0)),
        );
    }
    queues.into_iter().any(|(topic, queue_id)| {
        let key = QueueKey::new(group, &topic, queue_id);
        let max = state.log().max_offset(&topic, queue_id);
        match state.pop.cursor(&key) {
            Some((_, next)) if orderly => match state.pop.orderly_state(&key, now) {
                (true, _) => false,
                (false, true) => true,
                (false, false) => next < max,
            },
            Some((_, next)) => next < max,
            None => max > state.log().min_offset(&topic, queue_id),
        }
    })
}

pub(super) async fn notification(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<NotificationRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let (topic, _) = match check_topic_and_group(
        state,
        &header.consumer_group,
        &header.topic,
        header.queue_id,
    ) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let orderly = header.order.unwrap_or(false);
    let now = now_ms();
    let born = if header.born_time > 0 {
        header.born_time
    } else {
        now
    };
    let poll = header.poll_time.clamp(0, POLL_MAX_MS);
    let deadline = born.saturating_add(poll).min(now + POLL_MAX_MS);
    let answer = |has_msg: bool, polling_full: bool| {
        RemotingCommand::response(ResponseCode::Success, None).with_header(
            &NotificationResponseHeader {
                has_msg,
                polling_full: Some(polling_full),
            },
        )
    };
    let mut suspended = None;
    loop {
        let arrival = state.held_pulls.hold_topic(&header.topic);
        if has_message(
            state,
            &header.consumer_group,
            &topic,
            header.queue_id,
            orderly,
        ) {
            return answer(true, false);
        }
        let left = deadline - now_ms();
        if poll <= 0 || left <= 0 {
            return answer(false, false);
        }
        if suspended.is_none() {
            let live = state.live.get();
            suspended = state.suspended_pops.suspend(
                &header.topic,
                &header.consumer_group,
                header.queue_id,
                live.pop_polling_size,
                live.max_pop_polling_size,
            );
            if suspended.is_none() {
                return answer(false, true);
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(left as u64), arrival).await;
    }
}

pub(super) fn polling_info(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<PollingInfoRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if let Err(answer) = check_topic_and_group(
        state,
        &header.consumer_group,
        &header.topic,
        header.queue_id,
    ) {
        return answer;
    }
    let count = state
        .suspended_pops
        .count(&header.topic, &header.consumer_group, header.queue_id);
    RemotingCommand::response(ResponseCode::Success, None).with_header(&PollingInfoResponseHeader {
        polling_num: count.min(i32::MAX as usize) as i32,
    })
}
