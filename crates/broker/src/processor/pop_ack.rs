//! ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME (200053):
//! a popped message is finished, or stays invisible longer. Each is answered once it is
//! durable in the POP journal, so what the client saw survives a crash, and on a SYNC master
//! once its in-sync replicas have it (`progress_stream`), so it survives a failover too — one
//! that changed nothing included (`progress_stream::Since`).
//!
//! Answers follow RocketMQ: an acknowledgement of a message that is no longer in flight (already
//! finished, or visible again) is SUCCESS and does nothing. Where Tidemark differs: an earlier
//! receipt of an unordered delivery still finishes it (`PopTable::finish`); changing the
//! invisibility of a message that is not in flight does nothing either (RocketMQ would schedule
//! one more delivery of it); and a slave takes none of these requests.

use crate::progress_stream::Since;
use crate::role::RoleNow;
use std::sync::Arc;

use tidemark_protocol::body::BatchAckMessageRequestBody;
use tidemark_protocol::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    PopReceipt, PopSource,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;

use super::{bad_header, error, success};
use crate::offsets::Journaled;
use crate::pop::revive::popped_topic;
use crate::pop::{Finish, QueueKey};
use crate::state::BrokerState;

/// A slave's POP state is its master's, replaced by what the master streams: a change there
/// would be answered for nothing. It comes from a client still talking to a master deposed
/// under it (the request may even have waited in the socket through the election), which must
/// not hear SUCCESS while the new master hands the message out again.
fn refuse_on_slave(made_as: RoleNow) -> Option<RemotingCommand> {
    made_as.is_slave().then(|| {
        error(
            ResponseCode::SlaveNotAvailable,
            "this broker is a slave: POP acknowledgements and invisibility changes go to the master",
        )
    })
}

/// Checks the queue and offset an acknowledgement or change names; `Err` is the answer.
/// `past_end_ok`: an offset equal to the queue's end is accepted (RocketMQ's ack checks
/// `offset > max`, its change `offset >= max`).
fn check_queue(
    state: &BrokerState,
    topic: &str,
    queue_id: i32,
    offset: i64,
    past_end_ok: bool,
) -> Result<(), RemotingCommand> {
    let Some(config) = state.metadata.topics.get(topic) else {
        return Err(error(
            ResponseCode::TopicNotExist,
            format!("topic[{topic}] not exist, apply first please!"),
        ));
    };
    if queue_id < 0 || queue_id >= config.read_queue_nums {
        return Err(error(
            ResponseCode::MessageIllegal,
            format!(
                "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]",
                config.read_queue_nums
            ),
        ));
    }
    let min = state.log().min_offset(topic, queue_id);
    // Written, not visible: a read fence that moved back must not fail the ack of a message
    // popped while it was visible.
    let max = state.log().written_max_offset(topic, queue_id);
    if offset < min || offset > max || (offset == max && !past_end_ok) {
        return Err(error(
            ResponseCode::NoMessage,
            format!("offset {offset} is outside the queue [{min}, {max})"),
        ));
    }
    Ok(())
}

/// Finishes one message; `Err` is the answer.
fn finish_one(
    state: &BrokerState,
    key: &QueueKey,
    offset: i64,
    receipt_pop_time: i64,
    orderly: bool,
) -> Result<Journaled, RemotingCommand> {
    let (outcome, journaled) = state.pop.finish(key, offset, receipt_pop_time);
    tracing::debug!(group = %key.group, topic = %key.topic, queue = key.queue_id, offset, receipt_pop_time, ?outcome, "acknowledgement");
    match outcome {
        Finish::Finished(_) if orderly => state
            .held_pulls
            .notify_topic(&popped_topic(&key.group, &key.topic)),
        Finish::NotInFlight if orderly => {
            let beyond = state.pop.cursor(key).is_none_or(|(_, next)| offset >= next);
            if beyond {
                return Err(error(
                    ResponseCode::MessageIllegal,
                    format!("offset {offset} was never popped in order from this queue"),
                ));
            }
        }
        _ => {}
    }
    Ok(journaled)
}

async fn settle(
    state: &BrokerState,
    (made_as, since): (RoleNow, Since),
    journaled: Journaled,
    key: &QueueKey,
) -> Option<RemotingCommand> {
    if let Err(failure) = state.pop.durable(journaled).await {
        return Some(error(
            ResponseCode::SystemError,
            format!("acknowledgement not recorded durably: {failure}"),
        ));
    }
    crate::pop::commit_floor(&state.pop, &state.progress.offsets, &state.log(), key);
    // On a SYNC master, acknowledged once the in-sync replicas have it, like a commit; one
    // that finished nothing waits for a barrier (a deposed master must not answer it).
    let through = since.through(&state.progress_stream, made_as);
    match crate::progress_stream::wait_replicated(
        state.log(),
        &state.progress_stream,
        through,
        made_as,
    )
    .await
    {
        ResponseCode::Success => {
            tracing::debug!(through, ?made_as, "acknowledgement confirmed");
            None
        }
        code => Some(error(
            code,
            "acknowledgement recorded here, not yet confirmed by the in-sync replicas",
        )),
    }
}

pub(super) async fn ack(state: &Arc<BrokerState>, request: &RemotingCommand) -> RemotingCommand {
    let made_as = (state.role.now(), Since::now(&state.progress_stream));
    if let Some(refusal) = refuse_on_slave(made_as.0) {
        return refusal;
    }
    let header = match request.decode_header::<AckMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let receipt = match PopReceipt::decode(&header.extra_info) {
        Ok(receipt) => receipt,
        Err(problem) => {
            return error(
                ResponseCode::MessageIllegal,
                format!("bad extraInfo: {problem}"),
            )
        }
    };
    if let Err(answer) = check_queue(state, &header.topic, header.queue_id, header.offset, true) {
        return answer;
    }
    let key = QueueKey::new(&header.consumer_group, &header.topic, header.queue_id);
    let journaled = match finish_one(
        state,
        &key,
        header.offset,
        receipt.pop_time,
        receipt.is_orderly(),
    ) {
        Ok(journaled) => journaled,
        Err(answer) => return answer,
    };
    settle(state, made_as, journaled, &key)
        .await
        .unwrap_or_else(success)
}

pub(super) async fn batch_ack(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let made_as = (state.role.now(), Since::now(&state.progress_stream));
    if let Some(refusal) = refuse_on_slave(made_as.0) {
        return refusal;
    }
    let body = match BatchAckMessageRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::MessageIllegal,
                format!("bad batch ack body: {failure}"),
            )
        }
    };
    if body.acks.is_empty() {
        return error(ResponseCode::NoMessage, "the batch acknowledges nothing");
    }
    let mut last = None;
    for batch in &body.acks {
        let Some(source) = PopSource::from_flag(&batch.retry) else {
            return error(
                ResponseCode::MessageIllegal,
                format!("retry flag {:?} is not 0, 1 or 2", batch.retry),
            );
        };
        let topic = source.real_topic(&batch.consumer_group, &batch.topic);
        let key = QueueKey::new(&batch.consumer_group, &topic, batch.queue_id);
        let orderly = batch.revive_queue_id == tidemark_protocol::headers::ORDERLY_REVIVE_QID;
        for offset in batch.acked_offsets() {
            if check_queue(state, &topic, batch.queue_id, offset, true).is_err() {
                continue;
            }
            match finish_one(state, &key, offset, batch.pop_time, orderly) {
                Ok(journaled) => last = Some((journaled, key.clone())),
                Err(_) => continue,
            }
        }
    }
    if let Some((journaled, key)) = last {
        if let Some(answer) = settle(state, made_as, journaled, &key).await {
            return answer;
        }
        // Every queue the batch touched: the last record covers the earlier ones.
        for batch in &body.acks {
            if let Some(source) = PopSource::from_flag(&batch.retry) {
                let topic = source.real_topic(&batch.consumer_group, &batch.topic);
                crate::pop::commit_floor(
                    &state.pop,
                    &state.progress.offsets,
                    &state.log(),
                    &QueueKey::new(&batch.consumer_group, &topic, batch.queue_id),
                );
            }
        }
    }
    success()
}

pub(super) async fn change_invisible_time(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ChangeInvisibleTimeRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let receipt = match PopReceipt::decode(&header.extra_info) {
        Ok(receipt) => receipt,
        Err(problem) => {
            return error(
                ResponseCode::MessageIllegal,
                format!("bad extraInfo: {problem}"),
            )
        }
    };
    if let Err(answer) = check_queue(state, &header.topic, header.queue_id, header.offset, false) {
        return answer;
    }
    if header.invisible_time < 0 {
        return error(
            ResponseCode::InvalidParameter,
            format!("invisible time {} is negative", header.invisible_time),
        );
    }
    let key = QueueKey::new(&header.consumer_group, &header.topic, header.queue_id);
    let made_as = state.role.now();
    if let Some(refusal) = refuse_on_slave(made_as) {
        return refusal;
    }
    let since = Since::now(&state.progress_stream);
    let now = now_ms();
    let visible_at = now.saturating_add(header.invisible_time);
    // Orderly receipts keep their pop time (the old receipt stays valid); others get a new one.
    let new_pop_time = if receipt.is_orderly() {
        receipt.pop_time
    } else {
        now
    };
    let (_, journaled) = state.pop.change_invisibility(
        &key,
        header.offset,
        receipt.pop_time,
        new_pop_time,
        visible_at,
    );
    if let Err(failure) = state.pop.durable(journaled).await {
        return error(
            ResponseCode::SystemError,
            format!("invisibility change not recorded durably: {failure}"),
        );
    }
    // Like an acknowledgement: a new master without the change would hand the message out
    // at its old time, while the client counts on the new one.
    let through = since.through(&state.progress_stream, made_as);
    let code = crate::progress_stream::wait_replicated(
        state.log(),
        &state.progress_stream,
        through,
        made_as,
    )
    .await;
    if code != ResponseCode::Success {
        return error(
            code,
            "invisibility change recorded here, not yet confirmed by the in-sync replicas",
        );
    }
    RemotingCommand::response(ResponseCode::Success, None).with_header(
        &ChangeInvisibleTimeResponseHeader {
            pop_time: new_pop_time,
            invisible_time: visible_at - new_pop_time,
            revive_qid: receipt.revive_qid,
        },
    )
}
