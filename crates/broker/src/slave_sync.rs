//! A slave's copy of its master's metadata (Java `SlaveSynchronize`): every
//! `slave_sync_interval_ms` (first run after 3 s) it fetches, with the requests RocketMQ uses,
//! the topic config, consumer offsets, delay offsets and subscription groups (the persister
//! writes what changed), and from a Tidemark master its POP state.
//!
//! Where Tidemark differs — consumer progress: RocketMQ replaces the slave's offsets with the
//! master's, so commits consumers made on the slave while the master was away are lost when
//! it returns (apache/rocketmq#1094, #1440). Here the slave merges
//! ([`ConsumerOffsetTable::merge_from_master`](crate::offsets::ConsumerOffsetTable)): a newer
//! reset epoch wins, otherwise the larger offset. Offsets the slave holds ahead of the master
//! are then sent to the master as ordinary UPDATE_CONSUMER_OFFSET requests, which the master's
//! forward-only table accepts — so the master learns them even when no consumer is running.
//!
//! A Tidemark master streams its progress through the log (`progress_stream`), whole tables
//! first whenever a slave connects: from one, the slave takes neither offsets nor POP state
//! here, and only tells the master where its offsets are ahead. A copy fetched now and taken
//! later could undo what the stream applied in between.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{
    ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tidemark_protocol::headers::UpdateConsumerOffsetRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;
use tracing::{debug, info, warn};

use crate::live_config::LiveConfig;
use crate::master_link::MasterLink;
use crate::metadata_change::TopicChanges;
use crate::offsets::ConsumerOffsetTable;
use crate::parts::{Metadata, Progress};
use crate::pop::PopTable;
use crate::progress_record::PROGRESS_TOPIC;
use crate::role::Role;

const CALL_TIMEOUT: Duration = Duration::from_secs(3);
const FIRST_RUN_AFTER: Duration = Duration::from_secs(3);

/// What slave sync touches: the master it follows, the tables it takes from the master, and
/// the door that announces topics taken.
#[derive(Debug, Clone)]
pub struct SlaveSync {
    /// How the broker's own connections are made (TLS included).
    pub client_config: tidemark_remoting::ClientConfig,
    /// This broker's address and name (a master that is this broker is not synced from).
    pub broker_addr: String,
    pub broker_name: String,
    pub live: Arc<LiveConfig>,
    pub role: Arc<Role>,
    pub master: Arc<MasterLink>,
    pub metadata: Arc<Metadata>,
    pub progress: Arc<Progress>,
    pub pop: Arc<PopTable>,
    pub topic_changes: TopicChanges,
}

pub(crate) async fn run(sync: SlaveSync, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let client = RemotingClient::new(sync.client_config.clone(), None);
    // Read at each round: slaveSyncIntervalMs is live.
    let period =
        |sync: &SlaveSync| Duration::from_millis(sync.live.get().slave_sync_interval_ms.max(100));
    let mut next = tokio::time::Instant::now() + FIRST_RUN_AFTER.min(period(&sync));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep_until(next) => {}
        }
        next = tokio::time::Instant::now() + period(&sync);
        if !sync.role.is_slave() {
            // Controller mode, while this broker is master.
            continue;
        }
        match sync.master.broker_addr() {
            Some(master) if master != sync.broker_addr => sync_all(&sync, &client, &master).await,
            _ => debug!("no master registered; slave sync waits"),
        }
    }
    client.shutdown();
}

/// What one step's request got.
enum Fetched {
    Body(bytes::Bytes),
    /// The master answered with an error (for offsets: it has none yet).
    Refused,
    /// No answer at all.
    Unreachable,
}

async fn fetch(client: &RemotingClient, master: &str, code: RequestCode) -> Fetched {
    match client
        .invoke(master, RemotingCommand::request(code), CALL_TIMEOUT)
        .await
    {
        Ok(response) if response.response_code() == ResponseCode::Success => {
            Fetched::Body(response.body)
        }
        Ok(response) => {
            debug!(%master, ?code, answer = ?response.response_code(), remark = ?response.remark, "slave sync step refused");
            Fetched::Refused
        }
        Err(error) => {
            debug!(%master, ?code, %error, "slave sync step failed");
            Fetched::Unreachable
        }
    }
}

/// Whether this broker still follows `master`. A step's answer can come long after it was
/// asked for — a paused master answers what sat in its socket when it resumes — and by then
/// this broker may be master itself: what the old master had would overwrite newer state.
fn still_following(sync: &SlaveSync, master: &str) -> bool {
    sync.role.is_slave() && sync.master.broker_addr().as_deref() == Some(master)
}

/// [`fetch`], answered only while this broker still follows `master`.
async fn fetch_for_slave(
    sync: &SlaveSync,
    client: &RemotingClient,
    master: &str,
    code: RequestCode,
) -> Fetched {
    let fetched = fetch(client, master, code).await;
    if still_following(sync, master) {
        fetched
    } else {
        debug!(%master, ?code, "no longer following that master; its answer is dropped");
        Fetched::Unreachable
    }
}

/// One round; each step stands alone (a failed one does not stop the others).
pub(crate) async fn sync_all(sync: &SlaveSync, client: &RemotingClient, master: &str) {
    let mut master_streams = false;
    if let Fetched::Body(body) =
        fetch_for_slave(sync, client, master, RequestCode::GetAllTopicConfig).await
    {
        match TopicConfigSerializeWrapper::from_json_bytes(&body) {
            Ok(wrapper) => {
                master_streams = wrapper.topic_config_table.contains_key(PROGRESS_TOPIC);
                sync_topics(sync, wrapper)
            }
            Err(error) => warn!(%error, "master's topic config unreadable"),
        }
    }
    // The master answers SYSTEM_ERROR while it has no offsets at all: nothing to merge then,
    // but the slave may still hold progress the master should learn.
    let master_offsets =
        match fetch_for_slave(sync, client, master, RequestCode::GetAllConsumerOffset).await {
            Fetched::Body(body) => match ConsumerOffsetWrapper::from_json_bytes(&body) {
                Ok(wrapper) => Some(ConsumerOffsetTable::from_wrapper(&wrapper)),
                Err(error) => {
                    warn!(%error, "master's consumer offsets unreadable");
                    None
                }
            },
            Fetched::Refused => Some(ConsumerOffsetTable::default()),
            Fetched::Unreachable => None,
        };
    let ahead = match master_offsets {
        Some(master_offsets) if master_streams => sync.progress.offsets.ahead_of(&master_offsets),
        Some(master_offsets) => sync.progress.offsets.merge_from_master(&master_offsets),
        None => Vec::new(),
    };
    for entry in &ahead {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: entry.group.clone(),
            topic: entry.topic.clone(),
            queue_id: entry.queue_id,
            commit_offset: entry.offset,
            broker_name: Some(sync.broker_name.clone()),
        };
        let mut request =
            RemotingCommand::request_with_header(RequestCode::UpdateConsumerOffset, &header);
        // Passing progress on, never rewinding: the master may have moved on meanwhile.
        request
            .ext_fields
            .insert(tidemark_protocol::acked::FORWARD_ONLY_FIELD, "true");
        if let Err(error) = client.invoke_oneway(master, request).await {
            debug!(%master, %error, "could not tell the master a newer offset");
            break;
        }
    }
    if !ahead.is_empty() {
        info!(
            entries = ahead.len(),
            "told the master offsets it was behind on"
        );
    }

    if !master_streams {
        sync_pop_state(sync, client, master).await;
    }

    if let Fetched::Body(body) =
        fetch_for_slave(sync, client, master, RequestCode::GetAllDelayOffset).await
    {
        match DelayOffsetWrapper::from_json_bytes(&body) {
            Ok(wrapper) => {
                // Written by the persister's next tick, like every other change.
                sync.progress.delay_offsets.replace(wrapper.offset_table);
            }
            Err(error) => warn!(%error, "master's delay offsets unreadable"),
        }
    }
    if let Fetched::Body(body) = fetch_for_slave(
        sync,
        client,
        master,
        RequestCode::GetAllSubscriptionGroupConfig,
    )
    .await
    {
        match SubscriptionGroupWrapper::from_json_bytes(&body) {
            Ok(wrapper) => {
                sync.metadata.groups.replace_if_newer(wrapper);
            }
            Err(error) => warn!(%error, "master's subscription groups unreadable"),
        }
    }
}

/// POP state is the master's, taken whole (TIDEMARK_GET_ALL_POP_STATE): a slave promoted to
/// master then hands out neither what was acknowledged nor what is in flight under a receipt
/// still valid, as of the last sync. RocketMQ's slaves get the same from the revive topic's
/// check-point and ack messages in the replicated log. A master that does not know the request
/// (Apache RocketMQ, an older Tidemark) refuses it and the step is skipped.
async fn sync_pop_state(sync: &SlaveSync, client: &RemotingClient, master: &str) {
    let Fetched::Body(body) =
        fetch_for_slave(sync, client, master, RequestCode::GetAllPopState).await
    else {
        return;
    };
    let bytes = body.len();
    let pop = sync.pop.clone();
    // Taking a changed state writes a snapshot: blocking I/O.
    match tokio::task::spawn_blocking(move || pop.replace_from_master(&body)).await {
        Ok(Ok(true)) => debug!(bytes, "took the master's POP state"),
        Ok(Ok(false)) => {}
        Ok(Err(error)) => warn!(%error, "master's POP state not taken"),
        Err(error) => warn!(%error, "taking the master's POP state failed"),
    }
}

/// Topics are the master's: taken whole when its data version moved (as Java does).
fn sync_topics(sync: &SlaveSync, wrapper: TopicConfigSerializeWrapper) {
    if sync.metadata.topics.merge(wrapper, true) {
        sync.topic_changes.announce_soon();
    }
}

/// The master's topic names, asked now (a slave cleaning unused topics must not take a topic
/// the master created since the last sync for an unused one); `None` when the master cannot
/// be asked.
pub(crate) async fn master_topic_names(
    link: &MasterLink,
    client_config: tidemark_remoting::ClientConfig,
) -> Option<Vec<String>> {
    let master = link.broker_addr()?;
    let client = RemotingClient::new(client_config, None);
    let fetched = fetch(&client, &master, RequestCode::GetAllTopicConfig).await;
    client.shutdown();
    let Fetched::Body(body) = fetched else {
        return None;
    };
    match TopicConfigSerializeWrapper::from_json_bytes(&body) {
        Ok(wrapper) => Some(wrapper.topic_config_table.into_keys().collect()),
        Err(error) => {
            warn!(%error, "master's topic config unreadable");
            None
        }
    }
}
