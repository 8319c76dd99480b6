//! Rebuilding the pending half messages at start from what the store holds: every half in the
//! half topic, minus those an op record resolves, minus those whose commit reached the commit
//! log after the last op record (a crash between a commit and its op record); their op records
//! are written now.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use tidemark_protocol::message::{
    magic_code_of, sys_flag, total_size_of, transaction_fields_of, DecodeOptions, MessageRecord,
    BLANK_MAGIC_CODE, MAGIC_CODE_V1, MAGIC_CODE_V2,
};
use tidemark_store::{GetStatus, MessageStore, StoreError};
use tracing::info;

use super::{
    op_message, pending_of, PendingHalf, Transactions, HALF_TOPIC, OP_CHECKED_TAG, OP_REMOVED_TAG,
    OP_TOPIC,
};

/// What recovery found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TransactionRecovery {
    pub halves: usize,
    pub ops: usize,
    pub pending: usize,
    /// Commits found in the commit log whose op record a crash had lost.
    pub commits_without_op: usize,
}

/// Record headers read per step when scanning the commit log: enough for both hosts as IPv6.
const HEADER_BYTES: usize = 128;
/// Queue entries read per step.
const BATCH: usize = 256;

/// Controller mode, a new master: finds the transactions its log leaves pending, appending
/// the op records recovery writes. The one writer besides `MessageLog::append` (it needs the
/// store, which only the log's handle holds): it runs before the broker takes a send in its
/// new role, so no reader or replica is owed a wake.
pub(crate) async fn recover_for_new_master(
    log: &crate::message_log::LogHandle,
    store_host: SocketAddr,
    timeout_ms: u64,
) -> Result<Transactions, StoreError> {
    crate::message_log::off_the_workers(&log.store, "recover transactions", move |store| {
        recover(store, store_host, timeout_ms).map(|(pending, _)| pending)
    })
    .await
}

/// The pending halves of `store`; writes the op records recovery found missing.
/// `timeout_ms` is the broker's transaction timeout (for halves without their own).
pub fn recover(
    store: &MessageStore,
    store_host: SocketAddr,
    timeout_ms: u64,
) -> Result<(Transactions, TransactionRecovery), StoreError> {
    let started = Instant::now();
    let mut report = TransactionRecovery::default();
    let mut pending: HashMap<i64, PendingHalf> = HashMap::new();
    for_each_record(store, HALF_TOPIC, |bytes| {
        let Ok((record, _)) = MessageRecord::decode(bytes, 0, DecodeOptions::default()) else {
            return;
        };
        report.halves += 1;
        let half = pending_of(
            &record.properties,
            record.physical_offset,
            record.queue_offset,
            record.store_timestamp,
            timeout_ms,
        );
        pending.insert(half.queue_offset, half);
    })?;
    let mut ops_end = 0u64;
    for_each_record(store, OP_TOPIC, |bytes| {
        let Ok((record, _)) = MessageRecord::decode(bytes, 0, DecodeOptions::default()) else {
            return;
        };
        report.ops += 1;
        ops_end = ops_end.max(record.physical_offset as u64 + bytes.len() as u64);
        let tag = record.properties.tags().unwrap_or_default().to_owned();
        // RocketMQ 5 batches several offsets into one op body, comma-separated.
        for offset in String::from_utf8_lossy(&record.body)
            .split(',')
            .filter_map(|offset| offset.trim().parse::<i64>().ok())
        {
            match tag.as_str() {
                OP_REMOVED_TAG => {
                    pending.remove(&offset);
                }
                OP_CHECKED_TAG => {
                    if let Some(half) = pending.get_mut(&offset) {
                        half.checks = half.checks.saturating_add(1);
                    }
                }
                _ => {}
            }
        }
    })?;
    let mut by_commit_log_offset: HashMap<i64, PendingHalf> = pending
        .into_values()
        .map(|half| (half.commit_log_offset, half))
        .collect();
    if let Some(oldest) = by_commit_log_offset.keys().min().copied() {
        let from = ops_end.max(oldest as u64);
        for half in committed_after(store, from, &by_commit_log_offset)? {
            if let Some(half) = by_commit_log_offset.remove(&half) {
                store.put(&op_message(store_host, OP_REMOVED_TAG, half.queue_offset))?;
                report.commits_without_op += 1;
            }
        }
    }
    report.pending = by_commit_log_offset.len();
    if report.halves > 0 {
        info!(
            halves = report.halves,
            ops = report.ops,
            pending = report.pending,
            commits_without_op = report.commits_without_op,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "transactions recovered"
        );
    }
    Ok((
        Transactions::with_pending(by_commit_log_offset.into_values()),
        report,
    ))
}

/// Calls `visit` with every stored record of `topic`'s queue 0, in queue order; entries whose
/// commit log is gone are skipped.
fn for_each_record(
    store: &MessageStore,
    topic: &str,
    mut visit: impl FnMut(&Bytes),
) -> Result<(), StoreError> {
    let mut offset = store.min_offset(topic, 0);
    let max = store.max_offset(topic, 0);
    while offset < max {
        let read = store.get(topic, 0, offset, BATCH, usize::MAX, |_| true)?;
        for record in &read.messages {
            visit(record);
        }
        match read.status {
            GetStatus::Found
            | GetStatus::MessageWasRemoving
            | GetStatus::OffsetFoundNull
            | GetStatus::OffsetTooSmall
                if read.next_begin_offset > offset =>
            {
                offset = read.next_begin_offset;
            }
            _ => break,
        }
    }
    Ok(())
}

/// Commit-log offsets of pending halves that a COMMIT record from `from` on names.
fn committed_after(
    store: &MessageStore,
    from: u64,
    pending: &HashMap<i64, PendingHalf>,
) -> Result<Vec<i64>, StoreError> {
    let (min, written, _) = store.commit_log_positions();
    let segment = store.commit_log_segment_bytes().max(1);
    let mut offset = from.max(min);
    let mut found = Vec::new();
    while offset + 8 <= written {
        let Some(head) = store.read_commit_log(offset, 8)? else {
            break;
        };
        let (Some(size), Some(magic)) = (total_size_of(&head), magic_code_of(&head)) else {
            break;
        };
        if magic == BLANK_MAGIC_CODE {
            offset = (offset / segment + 1) * segment;
            continue;
        }
        let Ok(size) = u64::try_from(size) else {
            break;
        };
        if !(magic == MAGIC_CODE_V1 || magic == MAGIC_CODE_V2) || size < 8 {
            break;
        }
        let header = store.read_commit_log(offset, HEADER_BYTES.min(size as usize))?;
        if let Some((flags, prepared)) = header.as_deref().and_then(transaction_fields_of) {
            if flags & sys_flag::TRANSACTION_MASK == sys_flag::TRANSACTION_COMMIT_TYPE
                && pending.contains_key(&prepared)
            {
                found.push(prepared);
            }
        }
        offset += size;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_protocol::message::{property, Properties};
    use tidemark_store::{NewMessage, StoreConfig};

    use crate::transaction::resolve::into_half;

    fn host() -> SocketAddr {
        "127.0.0.1:10911".parse().expect("address")
    }

    fn message(topic: &str, body: &str) -> NewMessage {
        let mut properties = Properties::new();
        properties.insert(property::PRODUCER_GROUP, "P");
        properties.insert(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, format!("K-{body}"));
        NewMessage {
            topic: topic.into(),
            queue_id: 1,
            flag: 0,
            sys_flag: sys_flag::TRANSACTION_PREPARED_TYPE,
            born_timestamp: 0,
            born_host: host(),
            store_host: host(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from(body.to_owned()),
            properties,
        }
    }

    fn half(store: &MessageStore, body: &str) -> (i64, i64) {
        let mut half = message("Orders", body);
        into_half(&mut half);
        let appended = store.put(&half).expect("half stored");
        (appended.commit_log_offset as i64, appended.queue_offset)
    }

    /// A crash between a commit and its op record: recovery finds the commit in the log after
    /// the last op record, writes the op, and the half is not pending (so never committed
    /// twice); a check counted before the crash is still counted.
    #[test]
    fn a_commit_whose_op_record_was_lost_is_found_and_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, _) = MessageStore::open(StoreConfig::new(dir.path())).expect("store");
        let (resolved, resolved_queue_offset) = half(&store, "resolved");
        let (committed, _) = half(&store, "committed");
        let (waiting, waiting_queue_offset) = half(&store, "waiting");
        store
            .put(&op_message(host(), OP_REMOVED_TAG, resolved_queue_offset))
            .expect("op");
        store
            .put(&op_message(host(), OP_CHECKED_TAG, waiting_queue_offset))
            .expect("op");
        let mut commit = message("Orders", "committed");
        commit.sys_flag = sys_flag::TRANSACTION_COMMIT_TYPE;
        commit.prepared_transaction_offset = committed;
        store.put(&commit).expect("commit");

        let (table, report) = recover(&store, host(), 6_000).expect("recovered");
        assert_eq!(
            report,
            TransactionRecovery {
                halves: 3,
                ops: 2,
                pending: 1,
                commits_without_op: 1,
            }
        );
        let pending = table.snapshot();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].commit_log_offset, waiting);
        assert_eq!(pending[0].checks, 1);
        assert_eq!(pending[0].real_topic, "Orders");
        assert_eq!(pending[0].producer_group, "P");
        assert_eq!(pending[0].unique_key, "K-waiting");
        assert!(table.get(resolved).is_none() && table.get(committed).is_none());

        let (again, report) = recover(&store, host(), 6_000).expect("recovered");
        assert_eq!(report.commits_without_op, 0, "the op record was written");
        assert_eq!(report.ops, 3);
        assert_eq!(again.snapshot(), pending);
    }
}
