//! A pull whose subscription version is newer than the broker's.
//!
//! The broker refuses such a pull (SUBSCRIPTION_NOT_LATEST) until the client's heartbeat brings
//! the new version, as RocketMQ does. A Java push consumer bumps the version on every rebalance
//! and sends that heartbeat at once, but skips it when another heartbeat holds its lock; its
//! next one is 30 s away, and until then the queue starves. So the broker asks the client for
//! its running info (GET_CONSUMER_RUNNING_INFO, which lists its subscriptions) and takes the
//! newer versions by the heartbeat's rule: the client's retry a second later is served.

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::ConsumerRunningInfo;
use tidemark_protocol::headers::GetConsumerRunningInfoRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::now_ms;

use crate::clients::ClientRegistry;

/// How long the client gets to answer; no longer than it waits before retrying a refused pull
/// plus a margin, so an ask never outlives the next one allowed.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// Asks the member of `group` behind `channel_id` for its subscriptions, in the background,
/// unless it was asked within the last few seconds.
pub(super) fn ask_member(clients: &Arc<ClientRegistry>, group: &str, channel_id: u64) {
    let Some(member) = clients.member_to_ask(group, channel_id, now_ms()) else {
        return;
    };
    let clients = clients.clone();
    let group = group.to_owned();
    tokio::spawn(async move {
        let request = RemotingCommand::request_with_header(
            RequestCode::GetConsumerRunningInfo,
            &GetConsumerRunningInfoRequestHeader {
                consumer_group: group.clone(),
                client_id: member.client_id.clone(),
                jstack_enable: Some(false),
            },
        );
        let info = match member.channel.request(request, ASK_TIMEOUT).await {
            Ok(answer) if answer.response_code() == ResponseCode::Success => {
                ConsumerRunningInfo::from_json_bytes(&answer.body)
            }
            Ok(answer) => {
                tracing::debug!(%group, client = %member.client_id, code = ?answer.response_code(), "a consumer did not report its subscriptions");
                return;
            }
            Err(failure) => {
                tracing::debug!(%group, client = %member.client_id, %failure, "a consumer did not report its subscriptions");
                return;
            }
        };
        match info {
            Ok(info) => {
                let taken =
                    clients.refresh_subscriptions(&group, channel_id, &info.subscription_set);
                if taken > 0 {
                    tracing::info!(%group, client = %member.client_id, taken, "took a consumer's newer subscriptions from its running info");
                }
            }
            Err(failure) => {
                tracing::debug!(%group, client = %member.client_id, %failure, "a consumer's running info did not decode");
            }
        }
    });
}
