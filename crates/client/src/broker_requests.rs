//! Requests a broker sends to a client over the client's own connections — rebalance
//! notices, offset resets, transaction check-backs — routed to the consumer or producer the
//! connection belongs to.

use std::collections::BTreeMap;
use std::sync::{OnceLock, Weak};

use tidemark_protocol::body::{ConsumerRunningInfo, GetConsumerStatusBody, MessageQueue};
use tidemark_protocol::headers::{
    GetConsumerRunningInfoRequestHeader, GetConsumerStatusRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{Channel, Reply, ReplyFuture, RequestHandler};

use crate::error::Result;
use crate::BoxFuture;

/// What a client does with a broker's requests (a consumer, or a transactional producer).
pub(crate) trait BrokerRequests: Send + Sync + 'static {
    /// NOTIFY_CONSUMER_IDS_CHANGED for `group`.
    fn consumer_ids_changed(&self, group: &str);
    /// RESET_CONSUMER_CLIENT_OFFSET: new offsets for `group`'s queues of `topic`.
    fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        offsets: BTreeMap<MessageQueue, i64>,
    ) -> BoxFuture<'static, ()>;
    /// GET_CONSUMER_RUNNING_INFO: the consumer of `group` describes itself; `None` when this
    /// client has no consumer of that group.
    fn running_info(&self, _group: &str) -> Option<ConsumerRunningInfo> {
        None
    }
    /// GET_CONSUMER_STATUS_FROM_CLIENT: the offsets the consumer of `group` holds for
    /// `topic`'s queues; `None` when this client has no consumer of that group.
    fn consumer_status(&self, _group: &str, _topic: &str) -> Option<BTreeMap<MessageQueue, i64>> {
        None
    }
    /// CHECK_TRANSACTION_STATE from the broker at the other end of `channel` (served by a
    /// transactional producer; others ignore it).
    fn check_transaction(
        &self,
        _channel: Channel,
        _request: RemotingCommand,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[derive(Default)]
pub(crate) struct BrokerRequestRouter {
    pub(crate) target: OnceLock<Weak<dyn BrokerRequests>>,
}

impl RequestHandler for BrokerRequestRouter {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture {
        let target = self.target.get().and_then(Weak::upgrade);
        Box::pin(async move {
            let Some(target) = target else {
                return Reply::Unsupported;
            };
            match request.request_code() {
                RequestCode::NotifyConsumerIdsChanged => {
                    if let Some(group) = request.ext_fields.get("consumerGroup") {
                        target.consumer_ids_changed(group);
                    }
                    Reply::NoResponse
                }
                RequestCode::CheckTransactionState => {
                    target.check_transaction(channel, request).await;
                    Reply::NoResponse
                }
                RequestCode::ResetConsumerClientOffset => {
                    let reply = match reset_request(&request) {
                        Ok((group, topic, offsets)) => {
                            target.reset_offsets(&group, &topic, offsets).await;
                            RemotingCommand::response(ResponseCode::Success, None)
                        }
                        Err(error) => RemotingCommand::response(
                            ResponseCode::SystemError,
                            Some(error.to_string()),
                        ),
                    };
                    if request.is_oneway() {
                        Reply::NoResponse
                    } else {
                        Reply::Response(reply)
                    }
                }
                RequestCode::GetConsumerStatusFromClient => {
                    Reply::Response(consumer_status_reply(target.as_ref(), &request))
                }
                RequestCode::GetConsumerRunningInfo => {
                    Reply::Response(running_info_reply(target.as_ref(), &request))
                }
                _ => Reply::Unsupported,
            }
        })
    }
}

fn running_info_reply(target: &dyn BrokerRequests, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerRunningInfoRequestHeader>() {
        Ok(header) => header,
        Err(error) => {
            return RemotingCommand::response(ResponseCode::SystemError, Some(error.to_string()))
        }
    };
    match target.running_info(&header.consumer_group) {
        Some(info) => {
            RemotingCommand::response(ResponseCode::Success, None).with_body(info.to_json_bytes())
        }
        // Java's words, which mqadmin shows.
        None => RemotingCommand::response(
            ResponseCode::SystemError,
            Some(format!(
                "The Consumer Group <{}> not exist in this consumer",
                header.consumer_group
            )),
        ),
    }
}

fn consumer_status_reply(
    target: &dyn BrokerRequests,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerStatusRequestHeader>() {
        Ok(header) => header,
        Err(error) => {
            return RemotingCommand::response(ResponseCode::SystemError, Some(error.to_string()))
        }
    };
    // Java answers with an empty table when it has no such consumer.
    let offsets = target
        .consumer_status(&header.group, &header.topic)
        .unwrap_or_default();
    RemotingCommand::response(ResponseCode::Success, None).with_body(
        GetConsumerStatusBody {
            consumer_table: BTreeMap::new(),
            message_queue_table: offsets,
        }
        .to_json_bytes(),
    )
}

fn reset_request(
    request: &RemotingCommand,
) -> Result<(String, String, BTreeMap<MessageQueue, i64>)> {
    let header: tidemark_protocol::headers::ResetOffsetRequestHeader = request.decode_header()?;
    let body = tidemark_protocol::body::MessageQueueOffsets::from_json_bytes(&request.body)?;
    Ok((header.group, header.topic, body.offset_table))
}
