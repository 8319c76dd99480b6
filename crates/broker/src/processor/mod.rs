//! Request handling: one function per request code, grouped by concern, and the single place
//! where a request code is mapped to its handler.

mod acl;
mod admin;
mod admin_lists;
pub(crate) mod append;
mod assignment;
mod broker_config;
mod broker_stats;
mod cleanup;
mod clone_offset;
mod consume_queue;
mod consume_stats;
pub(crate) mod consumer;
mod dead_letters;
mod offset_moved;
mod pop;
mod pop_ack;
mod progress_history;
mod progress_plan;
mod pull;
mod query_message;
mod recall;
mod relay;
mod reset_offset;
mod restore_progress;
mod retry;
pub(crate) mod routing;
mod send;
mod stale_subscription;
mod transaction;

use std::sync::Arc;

use tidemark_protocol::headers::pull_sys_flag;
use tidemark_protocol::{HeaderError, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{Channel, Reply, ReplyFuture, RequestHandler};
use tracing::debug;

use crate::progress_stream;
use crate::state::BrokerState;
use crate::stats::RpcKind;

/// The broker's request handler.
#[derive(Debug, Clone)]
pub struct BrokerHandler {
    state: Arc<BrokerState>,
}

impl BrokerHandler {
    pub fn new(state: Arc<BrokerState>) -> Self {
        Self { state }
    }
}

/// A typed header that failed to decode becomes an error response naming the field.
pub(crate) fn bad_header(error: HeaderError) -> RemotingCommand {
    RemotingCommand::response(
        ResponseCode::SystemError,
        format!("bad request header: {error}"),
    )
}

pub(crate) fn error(code: ResponseCode, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response(code, remark.into())
}

/// NO_PERMISSION when the broker's permission forbids writes (an operator wiped it), as Java
/// words it.
pub(crate) fn refuse_writes_if_read_only(state: &BrokerState) -> Option<RemotingCommand> {
    if state.role.is_slave() {
        // RocketMQ's answer when a message is put to a slave.
        return Some(error(
            ResponseCode::ServiceNotAvailable,
            "service not available now. It may be caused by one of the following reasons: \
             the broker's disk is full, messages are put to the slave, message store has been \
             shut down, etc.",
        ));
    }
    (!tidemark_protocol::body::perm::is_writeable(state.live.get().broker_permission)).then(|| {
        error(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending message is forbidden",
                state.config.broker_ip1
            ),
        )
    })
}

/// A topic or group this request created could not be made durable: the request is not
/// acknowledged (its effect would not survive a crash).
pub(crate) fn metadata_not_durable(
    failure: &tidemark_storage::atomic_file::PersistError,
) -> RemotingCommand {
    error(
        ResponseCode::SystemError,
        format!("topic or group created but not persisted, request not applied: {failure}"),
    )
}

pub(crate) fn success() -> RemotingCommand {
    RemotingCommand::response(ResponseCode::Success, None)
}

/// An operator's change of progress (a reset, restore, clone, deletion) is answered as a
/// commit is: once the replicas a SYNC send waits for hold it and its history entry, so a
/// failover right after the answer neither undoes it nor forgets who made it. A failed change
/// is answered at once. The role is taken before the change runs: a master deposed meanwhile
/// does not confirm it.
async fn operator_change(
    state: &BrokerState,
    change: impl std::future::Future<Output = RemotingCommand>,
) -> RemotingCommand {
    let made_as = state.role.now();
    let answer = change.await;
    confirm_operator_change(state, made_as, answer).await
}

/// The second half of [`operator_change`], for a handler that has more to do once the change
/// is confirmed (telling the group's clients).
pub(super) async fn confirm_operator_change(
    state: &BrokerState,
    made_as: crate::role::RoleNow,
    answer: RemotingCommand,
) -> RemotingCommand {
    if answer.response_code() != ResponseCode::Success {
        return answer;
    }
    progress_stream::once_replicated(state.log(), &state.progress_stream, made_as, answer).await
}

/// Whether `request` asked to be held until something arrives: a pull with the suspend flag, a
/// POP or a notification with a poll time.
fn asks_to_wait(request: &RemotingCommand) -> bool {
    let field = |name: &str| {
        request
            .ext_fields
            .get(name)
            .and_then(|value| value.parse::<i64>().ok())
    };
    match request.request_code() {
        RequestCode::PullMessage | RequestCode::LitePullMessage => {
            field("sysFlag").is_some_and(|flag| flag & i64::from(pull_sys_flag::SUSPEND) != 0)
        }
        RequestCode::PopMessage | RequestCode::Notification => {
            field("pollTime").is_some_and(|poll| poll > 0)
        }
        _ => false,
    }
}

impl RequestHandler for BrokerHandler {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture {
        let state = self.state.clone();
        Box::pin(async move {
            let code = request.request_code();
            let started = std::time::Instant::now();
            let rpc = |response_code: ResponseCode| RpcKind {
                request_code: code.to_i32(),
                response_code: response_code.to_i32(),
                long_polling: asks_to_wait(&request),
                grpc: channel.is_in_process(),
            };
            let response = match code {
                RequestCode::SendMessage
                | RequestCode::SendMessageV2
                | RequestCode::SendBatchMessage => {
                    let started = std::time::Instant::now();
                    let response = send::send(&state, &channel, &request).await;
                    state
                        .stats
                        .send_latency
                        .observe(started.elapsed().as_secs_f64());
                    response
                }
                RequestCode::PullMessage | RequestCode::LitePullMessage => {
                    pull::pull(&state, &channel, &request).await
                }
                RequestCode::PopMessage => pop::pop(&state, &request).await,
                RequestCode::PeekMessage => pop::peek(&state, &request),
                RequestCode::Notification => pop::notification(&state, &request).await,
                RequestCode::PollingInfo => pop::polling_info(&state, &request),
                RequestCode::AckMessage => pop_ack::ack(&state, &request).await,
                RequestCode::BatchAckMessage => pop_ack::batch_ack(&state, &request).await,
                RequestCode::ChangeMessageInvisibleTime => {
                    pop_ack::change_invisible_time(&state, &request).await
                }
                RequestCode::QueryAssignment => {
                    assignment::query_assignment(&state, &request).await
                }
                RequestCode::SetMessageRequestMode => {
                    assignment::set_message_request_mode(&state, &request).await
                }
                RequestCode::ConsumerSendMsgBack => retry::send_back(&state, &request).await,
                RequestCode::EndTransaction => {
                    transaction::end_transaction(&state, &channel, &request).await
                }
                RequestCode::HeartBeat => consumer::heartbeat(&state, &channel, &request).await,
                RequestCode::UnregisterClient => {
                    consumer::unregister_client(&state, &channel, &request)
                }
                RequestCode::GetConsumerListByGroup => consumer::consumer_list(&state, &request),
                RequestCode::QueryConsumerOffset => {
                    let answer = consumer::query_offset(&state, &channel, &request);
                    progress_stream::once_replicated(
                        state.log(),
                        &state.progress_stream,
                        state.role.now(),
                        answer,
                    )
                    .await
                }
                RequestCode::UpdateConsumerOffset => {
                    consumer::update_offset(&state, &channel, &request).await
                }
                RequestCode::LockBatchMq => consumer::lock(&state, &request),
                RequestCode::UnlockBatchMq => consumer::unlock(&state, &request),
                RequestCode::CheckClientConfig => consumer::check_client_config(&state, &request),
                RequestCode::GetMaxOffset => admin::max_offset(&state, &request),
                RequestCode::GetMinOffset => admin::min_offset(&state, &request),
                RequestCode::SearchOffsetByTimestamp => admin::search_offset(&state, &request),
                RequestCode::GetEarliestMsgStoretime => {
                    admin::earliest_store_time(&state, &request)
                }
                RequestCode::UpdateAndCreateTopic => admin::create_topic(&state, &request).await,
                RequestCode::UpdateAndCreateTopicList => {
                    admin_lists::create_topics(&state, &request).await
                }
                RequestCode::UpdateAndCreateSubscriptionGroupList => {
                    admin_lists::create_groups(&state, &request).await
                }
                RequestCode::DeleteTopicInBroker => {
                    operator_change(&state, admin::delete_topic(&state, &channel, &request)).await
                }
                RequestCode::GetAllTopicConfig => admin::all_topic_config(&state),
                RequestCode::GetTopicConfig => admin::topic_config(&state, &request),
                RequestCode::GetAllConsumerOffset => admin::all_consumer_offsets(&state),
                RequestCode::GetAllDelayOffset => admin::all_delay_offsets(&state),
                RequestCode::GetAllPopState => admin::all_pop_state(&state),
                RequestCode::GetAllSubscriptionGroupConfig => {
                    admin::all_subscription_groups(&state)
                }
                RequestCode::UpdateAndCreateSubscriptionGroup => {
                    admin::create_subscription_group(&state, &request).await
                }
                RequestCode::DeleteSubscriptionGroup => {
                    operator_change(
                        &state,
                        admin::delete_subscription_group(&state, &channel, &request),
                    )
                    .await
                }
                RequestCode::GetConsumeStats => {
                    let answer = consume_stats::consume_stats(&state, &request);
                    progress_stream::once_replicated(
                        state.log(),
                        &state.progress_stream,
                        state.role.now(),
                        answer,
                    )
                    .await
                }
                RequestCode::GetBrokerConsumeStats => {
                    let answer = consume_stats::broker_consume_stats(&state, &request);
                    progress_stream::once_replicated(
                        state.log(),
                        &state.progress_stream,
                        state.role.now(),
                        answer,
                    )
                    .await
                }
                RequestCode::GetProducerConnectionList => {
                    admin::producer_connections(&state, &request)
                }
                RequestCode::GetAllProducerInfo => admin::all_producers(&state),
                RequestCode::ViewBrokerStatsData => broker_stats::view_stats(&state, &request),
                RequestCode::QueryTopicConsumeByWho => broker_stats::consumed_by(&state, &request),
                RequestCode::GetSystemTopicListFromBroker => broker_stats::system_topics(&state),
                RequestCode::DeleteExpiredCommitLog => {
                    admin::delete_expired_commit_log(&state).await
                }
                RequestCode::CleanExpiredConsumeQueue => {
                    cleanup::clean_expired_queues(&state).await
                }
                RequestCode::CleanUnusedTopic => cleanup::clean_unused_topics(&state).await,
                RequestCode::UpdateAndCreateAclConfig => {
                    acl::update_account(&state, &request).await
                }
                RequestCode::DeleteAclConfig => acl::delete_account(&state, &request).await,
                RequestCode::UpdateGlobalWhiteAddrsConfig => {
                    acl::update_global_white(&state, &request).await
                }
                RequestCode::GetBrokerClusterAclInfo => acl::acl_version(&state),
                RequestCode::QueryConsumeQueue => consume_queue::query(&state, &request),
                RequestCode::GetConsumerRunningInfo => {
                    relay::consumer_running_info(&state, &request).await
                }
                RequestCode::ConsumeMessageDirectly => {
                    relay::consume_message_directly(&state, &request).await
                }
                RequestCode::InvokeBrokerToGetConsumerStatus => {
                    relay::consumer_status(&state, &request).await
                }
                RequestCode::GetConsumerProgress => {
                    let answer = admin::consumer_progress(&state, &request);
                    progress_stream::once_replicated(
                        state.log(),
                        &state.progress_stream,
                        state.role.now(),
                        answer,
                    )
                    .await
                }
                // Both wait for the replicas themselves: clients are told only after that.
                RequestCode::RestoreProgress => {
                    restore_progress::restore_progress(&state, &channel, &request).await
                }
                RequestCode::PlanProgressMove => {
                    progress_plan::plan_progress_move(&state, &request)
                }
                RequestCode::GetDeadLetters => dead_letters::list(&state, &request),
                RequestCode::ResendDeadLetters => {
                    operator_change(&state, dead_letters::resend(&state, &channel, &request)).await
                }
                RequestCode::ReplayRetries => {
                    operator_change(
                        &state,
                        dead_letters::replay_retries(&state, &channel, &request),
                    )
                    .await
                }
                RequestCode::GetProgressHistory => {
                    progress_history::progress_history(&state, &request)
                }
                RequestCode::CloneGroupOffset => {
                    operator_change(
                        &state,
                        clone_offset::clone_group_offset(&state, &channel, &request),
                    )
                    .await
                }
                RequestCode::InvokeBrokerToResetOffset => {
                    reset_offset::reset_offset(&state, &channel, &request).await
                }
                RequestCode::GetConsumerConnectionList => {
                    admin::consumer_connections(&state, &request)
                }
                RequestCode::GetTopicStatsInfo => admin::topic_stats(&state, &request),
                RequestCode::ViewMessageById => admin::view_message(&state, &request),
                RequestCode::GetBrokerRuntimeInfo => admin::runtime_info(&state),
                RequestCode::GetBrokerEpochCache => admin::epoch_cache(&state),
                RequestCode::NotifyBrokerRoleChanged if state.config.enable_controller_mode => {
                    // The announcement only wakes the controller-mode loop: it reads the
                    // decision from the controller leader itself, as on every tick.
                    state.role_change_announced.notify_one();
                    success()
                }
                RequestCode::GetBrokerConfig => broker_config::get(&state),
                RequestCode::UpdateBrokerConfig => broker_config::update(&state, &request).await,
                RequestCode::QueryMessage => query_message::query(&state, &request).await,
                RequestCode::RecallMessage => recall::recall(&state, &request).await,
                _ => {
                    debug!(%code, peer = %channel.peer_addr(), "request code not supported");
                    let kind = rpc(ResponseCode::RequestCodeNotSupported);
                    state.stats.rpc.observe(kind, started.elapsed());
                    return Reply::Unsupported;
                }
            };
            let kind = rpc(response.response_code());
            state.stats.rpc.observe(kind, started.elapsed());
            Reply::Response(response)
        })
    }

    fn on_close(&self, channel: &Channel) {
        let groups = self.state.clients.channel_closed(channel.id());
        for group in groups {
            consumer::notify_ids_changed(&self.state, &group);
        }
    }
}
