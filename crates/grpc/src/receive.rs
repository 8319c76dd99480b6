//! ReceiveMessage: a POP_MESSAGE for the broker's POP path (exact per-message state, long
//! polling), answered as RocketMQ's proxy streams it — a status frame, one frame per message,
//! then the delivery time. Push consumers ask for `auto_renew`: their messages stay invisible
//! until they are acknowledged or put back, as the proxy keeps them
//! ([`crate::renewals::Renewals`]).

use std::time::Duration;

use tidemark_protocol::body::MessageQueue;
use tidemark_protocol::headers::{
    parse_pop_info, ChangeInvisibleTimeResponseHeader, PopMessageRequestHeader,
    PopMessageResponseHeader, PopReceipt, PopSource,
};
use tidemark_protocol::message::{decode_records, DecodeOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::convert::{duration_ms, filter_of, full_name, incoming, timestamp};
use crate::gateway::{Caller, Gateway, FORWARD_TIMEOUT};
use crate::proto::{
    receive_message_response::Content, Code, ReceiveMessageRequest, ReceiveMessageResponse,
};
use crate::renewals::{Renewal, AUTO_RENEW_INVISIBLE_MS};
use crate::status::{from_response, ok, status};

/// Longest a receive is held, and the longest invisibility a client may ask for.
const LONG_POLLING_MAX_MS: i64 = 20_000;
const INVISIBLE_MAX_MS: i64 = 12 * 3_600_000;
const INVISIBLE_MIN_MS: i64 = 1_000;

fn frame(content: Content) -> ReceiveMessageResponse {
    ReceiveMessageResponse {
        content: Some(content),
    }
}

impl Gateway {
    /// The frames of one receive (collected: a pop answers all at once).
    pub async fn receive_message(
        &self,
        caller: &Caller,
        request: ReceiveMessageRequest,
        deadline: Option<Duration>,
    ) -> Vec<ReceiveMessageResponse> {
        let now = tidemark_remoting::now_ms();
        let fail = |code: Code, text: String| {
            vec![
                frame(Content::Status(status(code, text))),
                frame(Content::DeliveryTimestamp(timestamp(now))),
            ]
        };
        let group = full_name(request.group.as_ref());
        if group.is_empty() {
            return fail(
                Code::IllegalConsumerGroup,
                "the consumer group is empty".into(),
            );
        }
        let queue = request.message_queue.clone().unwrap_or_default();
        let topic_resource = queue.topic.clone().unwrap_or_default();
        let topic = full_name(Some(&topic_resource));
        if topic.is_empty() {
            return fail(Code::IllegalTopic, "the topic name is empty".into());
        }
        let invisible_ms = if request.auto_renew {
            AUTO_RENEW_INVISIBLE_MS
        } else {
            match request.invisible_duration.as_ref().map(duration_ms) {
                Some(ms) if (INVISIBLE_MIN_MS..=INVISIBLE_MAX_MS).contains(&ms) => ms,
                other => {
                    return fail(
                        Code::IllegalInvisibleTime,
                        format!("the invisible duration must be 1 s to 12 h, not {other:?} ms"),
                    )
                }
            }
        };
        let (exp_type, exp) = filter_of(request.filter_expression.as_ref());
        let mut poll_ms = request
            .long_polling_timeout
            .as_ref()
            .map_or(LONG_POLLING_MAX_MS, duration_ms)
            .clamp(0, LONG_POLLING_MAX_MS);
        if let Some(deadline) = deadline {
            // Answer before the client gives up: leave a second for the way back.
            poll_ms = poll_ms.min(deadline.as_millis() as i64 - 1_000).max(0);
        }
        let fifo = self.group_is_fifo(&group);
        // The broker the assignment named (each broker of the topic is assigned separately).
        let broker = queue
            .broker
            .as_ref()
            .map(|broker| broker.name.clone())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| self.cluster.own_name().to_owned());
        let header = PopMessageRequestHeader {
            consumer_group: group.clone(),
            topic: topic.clone(),
            // Every queue of the broker, FIFO or not, as Apache's proxy pops (its receive
            // selector takes the broker's acting queue, -1, whatever queue the request names):
            // a client polling one empty queue of a FIFO topic would otherwise wait out a long
            // poll while the others hold messages. Orderly pops still lock queue by queue.
            queue_id: -1,
            max_msg_nums: request.batch_size.clamp(1, 32),
            invisible_time: invisible_ms,
            poll_time: poll_ms,
            born_time: now,
            init_mode: 1,
            exp_type: Some(exp_type.to_owned()),
            exp: Some(exp),
            order: Some(fifo),
            attempt_id: request.attempt_id.clone(),
            broker_name: Some(broker.clone()),
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &broker,
                RemotingCommand::request_with_header(RequestCode::PopMessage, &header),
                FORWARD_TIMEOUT + Duration::from_millis(poll_ms.unsigned_abs()),
            )
            .await;
        let delivered_at = frame(Content::DeliveryTimestamp(timestamp(
            tidemark_remoting::now_ms(),
        )));
        match response.response_code() {
            ResponseCode::Success => {}
            ResponseCode::PollingTimeout | ResponseCode::PullNotFound => {
                let done = tidemark_remoting::now_ms();
                caller
                    .session
                    .activity
                    .received(&topic, done - now, Vec::new(), done);
                return vec![
                    frame(Content::Status(status(
                        Code::MessageNotFound,
                        "no new message",
                    ))),
                    delivered_at,
                ];
            }
            _ => {
                return vec![
                    frame(Content::Status(from_response(&response))),
                    delivered_at,
                ]
            }
        }
        let Ok(pop) = response.decode_header::<PopMessageResponseHeader>() else {
            return fail(Code::InternalServerError, "unreadable pop answer".into());
        };
        let records = match decode_records(&response.body, DecodeOptions::default()) {
            Ok(records) => records,
            Err(failure) => {
                return fail(
                    Code::InternalServerError,
                    format!("unreadable messages: {failure}"),
                )
            }
        };
        let starts = parse_pop_info(pop.start_offset_info.as_deref());
        let counts = parse_pop_info(pop.order_count_info.as_deref());
        let mut frames = vec![frame(Content::Status(ok()))];
        // The pop answer's per-queue entries are looked up by key for every message: one
        // buffer serves every lookup.
        let mut key = String::with_capacity(64);
        let mut handed_out = Vec::with_capacity(records.len());
        for record in records {
            let source = if record.topic == topic {
                PopSource::Topic
            } else if record.topic.contains('+') {
                PopSource::RetryV2
            } else {
                PopSource::RetryV1
            };
            let receipt = PopReceipt {
                start_offset: starts
                    .get(pop_info_key(
                        &mut key,
                        format_args!("{} {}", source.flag(), record.queue_id),
                    ))
                    .copied()
                    .unwrap_or(record.queue_offset),
                pop_time: pop.pop_time,
                invisible_time: pop.invisible_time,
                revive_qid: pop.revive_qid,
                source,
                broker_name: broker.clone(),
                queue_id: record.queue_id,
                queue_offset: record.queue_offset,
                commit_log_offset: Some(record.physical_offset),
            };
            handed_out.push((
                MessageQueue::new(
                    source.real_topic(&group, &topic),
                    broker.clone(),
                    record.queue_id,
                ),
                record.queue_offset,
                receipt.visible_again_at(),
            ));
            let handle = receipt.encode();
            let count = counts
                .get(pop_info_key(
                    &mut key,
                    format_args!(
                        "{} qo{}%{}",
                        source.flag(),
                        record.queue_id,
                        record.queue_offset
                    ),
                ))
                .copied();
            let renewed = request.auto_renew.then(|| handle.clone());
            let mut message = incoming(record, &topic_resource, Some(handle), Some(invisible_ms));
            if let Some(count) = count {
                if let Some(system) = message.system_properties.as_mut() {
                    system.delivery_attempt = Some((count as i32).saturating_add(1));
                }
            }
            if let Some(handle) = renewed {
                self.renewals.add(
                    handle,
                    Renewal {
                        client_id: caller.session.client_id.clone(),
                        group: group.clone(),
                        topic: topic.clone(),
                        current: receipt,
                        started_ms: now,
                    },
                );
            }
            frames.push(frame(Content::Message(message)));
        }
        frames.push(delivered_at);
        let done = tidemark_remoting::now_ms();
        caller
            .session
            .activity
            .received(&topic, done - now, handed_out, done);
        frames
    }

    /// A push consumer left with messages it was holding: they become visible again at once
    /// (RocketMQ's proxy releases them too) instead of when their invisibility would end.
    pub async fn release(&self, caller: &Caller, held: Vec<Renewal>) {
        for renewal in held {
            let header = renewal.change_request(0);
            let _ = self
                .invoke_at(
                    caller,
                    &renewal.topic,
                    &renewal.current.broker_name,
                    RemotingCommand::request_with_header(
                        RequestCode::ChangeMessageInvisibleTime,
                        &header,
                    ),
                    FORWARD_TIMEOUT,
                )
                .await;
        }
    }

    /// Keeps auto-renewed messages invisible: each one due gets another
    /// [`AUTO_RENEW_INVISIBLE_MS`].
    pub async fn renew_due(&self) {
        let now = tidemark_remoting::now_ms();
        for (handle, renewal) in self.renewals.due(now) {
            let Some(session) = self.sessions.get(&renewal.client_id) else {
                self.renewals.remove(&handle);
                continue;
            };
            let caller = Caller {
                session,
                // The gateway's own work for a client it already let in.
                principal: tidemark_acl::Principal::WhiteListed,
                authority: None,
            };
            let receipt = &renewal.current;
            let header = renewal.change_request(AUTO_RENEW_INVISIBLE_MS);
            let response = self
                .invoke_at(
                    &caller,
                    &renewal.topic,
                    &receipt.broker_name,
                    RemotingCommand::request_with_header(
                        RequestCode::ChangeMessageInvisibleTime,
                        &header,
                    ),
                    FORWARD_TIMEOUT,
                )
                .await;
            match response.decode_header::<ChangeInvisibleTimeResponseHeader>() {
                Ok(changed) if response.response_code() == ResponseCode::Success => {
                    let mut next = receipt.clone();
                    next.pop_time = changed.pop_time;
                    next.invisible_time = changed.invisible_time;
                    next.start_offset = next.queue_offset;
                    self.renewals.update(&handle, next);
                }
                _ => {
                    // Gone (acknowledged elsewhere, or its invisibility already ended).
                    self.renewals.remove(&handle);
                }
            }
        }
    }
}

/// `key` rewritten as `text`, for a lookup in a parsed pop info map.
fn pop_info_key<'a>(key: &'a mut String, text: std::fmt::Arguments<'_>) -> &'a str {
    use std::fmt::Write as _;
    key.clear();
    let _ = key.write_fmt(text);
    key
}
