//! [`Producer`]: sends messages to a topic's queues (Java `DefaultMQProducer`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tidemark_client::ClientError> {
//! use tidemark_client::{Message, Producer};
//!
//! let producer = Producer::builder("orders-producer")
//!     .namesrv_addr("127.0.0.1:9876")
//!     .start()
//!     .await?;
//! let sent = producer
//!     .send(Message::new("Orders", "order #1").with_tags("created").with_keys(["1"]))
//!     .await?;
//! println!("stored as {} at {:?}", sent.msg_id, sent.queue);
//! producer.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tidemark_protocol::body::{MessageQueue, TopicRouteData};
use tidemark_protocol::headers::{SendMessageRequestHeaderV2, SendMessageResponseHeader};
use tidemark_protocol::message::{encode_batch, property, sys_flag, BatchEntry, UniqueIdGenerator};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::builder::client_setters;
use crate::config::{unique_instance_name, ClientConfig};
use crate::error::{ClientError, Result};
use crate::instance::{bad_response, broker_error, lock, ClientInstance, AUTO_CREATE_TOPIC};
use crate::message::{Message, RETRY_TOPIC_PREFIX};
use crate::route::PublishQueues;
use tidemark_remoting::now_ms;

/// How the broker stored a message (Java `SendStatus`). Anything but `SendOk` means the
/// message is stored but not yet as durable as the broker is configured to make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    SendOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
}

impl SendStatus {
    /// Java's name (`SEND_OK`, …).
    pub fn java_name(self) -> &'static str {
        match self {
            SendStatus::SendOk => "SEND_OK",
            SendStatus::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            SendStatus::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            SendStatus::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
        }
    }
}

/// What a successful send returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    pub status: SendStatus,
    /// The client-generated unique id (`UNIQ_KEY`); comma-joined for a batch.
    pub msg_id: String,
    /// The broker's id of the stored record (store host + commit-log offset).
    pub offset_msg_id: String,
    pub queue: MessageQueue,
    pub queue_offset: i64,
    /// A timer message's recall handle ([`Producer::recall_message`]), from brokers that give
    /// one (RocketMQ 5.3.2+, Tidemark).
    pub recall_handle: Option<String>,
}

/// Producer settings (Java `DefaultMQProducer` fields).
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    pub group: String,
    pub client: ClientConfig,
    /// Whole-call timeout of a send, retries included (`sendMsgTimeout`).
    pub send_timeout: Duration,
    /// Extra attempts on another broker after a failure (`retryTimesWhenSendFailed`).
    pub retry_times: u32,
    /// Queues a topic gets when the broker creates it on first send (`defaultTopicQueueNums`).
    pub default_topic_queue_nums: i32,
    /// Bodies at least this long are zlib-compressed (`compressMsgBodyOverHowmuch`).
    pub compress_over: usize,
    /// Largest body accepted (`maxMessageSize`).
    pub max_message_size: usize,
}

impl ProducerSettings {
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            client: ClientConfig::default(),
            send_timeout: Duration::from_secs(3),
            retry_times: 2,
            default_topic_queue_nums: 4,
            compress_over: 4096,
            max_message_size: 4 * 1024 * 1024,
        }
    }
}

/// Builds and starts a [`Producer`].
#[derive(Debug, Clone)]
pub struct ProducerBuilder {
    settings: ProducerSettings,
}

impl ProducerBuilder {
    client_setters!();

    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.settings.send_timeout = timeout;
        self
    }

    pub fn retry_times(mut self, retries: u32) -> Self {
        self.settings.retry_times = retries;
        self
    }

    pub fn default_topic_queue_nums(mut self, count: i32) -> Self {
        self.settings.default_topic_queue_nums = count;
        self
    }

    pub fn compress_over(mut self, bytes: usize) -> Self {
        self.settings.compress_over = bytes;
        self
    }

    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.settings.max_message_size = bytes;
        self
    }

    /// Connects to the name server and starts heartbeats and route refresh.
    pub async fn start(self) -> Result<Producer> {
        let instance_name = self
            .settings
            .client
            .instance_name
            .clone()
            .unwrap_or_else(unique_instance_name);
        let instance = ClientInstance::new(self.settings.client.clone(), instance_name);
        instance.register_producer(&self.settings.group);
        instance.start().await?;
        instance.log_started("producer", &self.settings.group);
        let core = Arc::new(SendCore::new(instance, self.settings));
        Ok(Producer { core })
    }
}

/// Sends messages; cheap to clone, one connection set per producer.
#[derive(Debug, Clone)]
pub struct Producer {
    core: Arc<SendCore>,
}

/// How a send waits for the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Await the reply, retrying on another broker.
    Sync,
    /// Do not wait for a reply (one attempt).
    Oneway,
}

impl Producer {
    pub fn builder(group: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder {
            settings: ProducerSettings::new(group),
        }
    }

    /// `ip@instanceName`.
    pub fn client_id(&self) -> &str {
        self.core.instance.client_id()
    }

    pub(crate) fn core(&self) -> Arc<SendCore> {
        self.core.clone()
    }

    /// Sends and waits for the broker's answer, retrying on another broker after a failure.
    pub async fn send(&self, message: Message) -> Result<SendResult> {
        self.core
            .send(message, None, Mode::Sync)
            .await
            .and_then(sync_result)
    }

    /// Starts a send and returns at once; await the handle (or drop it) to learn the outcome.
    pub fn send_async(&self, message: Message) -> JoinHandle<Result<SendResult>> {
        let producer = self.clone();
        tokio::spawn(async move { producer.send(message).await })
    }

    /// Sends without waiting for the broker's answer: one attempt, no result.
    pub async fn send_oneway(&self, message: Message) -> Result<()> {
        self.core
            .send(message, None, Mode::Oneway)
            .await
            .map(|_| ())
    }

    /// Sends to the queue `select` picks from the topic's queues (ordered messages: same key,
    /// same queue). One attempt; the choice is the caller's.
    pub async fn send_with_selector<F>(&self, message: Message, select: F) -> Result<SendResult>
    where
        F: FnOnce(&[MessageQueue], &Message) -> usize,
    {
        let queues = self.core.publish_queues(message.topic()).await?;
        let queues = queues.queues();
        if queues.is_empty() {
            return Err(ClientError::NoRoute {
                topic: message.topic().to_owned(),
                reason: "no writable queue".into(),
            });
        }
        let index = select(queues, &message) % queues.len();
        let queue = queues[index].clone();
        self.send_to_queue(message, queue).await
    }

    /// Sends to one given queue (no retry elsewhere).
    pub async fn send_to_queue(&self, message: Message, queue: MessageQueue) -> Result<SendResult> {
        self.core
            .send(message, Some(queue), Mode::Sync)
            .await
            .and_then(sync_result)
    }

    /// Sends messages of one topic as one SEND_BATCH_MESSAGE (no delay levels, not to retry topics).
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<SendResult> {
        self.core.send_batch(messages).await
    }

    /// Stops heartbeats and closes connections.
    pub async fn shutdown(&self) {
        self.core
            .instance
            .shutdown(Some(&self.core.settings.group), None)
            .await;
    }
}

/// Picks the queue for a key: stable while the queue count stays the same.
pub fn select_by_key(queues: &[MessageQueue], key: &str) -> usize {
    let hash = tidemark_protocol::message::java_string_hash(key).unsigned_abs() as usize;
    hash % queues.len().max(1)
}

/// The send machinery, shared by [`Producer`] and by consumers sending messages back.
pub(crate) struct SendCore {
    pub(crate) instance: Arc<ClientInstance>,
    settings: ProducerSettings,
    publish: Mutex<BTreeMap<String, CachedPublish>>,
    ids: Mutex<UniqueIdGenerator>,
}

impl std::fmt::Debug for SendCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendCore")
            .field("group", &self.settings.group)
            .finish_non_exhaustive()
    }
}

impl SendCore {
    pub(crate) fn send_timeout(&self) -> Duration {
        self.settings.send_timeout
    }

    pub(crate) fn new(instance: Arc<ClientInstance>, settings: ProducerSettings) -> Self {
        let ip = instance
            .client_id()
            .split('@')
            .next()
            .and_then(|ip| ip.parse().ok())
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let instance_hash = tidemark_protocol::message::java_string_hash(instance.client_id());
        Self {
            ids: Mutex::new(UniqueIdGenerator::new(
                ip,
                std::process::id(),
                instance_hash,
            )),
            instance,
            settings,
            publish: Mutex::new(BTreeMap::new()),
        }
    }

    /// The queues to send `topic` to: from its route, or through the auto-create template
    /// when the name server does not know it yet. Rebuilt whenever the route refresh brought
    /// a new route.
    pub(crate) async fn publish_queues(&self, topic: &str) -> Result<Arc<PublishQueues>> {
        let current = self.instance.cached_route(topic);
        if let Some(cached) = lock(&self.publish).get(topic) {
            let unchanged = match (&cached.source, &current) {
                (Some(built_from), Some(now)) => Arc::ptr_eq(built_from, now),
                (None, None) => true,
                _ => false,
            };
            if unchanged {
                return Ok(cached.queues.clone());
            }
        }
        match current {
            Some(route) => self.install_publish_queues(
                topic,
                Some(route.clone()),
                PublishQueues::from_route(topic, &route),
            ),
            None => self.refresh_publish_queues(topic).await,
        }
    }

    fn install_publish_queues(
        &self,
        topic: &str,
        source: Option<Arc<TopicRouteData>>,
        queues: PublishQueues,
    ) -> Result<Arc<PublishQueues>> {
        if queues.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "no writable queue on any master".into(),
            });
        }
        let queues = Arc::new(queues);
        lock(&self.publish).insert(
            topic.to_owned(),
            CachedPublish {
                source,
                queues: queues.clone(),
            },
        );
        Ok(queues)
    }

    async fn refresh_publish_queues(&self, topic: &str) -> Result<Arc<PublishQueues>> {
        match self.instance.update_route(topic).await? {
            Some(route) => {
                let queues = PublishQueues::from_route(topic, &route);
                self.install_publish_queues(topic, Some(route), queues)
            }
            None => {
                let template = self
                    .instance
                    .fetch_route(AUTO_CREATE_TOPIC)
                    .await?
                    .ok_or_else(|| ClientError::NoRoute {
                        topic: topic.to_owned(),
                        reason:
                            "the name server does not know it, and no broker auto-creates topics"
                                .into(),
                    })?;
                self.instance
                    .watch_topic(AUTO_CREATE_TOPIC, Arc::new(template.clone()));
                // Until the broker has registered the new topic, the route refresh keeps asking.
                self.instance.watch_pending_topic(topic);
                let queues = PublishQueues::for_new_topic(
                    topic,
                    &template,
                    self.settings.default_topic_queue_nums,
                );
                self.install_publish_queues(topic, None, queues)
            }
        }
    }

    fn validate(&self, message: &Message) -> Result<()> {
        validate_topic(message.topic())?;
        if message.body().is_empty() {
            return Err(ClientError::InvalidArgument(
                "the message body is empty".into(),
            ));
        }
        if message.body().len() > self.settings.max_message_size {
            return Err(ClientError::InvalidArgument(format!(
                "the message body is {} bytes; at most {} are allowed",
                message.body().len(),
                self.settings.max_message_size
            )));
        }
        Ok(())
    }

    fn next_unique_id(&self) -> String {
        lock(&self.ids).next_id(now_ms())
    }

    /// What every sent message carries, as Java's client adds it: a unique id (`UNIQ_KEY`)
    /// unless the caller set one, and `WAIT=true` unless the caller chose otherwise.
    fn stamp(&self, message: &mut Message) {
        if message
            .property(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .is_none()
        {
            let id = self.next_unique_id();
            message
                .properties_mut()
                .insert(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, id);
        }
        if message.property(property::WAIT_STORE_MSG_OK).is_none() {
            message
                .properties_mut()
                .insert(property::WAIT_STORE_MSG_OK, "true");
        }
    }

    /// Sends one message; `queue` pins the queue (no retry elsewhere).
    async fn send(
        &self,
        message: Message,
        queue: Option<MessageQueue>,
        mode: Mode,
    ) -> Result<Option<SendResult>> {
        self.send_flagged(message, queue, mode, 0).await
    }

    pub(crate) fn group(&self) -> &str {
        &self.settings.group
    }

    /// Sends one message with `extra_sys_flag` set (a transactional half's prepared flag).
    pub(crate) async fn send_flagged(
        &self,
        mut message: Message,
        queue: Option<MessageQueue>,
        mode: Mode,
        extra_sys_flag: i32,
    ) -> Result<Option<SendResult>> {
        self.validate(&message)?;
        self.stamp(&mut message);
        let mut sys_flag = extra_sys_flag;
        let body = if message.body().len() >= self.settings.compress_over {
            sys_flag |= sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZLIB;
            compress(message.body())?
        } else {
            message.body().clone()
        };
        let unique_id = message
            .property(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .unwrap_or_default()
            .to_owned();
        let prepared = Prepared {
            topic: message.topic().to_owned(),
            body,
            sys_flag,
            flag: message.flag(),
            message,
            batch: false,
            unique_id,
        };
        self.send_prepared(prepared, queue, mode).await
    }

    async fn send_batch(&self, messages: Vec<Message>) -> Result<SendResult> {
        let Some(first) = messages.first() else {
            return Err(ClientError::InvalidArgument("an empty batch".into()));
        };
        let topic = first.topic().to_owned();
        let mut entries = Vec::with_capacity(messages.len());
        let mut ids = Vec::with_capacity(messages.len());
        for mut message in messages {
            self.validate(&message)?;
            if message.topic() != topic {
                return Err(ClientError::InvalidArgument(
                    "a batch must have one topic".into(),
                ));
            }
            if message.delay_level().is_some() {
                return Err(ClientError::InvalidArgument(
                    "a batch cannot carry delay levels".into(),
                ));
            }
            if topic.starts_with(RETRY_TOPIC_PREFIX) {
                return Err(ClientError::InvalidArgument(
                    "a batch cannot go to a retry topic".into(),
                ));
            }
            self.stamp(&mut message);
            ids.push(
                message
                    .property(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                    .unwrap_or_default()
                    .to_owned(),
            );
            entries.push(BatchEntry {
                flag: message.flag(),
                body: message.body().clone(),
                properties: message.properties().clone(),
            });
        }
        let body = encode_batch(&entries)?;
        if body.len() > self.settings.max_message_size {
            return Err(ClientError::InvalidArgument(format!(
                "the batch is {} bytes; at most {} are allowed",
                body.len(),
                self.settings.max_message_size
            )));
        }
        // The batch itself carries only WAIT, as Java's MessageBatch does.
        let carrier = Message::new(topic.clone(), body.clone())
            .with_property(property::WAIT_STORE_MSG_OK, "true");
        let prepared = Prepared {
            topic,
            body,
            sys_flag: 0,
            flag: 0,
            message: carrier,
            batch: true,
            unique_id: ids.join(","),
        };
        self.send_prepared(prepared, None, Mode::Sync)
            .await
            .and_then(sync_result)
    }

    async fn send_prepared(
        &self,
        prepared: Prepared,
        pinned: Option<MessageQueue>,
        mode: Mode,
    ) -> Result<Option<SendResult>> {
        let started = tokio::time::Instant::now();
        let timeout = self.settings.send_timeout;
        let attempts = if pinned.is_some() || mode == Mode::Oneway {
            1
        } else {
            1 + self.settings.retry_times
        };
        let mut last_error = None;
        let mut last_broker: Option<String> = None;
        for attempt in 1..=attempts {
            let queue = match &pinned {
                Some(queue) => queue.clone(),
                None => {
                    let queues = self.publish_queues(&prepared.topic).await?;
                    match queues.select(last_broker.as_deref()) {
                        Some(queue) => queue.clone(),
                        None => break,
                    }
                }
            };
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                last_error.get_or_insert(ClientError::Remoting(
                    tidemark_remoting::RemotingError::Timeout {
                        peer: queue.broker_name.clone(),
                        opaque: 0,
                        timeout,
                    },
                ));
                break;
            }
            match self.send_once(&prepared, &queue, mode, left).await {
                Ok(result) => return Ok(result),
                Err(error) => {
                    let retry = match error.response_code() {
                        Some(code) => is_retryable(code),
                        None => !matches!(error, ClientError::InvalidArgument(_)),
                    };
                    debug!(topic = %prepared.topic, attempt, %error, retry, "send attempt failed");
                    if matches!(error, ClientError::BrokerNotFound { .. }) {
                        // The route is stale; fetch it again before the next attempt.
                        lock(&self.publish).remove(&prepared.topic);
                    } else if failover_may_explain(&error) {
                        self.instance.recheck_route(&prepared.topic).await;
                    }
                    last_broker = Some(queue.broker_name.clone());
                    last_error = Some(error);
                    if !retry {
                        break;
                    }
                }
            }
        }
        let last = last_error.unwrap_or_else(|| ClientError::NoRoute {
            topic: prepared.topic.clone(),
            reason: "no queue to send to".into(),
        });
        if attempts == 1 {
            return Err(last);
        }
        Err(ClientError::SendFailed {
            topic: prepared.topic.clone(),
            attempts,
            last: Box::new(last),
        })
    }

    async fn send_once(
        &self,
        prepared: &Prepared,
        queue: &MessageQueue,
        mode: Mode,
        timeout: Duration,
    ) -> Result<Option<SendResult>> {
        let addr = match self.instance.master_addr(&queue.broker_name) {
            Some(addr) => addr,
            None => {
                self.instance.update_route(&queue.topic).await?;
                self.instance
                    .master_addr(&queue.broker_name)
                    .ok_or_else(|| ClientError::BrokerNotFound {
                        broker_name: queue.broker_name.clone(),
                    })?
            }
        };
        let mut properties = prepared.message.properties().clone();
        let mut reconsume_times = None;
        let mut max_reconsume_times = None;
        if prepared.topic.starts_with(RETRY_TOPIC_PREFIX) {
            // The send path carries these two in the header, not as properties.
            reconsume_times = properties
                .remove(property::RECONSUME_TIME)
                .and_then(|v| v.parse().ok());
            max_reconsume_times = properties
                .remove(property::MAX_RECONSUME_TIMES)
                .and_then(|v| v.parse().ok());
        }
        let header = SendMessageRequestHeaderV2 {
            producer_group: self.settings.group.clone(),
            topic: prepared.topic.clone(),
            default_topic: AUTO_CREATE_TOPIC.to_owned(),
            default_topic_queue_nums: self.settings.default_topic_queue_nums,
            queue_id: queue.queue_id,
            sys_flag: prepared.sys_flag,
            born_timestamp: now_ms(),
            flag: prepared.flag,
            properties: Some(properties.encode()),
            reconsume_times: Some(reconsume_times.unwrap_or(0)),
            unit_mode: false,
            max_reconsume_times,
            batch: prepared.batch,
            broker_name: Some(queue.broker_name.clone()),
        };
        let code = if prepared.batch {
            RequestCode::SendBatchMessage
        } else {
            RequestCode::SendMessageV2
        };
        let request =
            RemotingCommand::request_with_header(code, &header).with_body(prepared.body.clone());
        if mode == Mode::Oneway {
            self.instance.oneway(&addr, request).await?;
            return Ok(None);
        }
        let response = self
            .instance
            .call_master(&addr, &queue.broker_name, request, timeout)
            .await?;
        let status = match response.response_code() {
            ResponseCode::Success => SendStatus::SendOk,
            ResponseCode::FlushDiskTimeout => SendStatus::FlushDiskTimeout,
            ResponseCode::FlushSlaveTimeout => SendStatus::FlushSlaveTimeout,
            ResponseCode::SlaveNotAvailable => SendStatus::SlaveNotAvailable,
            code => return Err(broker_error(&addr, code, &response)),
        };
        let header: SendMessageResponseHeader = response
            .decode_header()
            .map_err(|error| bad_response(&addr, error))?;
        Ok(Some(SendResult {
            status,
            msg_id: prepared.unique_id.clone(),
            offset_msg_id: header.msg_id,
            queue: MessageQueue::new(
                queue.topic.clone(),
                queue.broker_name.clone(),
                header.queue_id,
            ),
            queue_offset: header.queue_offset,
            recall_handle: header.recall_handle,
        }))
    }

    /// Sends `message` to `%RETRY%` (or wherever it is addressed) as an ordinary message; used
    /// by consumers when CONSUMER_SEND_MSG_BACK fails and by orderly consumers.
    pub(crate) async fn send_plain(&self, message: Message) -> Result<SendResult> {
        self.send(message, None, Mode::Sync)
            .await
            .and_then(sync_result)
    }
}

/// Publish queues and the route they were built from (`None`: the auto-create template).
struct CachedPublish {
    source: Option<Arc<TopicRouteData>>,
    queues: Arc<PublishQueues>,
}

pub(crate) fn sync_result(result: Option<SendResult>) -> Result<SendResult> {
    result.ok_or_else(|| ClientError::State("a waiting send ended without a result".into()))
}

struct Prepared {
    topic: String,
    body: Bytes,
    sys_flag: i32,
    flag: i32,
    /// Carries the properties sent in the header.
    message: Message,
    batch: bool,
    unique_id: String,
}

/// Broker answers after which Java tries another broker (`retryResponseCodes`, 5.x set).
/// A failure a master change explains: the master is gone, silent, moved or no longer master.
fn failover_may_explain(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Remoting(_) | ClientError::MasterMoved { .. }
    ) || error.response_code() == Some(ResponseCode::ServiceNotAvailable)
}

fn is_retryable(code: ResponseCode) -> bool {
    matches!(
        code,
        ResponseCode::TopicNotExist
            | ResponseCode::ServiceNotAvailable
            | ResponseCode::SystemError
            | ResponseCode::SystemBusy
            | ResponseCode::NoPermission
            | ResponseCode::NoBuyerId
            | ResponseCode::NotInCurrentUnit
    )
}

fn compress(body: &Bytes) -> Result<Bytes> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
    encoder.write_all(body)?;
    Ok(Bytes::from(encoder.finish()?))
}

/// RocketMQ's topic rule: `[%|a-zA-Z0-9_-]`, at most 127 characters.
pub(crate) fn validate_topic(topic: &str) -> Result<()> {
    if topic.is_empty() || topic.len() > 127 {
        return Err(ClientError::InvalidArgument(format!(
            "topic name must have 1 to 127 characters: {topic:?}"
        )));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
    {
        return Err(ClientError::InvalidArgument(format!(
            "topic {topic:?} contains {bad:?}; allowed are letters, digits, %, |, _ and -"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn topic_names_follow_rocketmq_rules() {
        assert!(validate_topic("Orders_2024-x").is_ok());
        assert!(validate_topic("%RETRY%group").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("has space").is_err());
        assert!(validate_topic(&"x".repeat(128)).is_err());
    }

    #[test]
    fn compressed_bodies_are_zlib_streams() {
        let body = Bytes::from(vec![b'a'; 10_000]);
        let packed = compress(&body).expect("compress");
        assert!(packed.len() < body.len());
        let mut unpacked = Vec::new();
        flate2::read::ZlibDecoder::new(&packed[..])
            .read_to_end(&mut unpacked)
            .expect("inflate");
        assert_eq!(unpacked, body);
    }

    #[test]
    fn only_javas_retry_codes_retry() {
        assert!(is_retryable(ResponseCode::SystemError));
        assert!(is_retryable(ResponseCode::TopicNotExist));
        assert!(!is_retryable(ResponseCode::MessageIllegal));
    }

    #[test]
    fn key_selection_is_stable() {
        let queues: Vec<_> = (0..4).map(|id| MessageQueue::new("T", "b", id)).collect();
        assert_eq!(
            select_by_key(&queues, "order-7"),
            select_by_key(&queues, "order-7")
        );
        assert!(select_by_key(&queues, "order-7") < 4);
    }
}
