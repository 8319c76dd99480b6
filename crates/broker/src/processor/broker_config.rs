//! GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG (mqadmin `getBrokerConfig`, `updateBrokerConfig`).

use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;
use tracing::info;

use super::{error, success};
use crate::live_config::UpdateError;
use crate::state::BrokerState;

/// The whole configuration as a properties text, with the data version of the live settings
/// (`version`) as RocketMQ sends it.
pub(super) fn get(state: &BrokerState) -> RemotingCommand {
    let mut response = success().with_body(state.live.properties(&state.config).into_bytes());
    response
        .ext_fields
        .insert("version", state.live.version_json());
    response
}

/// Applies the properties in the body (all or nothing). A changed permission is registered with
/// the name servers at once, so clients stop sending to (or reading from) the broker.
pub(super) async fn update(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let Ok(text) = std::str::from_utf8(&request.body) else {
        return error(
            ResponseCode::InvalidParameter,
            "the body is not UTF-8 properties text",
        );
    };
    let updates = parse_properties(text);
    if updates.is_empty() {
        return error(
            ResponseCode::InvalidParameter,
            "no key=value line in the body: nothing to update",
        );
    }
    match state.live.update(&updates, now_ms()).await {
        Ok((before, after)) => {
            info!(?updates, "broker config updated");
            if before.broker_permission != after.broker_permission {
                state.metadata.topics.touch(now_ms());
                state.topic_changes().announce_soon();
            }
            success()
        }
        Err(failure @ UpdateError::ReadOnly { .. }) => {
            error(ResponseCode::NoPermission, failure.to_string())
        }
        Err(failure @ (UpdateError::Unknown { .. } | UpdateError::Invalid { .. })) => {
            error(ResponseCode::InvalidParameter, failure.to_string())
        }
        Err(failure @ UpdateError::Persist { .. }) => {
            error(ResponseCode::SystemError, failure.to_string())
        }
    }
}

/// `key=value` (or `key: value`) lines, as Java's `Properties` text that mqadmin sends.
fn parse_properties(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| line.split_once(['=', ':']))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_properties;

    #[test]
    fn properties_lines_are_read_as_mqadmin_writes_them() {
        assert_eq!(
            parse_properties("#c\nbrokerPermission=4\n\ntraceOn : false\nnoValue\n"),
            [
                ("brokerPermission".to_owned(), "4".to_owned()),
                ("traceOn".to_owned(), "false".to_owned())
            ]
        );
    }
}
