//! [`ClientInstance`]: one producer's or consumer's view of the cluster — routes from the name
//! servers, broker addresses, heartbeats, and the typed requests to brokers (Java
//! `MQClientInstance` plus `MQClientAPIImpl`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;
use tidemark_protocol::acked::{
    AckedRanges, ACKED_RANGES_FIELD, FROM_CONSUMER_FIELD, HELD_FIELD, RELEASED_FIELD,
    TAKE_OVER_FIELD,
};

use tidemark_protocol::body::{
    ConsumerData, ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
    TopicRouteData,
};
use tidemark_protocol::headers::{
    ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{decode_records, DecodeOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{RemotingClient, RequestHandler};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::broker_requests::BrokerRequestRouter;
pub(crate) use crate::broker_requests::BrokerRequests;
use crate::config::ClientConfig;
use crate::error::{ClientError, Result};
use crate::message::MessageExt;
use crate::offset_store::CommitDelivery;
use crate::route::BrokerAddressTable;
use crate::BoxFuture;

mod broker_watch;
mod heartbeats;
pub(crate) use broker_watch::HELD_PULL_PROBE_AFTER;

/// The topic whose route stands in for topics the name server does not know yet
/// (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Every Java client also registers this producer group (`MixAll.CLIENT_INNER_PRODUCER_GROUP`).
pub const CLIENT_INNER_PRODUCER_GROUP: &str = "CLIENT_INNER_PRODUCER";

/// Long-poll hold time the push consumer asks for (`BROKER_SUSPEND_MAX_TIME_MILLIS`).
pub const PULL_SUSPEND: Duration = Duration::from_secs(15);
/// RPC timeout of a held pull (`CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND`).
pub const PULL_TIMEOUT_WHEN_SUSPENDED: Duration = Duration::from_secs(30);

/// What a pull found.
#[derive(Debug)]
pub(crate) enum PullStatus {
    Found(Vec<MessageExt>),
    NoNewMessage,
    NoMatchedMessage,
    OffsetIllegal,
}

#[derive(Debug)]
pub(crate) struct PullOutcome {
    pub status: PullStatus,
    pub next_begin_offset: i64,
    pub suggest_which_broker_id: i64,
}

/// One producer's or consumer's connection to the cluster.
pub(crate) struct ClientInstance {
    config: ClientConfig,
    client_id: OnceLock<String>,
    instance_name: String,
    remoting: RemotingClient,
    router: Arc<BrokerRequestRouter>,
    routes: Mutex<BTreeMap<String, Arc<TopicRouteData>>>,
    /// Topics used before the name server knew them (sent through the auto-create template).
    pending_topics: Mutex<BTreeSet<String>>,
    brokers: Mutex<BrokerAddressTable>,
    namesrv_next: AtomicUsize,
    producer_groups: Mutex<BTreeSet<String>>,
    consumers: Mutex<Vec<ConsumerData>>,
    /// When a heartbeat was last sent out of turn (see [`heartbeat_now`](Self::heartbeat_now)).
    unscheduled_heartbeat_ms: std::sync::atomic::AtomicI64,
    /// Brokers that answered a heartbeat of this client (so know its groups).
    heard_by: Mutex<BTreeSet<String>>,
    broker_watch: broker_watch::BrokerWatch,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for ClientInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientInstance")
            .field("client_id", &self.client_id.get())
            .finish_non_exhaustive()
    }
}

impl ClientInstance {
    pub fn new(config: ClientConfig, instance_name: String) -> Arc<Self> {
        let router = Arc::new(BrokerRequestRouter::default());
        let handler: Arc<dyn RequestHandler> = router.clone();
        Arc::new(Self {
            remoting: RemotingClient::new(config.remoting(), Some(handler)),
            router,
            config,
            client_id: OnceLock::new(),
            instance_name,
            routes: Mutex::new(BTreeMap::new()),
            pending_topics: Mutex::new(BTreeSet::new()),
            brokers: Mutex::new(BrokerAddressTable::default()),
            namesrv_next: AtomicUsize::new(0),
            producer_groups: Mutex::new(BTreeSet::new()),
            consumers: Mutex::new(Vec::new()),
            unscheduled_heartbeat_ms: std::sync::atomic::AtomicI64::new(0),
            heard_by: Mutex::new(BTreeSet::new()),
            broker_watch: broker_watch::BrokerWatch::default(),
            shutdown: CancellationToken::new(),
        })
    }

    /// `ip@instanceName`, fixed at [`ClientInstance::start`].
    pub fn client_id(&self) -> &str {
        self.client_id.get().map(String::as_str).unwrap_or("")
    }

    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Routes broker requests (rebalance notices, offset resets) to `target`.
    pub fn serve_broker_requests(&self, target: Weak<dyn BrokerRequests>) {
        let _ = self.router.target.set(target);
    }

    pub fn register_producer(&self, group: &str) {
        lock(&self.producer_groups).insert(group.to_owned());
    }

    pub fn register_consumer(&self, data: ConsumerData) {
        lock(&self.consumers).push(data);
    }

    /// Fixes the client id and starts route refresh and heartbeats.
    pub async fn start(self: &Arc<Self>) -> Result<()> {
        if self.config.namesrv_addrs.is_empty() {
            return Err(ClientError::InvalidArgument(
                "no name server address configured".into(),
            ));
        }
        let ip = match &self.config.client_ip {
            Some(ip) => ip.clone(),
            None => self.local_ip().await?,
        };
        let _ = self.client_id.set(format!("{ip}@{}", self.instance_name));
        crate::every(
            self,
            self.shutdown.clone(),
            self.config.poll_name_server_interval,
            |instance| async move { instance.refresh_all_routes().await },
        );
        crate::every(
            self,
            self.shutdown.clone(),
            self.config.heartbeat_interval,
            |instance| async move { instance.send_heartbeats().await },
        );
        Ok(())
    }

    /// The IP this host reaches the first answering name server from.
    async fn local_ip(&self) -> Result<String> {
        let mut last = None;
        for addr in &self.config.namesrv_addrs {
            match self.remoting.channel(addr).await {
                Ok(channel) => return Ok(channel.local_addr().ip().to_string()),
                Err(error) => last = Some(error),
            }
        }
        Err(last.map_or_else(
            || ClientError::InvalidArgument("no name server address configured".into()),
            ClientError::from,
        ))
    }

    /// Stops the background work, says goodbye to every broker, closes connections.
    pub async fn shutdown(&self, producer_group: Option<&str>, consumer_group: Option<&str>) {
        self.shutdown.cancel();
        let addresses: Vec<String> = lock(&self.brokers)
            .all_addresses()
            .map(|(_, _, addr)| addr.to_owned())
            .collect();
        for addr in addresses {
            let header = UnregisterClientRequestHeader {
                client_id: self.client_id().to_owned(),
                producer_group: producer_group.map(str::to_owned),
                consumer_group: consumer_group.map(str::to_owned),
            };
            let request =
                RemotingCommand::request_with_header(RequestCode::UnregisterClient, &header);
            if let Err(error) = self.call(&addr, request).await {
                debug!(%addr, %error, "unregister failed");
            }
        }
        self.remoting.shutdown();
    }

    // --- routes ----------------------------------------------------------------------------

    /// Asks the name servers for `topic`'s route: `Ok(None)` when it does not exist.
    pub async fn fetch_route(&self, topic: &str) -> Result<Option<TopicRouteData>> {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
            accept_standard_json_only: None,
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::GetRouteInfoByTopic, &header);
        let (addr, response) = self.call_namesrv(request).await?;
        match response.response_code() {
            ResponseCode::Success => Ok(Some(
                TopicRouteData::from_json_bytes(&response.body)
                    .map_err(|error| bad_response(&addr, error))?,
            )),
            ResponseCode::TopicNotExist => Ok(None),
            code => Err(broker_error(&addr, code, &response)),
        }
    }

    /// Sends `request` to the name servers in turn, starting with the one that answered last,
    /// until one answers (whatever its code); returns which one did, and its answer.
    pub async fn call_namesrv(
        &self,
        request: RemotingCommand,
    ) -> Result<(String, RemotingCommand)> {
        let servers = &self.config.namesrv_addrs;
        let start = self.namesrv_next.load(Ordering::Relaxed);
        let mut last_error = None;
        for step in 0..servers.len() {
            let index = (start + step) % servers.len();
            let addr = &servers[index];
            match self.call(addr, request.clone()).await {
                Ok(response) => {
                    self.namesrv_next.store(index, Ordering::Relaxed);
                    return Ok((addr.clone(), response));
                }
                Err(error) => {
                    debug!(%addr, %error, "name server unreachable");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| ClientError::InvalidArgument("no name server".into())))
    }

    /// Fetches and caches `topic`'s route (and its brokers' addresses).
    pub async fn update_route(&self, topic: &str) -> Result<Option<Arc<TopicRouteData>>> {
        let Some(route) = self.fetch_route(topic).await? else {
            return Ok(None);
        };
        let route = Arc::new(route);
        let merged = lock(&self.brokers).merge(&route.broker_datas);
        lock(&self.routes).insert(topic.to_owned(), route.clone());
        if merged.changed {
            self.broker_watch.announce_change();
        }
        if (merged.added || merged.changed) && self.must_be_known() {
            // A consumer must be known to a broker before it can rebalance or pull there, and a
            // transactional producer before the broker can ask it about a half message (a new
            // master, after a failover, too): do not leave that to the next heartbeat period,
            // which is longer than a broker keeps checking back at the shortest settings.
            self.send_heartbeats().await;
        }
        Ok(Some(route))
    }

    pub fn cached_route(&self, topic: &str) -> Option<Arc<TopicRouteData>> {
        lock(&self.routes).get(topic).cloned()
    }

    pub fn watch_topic(&self, topic: &str, route: Arc<TopicRouteData>) {
        if lock(&self.brokers).merge(&route.broker_datas).changed {
            self.broker_watch.announce_change();
        }
        lock(&self.routes).insert(topic.to_owned(), route);
    }

    /// Keeps asking for `topic`'s route until the name server knows it.
    pub fn watch_pending_topic(&self, topic: &str) {
        lock(&self.pending_topics).insert(topic.to_owned());
    }

    async fn refresh_all_routes(&self) {
        let mut topics: Vec<String> = lock(&self.routes).keys().cloned().collect();
        topics.extend(lock(&self.pending_topics).iter().cloned());
        for topic in topics {
            match self.update_route(&topic).await {
                Ok(Some(_)) => {
                    lock(&self.pending_topics).remove(&topic);
                }
                Ok(None) => {}
                Err(error) => debug!(%topic, %error, "route refresh failed"),
            }
        }
    }

    pub fn master_addr(&self, broker_name: &str) -> Option<String> {
        lock(&self.brokers).master(broker_name).map(str::to_owned)
    }

    /// The address to pull from or commit to: `broker_id` if known, else any address of the
    /// broker name (so a slave serves while the master is away). The flag says "slave".
    pub fn subscribe_addr(&self, broker_name: &str, broker_id: i64) -> Option<(String, bool)> {
        lock(&self.brokers)
            .for_subscribe(broker_name, broker_id, false)
            .map(|(addr, slave)| (addr.to_owned(), slave))
    }

    /// [`ClientInstance::subscribe_addr`], refreshing `topic`'s route once if the broker is unknown.
    pub async fn subscribe_addr_refreshing(
        &self,
        topic: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> Result<(String, bool)> {
        if let Some(found) = self.subscribe_addr(broker_name, broker_id) {
            return Ok(found);
        }
        self.update_route(topic).await?;
        self.subscribe_addr(broker_name, broker_id)
            .ok_or_else(|| ClientError::BrokerNotFound {
                broker_name: broker_name.to_owned(),
            })
    }

    // --- requests --------------------------------------------------------------------------

    /// Sends a request with the configured timeout.
    /// The connections and the request timeout, for calls to servers that are not brokers.
    pub(crate) fn remoting_and_timeout(&self) -> (&RemotingClient, Duration) {
        (&self.remoting, self.config.request_timeout)
    }

    pub async fn call(&self, addr: &str, request: RemotingCommand) -> Result<RemotingCommand> {
        self.call_with_timeout(addr, request, self.config.request_timeout)
            .await
    }

    pub async fn call_with_timeout(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        request.serialize_type = self.config.serialize_type;
        Ok(self.remoting.invoke(addr, request, timeout).await?)
    }

    pub async fn oneway(&self, addr: &str, mut request: RemotingCommand) -> Result<()> {
        request.serialize_type = self.config.serialize_type;
        Ok(self.remoting.invoke_oneway(addr, request).await?)
    }

    pub async fn pull(
        &self,
        addr: &str,
        header: &PullMessageRequestHeader,
        queue: &MessageQueue,
        timeout: Duration,
        extra: &[(&str, String)],
    ) -> Result<PullOutcome> {
        let mut request = RemotingCommand::request_with_header(RequestCode::PullMessage, header);
        for (key, value) in extra {
            request.ext_fields.insert(*key, value.clone());
        }
        let response = self.call_with_timeout(addr, request, timeout).await?;
        let code = response.response_code();
        let status = match code {
            ResponseCode::Success => {
                let records = decode_records(&response.body, DecodeOptions::default())?;
                let mut messages = Vec::with_capacity(records.len());
                for record in records {
                    messages.push(MessageExt::from_record(record, queue)?);
                }
                PullStatus::Found(messages)
            }
            ResponseCode::PullNotFound => PullStatus::NoNewMessage,
            ResponseCode::PullRetryImmediately => PullStatus::NoMatchedMessage,
            ResponseCode::PullOffsetMoved => PullStatus::OffsetIllegal,
            other => return Err(broker_error(addr, other, &response)),
        };
        let header: PullMessageResponseHeader = response
            .decode_header()
            .map_err(|error| bad_response(addr, error))?;
        Ok(PullOutcome {
            status,
            next_begin_offset: header.next_begin_offset,
            suggest_which_broker_id: header.suggest_which_broker_id,
        })
    }

    /// QUERY_CONSUMER_OFFSET: `Ok(None)` only for QUERY_NOT_FOUND.
    /// Whether another live consumer of the group holds `queue` and has not released it: a
    /// take-over QUERY_CONSUMER_OFFSET (Apache brokers never say so).
    pub async fn queue_held_by_another(
        &self,
        addr: &str,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<bool> {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            set_zero_if_not_found: None,
            broker_name: Some(queue.broker_name.clone()),
        };
        let mut request =
            RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header);
        request.ext_fields.insert(TAKE_OVER_FIELD, "1");
        let response = self.call(addr, request).await?;
        Ok(response.ext_fields.get(HELD_FIELD) == Some("1"))
    }

    pub async fn query_consumer_offset(
        &self,
        addr: &str,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<(i64, AckedRanges)>> {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            set_zero_if_not_found: None,
            broker_name: Some(queue.broker_name.clone()),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header);
        let response = self.call(addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => {
                let header: OffsetResponseHeader = response
                    .decode_header()
                    .map_err(|error| bad_response(addr, error))?;
                // A Tidemark broker adds the acknowledged ranges above the offset; anything
                // unreadable there only costs redeliveries, so it reads as none.
                let acked = response
                    .ext_fields
                    .get(ACKED_RANGES_FIELD)
                    .and_then(|text| AckedRanges::decode(header.offset, text).ok())
                    .unwrap_or_default();
                Ok(Some((header.offset, acked)))
            }
            ResponseCode::QueryNotFound => Ok(None),
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// UPDATE_CONSUMER_OFFSET, oneway or waiting for the broker's reply.
    pub async fn update_consumer_offset(
        &self,
        addr: &str,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
        acked: &AckedRanges,
        delivery: CommitDelivery,
    ) -> Result<()> {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            commit_offset: offset,
            broker_name: Some(queue.broker_name.clone()),
        };
        let mut request =
            RemotingCommand::request_with_header(RequestCode::UpdateConsumerOffset, &header);
        request.ext_fields.insert(FROM_CONSUMER_FIELD, "1");
        let ranges = acked.encode(offset);
        if !ranges.is_empty() {
            request.ext_fields.insert(ACKED_RANGES_FIELD, ranges);
        }
        if delivery == CommitDelivery::Released {
            request.ext_fields.insert(RELEASED_FIELD, "1");
        }
        match delivery {
            CommitDelivery::Oneway => self.oneway(addr, request).await,
            CommitDelivery::Acknowledged | CommitDelivery::Released => {
                let response = self.call(addr, request).await?;
                match response.response_code() {
                    ResponseCode::Success => Ok(()),
                    code => Err(broker_error(addr, code, &response)),
                }
            }
        }
    }

    pub async fn max_offset(&self, addr: &str, queue: &MessageQueue) -> Result<i64> {
        let header = GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            committed: None,
            broker_name: Some(queue.broker_name.clone()),
        };
        let request = RemotingCommand::request_with_header(RequestCode::GetMaxOffset, &header);
        self.offset_call(addr, request).await
    }

    pub async fn min_offset(&self, addr: &str, queue: &MessageQueue) -> Result<i64> {
        let header = tidemark_protocol::headers::GetMinOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            broker_name: Some(queue.broker_name.clone()),
        };
        let request = RemotingCommand::request_with_header(RequestCode::GetMinOffset, &header);
        self.offset_call(addr, request).await
    }

    pub async fn search_offset(
        &self,
        addr: &str,
        queue: &MessageQueue,
        timestamp_ms: i64,
    ) -> Result<i64> {
        let header = SearchOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            timestamp: timestamp_ms,
            boundary_type: None,
            broker_name: Some(queue.broker_name.clone()),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::SearchOffsetByTimestamp, &header);
        self.offset_call(addr, request).await
    }

    async fn offset_call(&self, addr: &str, request: RemotingCommand) -> Result<i64> {
        let response = self.call(addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => {
                let header: OffsetResponseHeader = response
                    .decode_header()
                    .map_err(|error| bad_response(addr, error))?;
                Ok(header.offset)
            }
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// GET_CONSUMER_LIST_BY_GROUP, sorted as every member must sort it.
    pub async fn consumer_ids(&self, addr: &str, group: &str) -> Result<Vec<String>> {
        let header = GetConsumerListByGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::GetConsumerListByGroup, &header);
        let response = self.call(addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => {
                let mut ids = ConsumerListBody::from_json_bytes(&response.body)
                    .map_err(|error| bad_response(addr, error))?
                    .consumer_id_list;
                ids.sort();
                ids.dedup();
                Ok(ids)
            }
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// CONSUMER_SEND_MSG_BACK to the master of the message's broker.
    pub async fn send_back(
        &self,
        addr: &str,
        header: &ConsumerSendMsgBackRequestHeader,
    ) -> Result<()> {
        let request =
            RemotingCommand::request_with_header(RequestCode::ConsumerSendMsgBack, header);
        let response = self
            .call_with_timeout(addr, request, Duration::from_secs(5))
            .await?;
        match response.response_code() {
            ResponseCode::Success => Ok(()),
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// LOCK_BATCH_MQ: the queues the broker now holds for this client.
    pub async fn lock_queues(
        &self,
        addr: &str,
        group: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<BTreeSet<MessageQueue>> {
        let body = LockBatchRequestBody {
            client_id: self.client_id().to_owned(),
            consumer_group: group.to_owned(),
            mq_set: queues,
            only_this_broker: false,
        };
        let request =
            RemotingCommand::request(RequestCode::LockBatchMq).with_body(body.to_json_bytes());
        let response = self.call(addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => Ok(LockBatchResponseBody::from_json_bytes(&response.body)
                .map_err(|error| bad_response(addr, error))?
                .lock_ok_mq_set
                .into_iter()
                .collect()),
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// UNLOCK_BATCH_MQ, oneway.
    pub async fn unlock_queues(
        &self,
        addr: &str,
        group: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<()> {
        let body = LockBatchRequestBody {
            client_id: self.client_id().to_owned(),
            consumer_group: group.to_owned(),
            mq_set: queues,
            only_this_broker: false,
        };
        let request =
            RemotingCommand::request(RequestCode::UnlockBatchMq).with_body(body.to_json_bytes());
        self.oneway(addr, request).await
    }

    pub fn log_started(&self, role: &str, group: &str) {
        info!(client_id = %self.client_id(), %role, %group, "started");
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn broker_error(
    peer: &str,
    code: ResponseCode,
    response: &RemotingCommand,
) -> ClientError {
    ClientError::Broker {
        peer: peer.to_owned(),
        code,
        remark: response.remark.clone().unwrap_or_default(),
    }
}

pub(crate) fn bad_response(peer: &str, error: impl std::fmt::Display) -> ClientError {
    ClientError::BadResponse {
        peer: peer.to_owned(),
        detail: error.to_string(),
    }
}

/// The broker end of a remote offset store.
pub(crate) struct InstanceOffsetBroker {
    pub instance: Arc<ClientInstance>,
}

impl crate::offset_store::OffsetBroker for InstanceOffsetBroker {
    fn query<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
    ) -> BoxFuture<'a, Result<Option<(i64, AckedRanges)>>> {
        Box::pin(async move {
            let addr = match self.instance.master_addr(&queue.broker_name) {
                Some(addr) => addr,
                None => {
                    self.instance
                        .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, 0)
                        .await?
                        .0
                }
            };
            self.instance
                .query_consumer_offset(&addr, group, queue)
                .await
        })
    }

    fn held_by_another<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let Some(addr) = self.instance.master_addr(&queue.broker_name) else {
                return Ok(false);
            };
            self.instance
                .queue_held_by_another(&addr, group, queue)
                .await
        })
    }

    fn commit<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
        offset: i64,
        acked: &'a AckedRanges,
        delivery: CommitDelivery,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            // The master if known, else any address of the broker name (a slave while the
            // master is away), refreshing the route once when the broker is unknown.
            let (addr, _) = self
                .instance
                .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, 0)
                .await?;
            self.instance
                .update_consumer_offset(&addr, group, queue, offset, acked, delivery)
                .await
        })
    }
}
