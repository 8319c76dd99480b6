//! RECALL_MESSAGE (RocketMQ 5.3.2+): a producer cancels a timer message before it is due,
//! naming it by the recall handle its send was answered with. The checks and their answers
//! are RocketMQ's; what a recall does is [`Timers::recall`](crate::timer::Timers::recall).

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::perm;
use tidemark_protocol::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tidemark_protocol::message::RecallHandle;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;

use super::{bad_header, error};
use crate::metadata::{DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX};
use crate::progress_stream;
use crate::state::BrokerState;
use crate::timer::Recalled;

/// How long a recall waits for the timer service to take in the messages stored before it
/// (after a restart or a promotion the service may still be reading its queue).
const SCAN_WAIT: Duration = Duration::from_secs(3);
const SCAN_POLL: Duration = Duration::from_millis(20);

pub(super) async fn recall(state: &Arc<BrokerState>, request: &RemotingCommand) -> RemotingCommand {
    let header: RecallMessageRequestHeader = match request.decode_header() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let handle = match refusal(state, &header) {
        Ok(handle) => handle,
        Err(answer) => return answer,
    };
    let made_as = state.role.now();
    match settle(state, &handle).await {
        Ok(()) => {}
        Err(answer) => return answer,
    }
    // Whatever was found, the record that settles the message (made now or by an earlier
    // recall answered before its replicas confirmed) must be on the replicas first.
    let through = state.progress_stream.outbox().last_pushed();
    let code =
        progress_stream::wait_replicated(state.log(), &state.progress_stream, through, made_as)
            .await;
    if code != ResponseCode::Success {
        return error(
            code,
            "recalled on this broker, not yet confirmed by the in-sync replicas; recall again",
        );
    }
    let mut answer = RemotingCommand::response(ResponseCode::Success, None).with_header(
        &RecallMessageResponseHeader {
            msg_id: handle.message_id,
        },
    );
    answer
        .ext_fields
        .insert("MSG_REGION", state.live.get().region_id.clone());
    answer
}

/// RocketMQ's checks, in its order: the switch, the role, the permission, the topic, then the
/// handle itself.
fn refusal(
    state: &BrokerState,
    header: &RecallMessageRequestHeader,
) -> Result<RecallHandle, RemotingCommand> {
    let live = state.live.get();
    if !live.recall_message_enable {
        return Err(error(
            ResponseCode::NoPermission,
            "recall failed, operation is forbidden (recallMessageEnable is false)",
        ));
    }
    let unavailable = "recall failed, broker service not available";
    if state.role.is_slave() {
        return Err(error(ResponseCode::SlaveNotAvailable, unavailable));
    }
    if !perm::is_writeable(live.broker_permission) && !live.allow_recall_when_broker_not_writeable {
        return Err(error(ResponseCode::ServiceNotAvailable, unavailable));
    }
    if header.topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
        || header.topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
    {
        // Their messages are a group's to consume again, not a producer's to take back.
        return Err(error(
            ResponseCode::IllegalOperation,
            format!(
                "recall failed, topic[{}] is a retry or dead-letter topic",
                header.topic
            ),
        ));
    }
    if state.metadata.topics.get(&header.topic).is_none() {
        return Err(error(
            ResponseCode::TopicNotExist,
            format!("recall failed, the topic[{}] not exist", header.topic),
        ));
    }
    let handle = RecallHandle::decode(&header.recall_handle)
        .map_err(|failure| error(ResponseCode::IllegalOperation, failure.to_string()))?;
    if handle.topic != header.topic {
        return Err(error(
            ResponseCode::IllegalOperation,
            "recall failed, topic not match",
        ));
    }
    if handle.broker_name != state.config.broker_name {
        return Err(error(
            ResponseCode::IllegalOperation,
            format!(
                "recall failed, the handle is of broker {}, this is {}",
                handle.broker_name, state.config.broker_name
            ),
        ));
    }
    let max_ahead = (live.timer_max_delay_sec as i64).saturating_mul(1000);
    if handle.due_ms() > now_ms().saturating_add(max_ahead) {
        return Err(error(
            ResponseCode::IllegalOperation,
            "recall failed, timestamp invalid",
        ));
    }
    if !live.timer_wheel_enable {
        return Err(error(
            ResponseCode::SystemError,
            "recall failed, timer messages are not enabled, timerWheelEnable is false",
        ));
    }
    Ok(handle)
}

/// Settles the message on this broker, waiting (bounded) for the timer service to take in
/// every message stored before the recall, and for the record to be durable.
async fn settle(state: &Arc<BrokerState>, handle: &RecallHandle) -> Result<(), RemotingCommand> {
    let deadline = tokio::time::Instant::now() + SCAN_WAIT;
    loop {
        let (timers, log, asked) = (state.timers.clone(), state.log_handle(), handle.clone());
        let found =
            tokio::task::spawn_blocking(move || timers.recall(&log, &asked, now_ms())).await;
        let found = match found {
            Ok(Ok(found)) => found,
            Ok(Err(failure)) => {
                return Err(error(
                    ResponseCode::SystemError,
                    format!("recall failed: {failure}"),
                ))
            }
            Err(failure) => {
                return Err(error(
                    ResponseCode::SystemError,
                    format!("recall failed: {failure}"),
                ))
            }
        };
        match found {
            Recalled::Cancelled(ticket) => {
                return state.timers.durable(ticket).await.map_err(|failure| {
                    error(
                        ResponseCode::SystemError,
                        format!("recall not made durable: {failure}"),
                    )
                })
            }
            Recalled::NothingPending => return Ok(()),
            Recalled::AlreadyDue => {
                return Err(error(
                    ResponseCode::IllegalOperation,
                    "recall failed, timestamp invalid: the message is due and delivered or being delivered",
                ))
            }
            Recalled::NotScannedYet { end } => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(error(
                        ResponseCode::SystemBusy,
                        format!("recall failed, the broker is still reading its timer messages (up to {end}); try again"),
                    ));
                }
                state.timers.waker().notify_one();
                tokio::time::sleep(SCAN_POLL).await;
            }
        }
    }
}
