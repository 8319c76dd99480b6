//! TIDEMARK_GET_PROGRESS_HISTORY: a group's progress history on this broker (`history`).

use tidemark_protocol::body::{ProgressHistory, ProgressHistoryEntry, ProgressMoveView};
use tidemark_protocol::headers::GetProgressHistoryRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::RemotingCommand;

use super::{bad_header, success};
use crate::history::HistoryEntry;
use crate::state::BrokerState;

pub(super) fn progress_history(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetProgressHistoryRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let entries = state
        .progress
        .history
        .entries(
            &header.consumer_group,
            header.since_ms.unwrap_or(i64::MIN),
            header.checkpoints.unwrap_or(false),
        )
        .iter()
        .map(view)
        .collect();
    let body = ProgressHistory {
        broker_name: state.config.broker_name.clone(),
        entries,
    };
    success().with_body(body.to_json_bytes())
}

fn view(entry: &HistoryEntry) -> ProgressHistoryEntry {
    ProgressHistoryEntry {
        id: i64::try_from(entry.id).unwrap_or(i64::MAX),
        time_ms: entry.time_ms,
        group: entry.group.clone(),
        kind: entry.kind.name().to_owned(),
        request_code: entry.request_code,
        account: entry.actor.account.clone(),
        address: entry.actor.address.clone(),
        client: entry.actor.client.clone(),
        queues: entry
            .queues
            .iter()
            .map(|queue| ProgressMoveView {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                before: queue.before.unwrap_or(-1),
                after: queue.after.unwrap_or(-1),
            })
            .collect(),
        detail: (!entry.detail.is_empty()).then(|| entry.detail.clone()),
    }
}
