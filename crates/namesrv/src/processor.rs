//! Turns name-server requests into `RouteTable` operations and answers them as Java does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tidemark_protocol::body::{
    KvTable, RegisterBrokerBody, TopicConfigSerializeWrapper, TopicList,
};
use tidemark_protocol::code::version;
use tidemark_protocol::headers::{
    GetKvConfigResponseHeader, GetKvListByNamespaceRequestHeader, GetRouteInfoRequestHeader,
    KvConfigKeyRequestHeader, PutKvConfigRequestHeader, QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_protocol::{HeaderError, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{Channel, Reply, RequestHandler};
use tracing::{debug, info};

use crate::route_table::{Registration, RouteTable};

/// The KV namespace whose entries the name server returns to registering brokers.
pub const ORDER_TOPIC_CONFIG_NAMESPACE: &str = "ORDER_TOPIC_CONFIG";

/// Shared name-server state: routes and the KV config (kept in memory).
#[derive(Debug, Default)]
pub struct NameServerState {
    pub routes: Mutex<RouteTable>,
    pub kv: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// The settings GET_NAMESRV_CONFIG shows, under RocketMQ's names (fixed while serving).
    pub settings: BTreeMap<String, String>,
}

pub(crate) use tidemark_remoting::now_ms;

/// The request handler of the name server.
#[derive(Debug, Clone)]
pub struct NameServerHandler {
    state: Arc<NameServerState>,
}

impl NameServerHandler {
    pub fn new(state: Arc<NameServerState>) -> Self {
        Self { state }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, RouteTable> {
        self.state
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn kv(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, String>>> {
        self.state.kv.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one request; pure apart from the shared state, so tests call it directly.
    pub fn process(&self, channel_id: Option<u64>, request: &RemotingCommand) -> Reply {
        let result = match request.request_code() {
            RequestCode::RegisterBroker => self.register_broker(channel_id, request),
            RequestCode::UnregisterBroker => self.unregister_broker(request),
            RequestCode::GetRouteInfoByTopic => self.route_info(request),
            RequestCode::GetBrokerClusterInfo => Ok(success_with_body(
                self.routes().cluster_info().to_json_bytes(),
            )),
            RequestCode::GetAllTopicListFromNameserver => Ok(success_with_body(
                TopicList {
                    topic_list: self.routes().topics(),
                    broker_addr: None,
                }
                .to_json_bytes(),
            )),
            RequestCode::GetTopicsByCluster => self.topics_by_cluster(request),
            RequestCode::QueryDataVersion => self.query_data_version(request),
            RequestCode::PutKvConfig => self.put_kv(request),
            RequestCode::GetKvConfig => self.get_kv(request),
            RequestCode::DeleteKvConfig => self.delete_kv(request),
            RequestCode::GetKvListByNamespace => self.kv_list(request),
            RequestCode::WipeWritePermOfBroker | RequestCode::AddWritePermOfBroker => {
                self.write_permission(request)
            }
            RequestCode::DeleteTopicInNamesrv => self.delete_topic(request),
            RequestCode::GetNamesrvConfig => Ok(success_with_body(self.settings_text())),
            // Nothing a Tidemark name server is configured with changes while it serves.
            RequestCode::UpdateNamesrvConfig => Ok(RemotingCommand::response(
                ResponseCode::NoPermission,
                "Can not update config in black list. A Tidemark name server's settings are \
                 read when it starts; change them on its command line and restart"
                    .to_owned(),
            )),
            _ => return Reply::Unsupported,
        };
        Reply::Response(result.unwrap_or_else(|error| {
            RemotingCommand::response(
                ResponseCode::SystemError,
                format!("bad request header: {error}"),
            )
        }))
    }

    /// Java `Properties` text, one `key=value` per line.
    fn settings_text(&self) -> Vec<u8> {
        let mut text = String::new();
        for (key, value) in &self.state.settings {
            text.push_str(key);
            text.push('=');
            text.push_str(value);
            text.push('\n');
        }
        text.into_bytes()
    }

    fn register_broker(
        &self,
        channel_id: Option<u64>,
        request: &RemotingCommand,
    ) -> Result<RemotingCommand, HeaderError> {
        let header: RegisterBrokerRequestHeader = request.decode_header()?;
        if header.body_crc32 != 0 {
            let computed = (crc32fast::hash(&request.body) & 0x7FFF_FFFF) as i32;
            if computed != header.body_crc32 {
                return Ok(RemotingCommand::response(
                    ResponseCode::SystemError,
                    "crc32 not match".to_owned(),
                ));
            }
        }
        if header.compressed {
            return Ok(RemotingCommand::response(
                ResponseCode::SystemError,
                "compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false"
                    .to_owned(),
            ));
        }
        // Brokers older than 3.0.11 send the bare topic wrapper.
        let topics = if request.body.is_empty() {
            TopicConfigSerializeWrapper::default()
        } else if request.version >= version::V3_0_11 {
            match RegisterBrokerBody::from_json_bytes(&request.body) {
                Ok(body) => body.topic_config_serialize_wrapper,
                Err(error) => {
                    return Ok(RemotingCommand::response(
                        ResponseCode::SystemError,
                        format!("bad register body: {error}"),
                    ))
                }
            }
        } else {
            match TopicConfigSerializeWrapper::from_json_bytes(&request.body) {
                Ok(wrapper) => wrapper,
                Err(error) => {
                    return Ok(RemotingCommand::response(
                        ResponseCode::SystemError,
                        format!("bad register body: {error}"),
                    ))
                }
            }
        };
        let topic_count = topics.topic_config_table.len();
        let reply = self.routes().register_broker(
            Registration {
                cluster_name: header.cluster_name.clone(),
                broker_name: header.broker_name.clone(),
                broker_addr: header.broker_addr.clone(),
                broker_id: header.broker_id,
                ha_server_addr: header.ha_server_addr,
                topics,
                channel_id,
            },
            now_ms(),
        );
        debug!(broker = %header.broker_addr, name = %header.broker_name, id = header.broker_id, topics = topic_count, "broker registered");
        let order_topics = KvTable {
            table: self
                .kv()
                .get(ORDER_TOPIC_CONFIG_NAMESPACE)
                .cloned()
                .unwrap_or_default(),
        };
        Ok(RemotingCommand::response(ResponseCode::Success, None)
            .with_header(&RegisterBrokerResponseHeader {
                ha_server_addr: reply.ha_server_addr,
                master_addr: reply.master_addr,
            })
            .with_body(order_topics.to_json_bytes()))
    }

    fn unregister_broker(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: UnregisterBrokerRequestHeader = request.decode_header()?;
        if self.routes().unregister_broker(&header.broker_addr) {
            info!(broker = %header.broker_addr, "broker unregistered");
        }
        Ok(RemotingCommand::response(ResponseCode::Success, None))
    }

    fn route_info(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: GetRouteInfoRequestHeader = request.decode_header()?;
        let Some(route) = self.routes().topic_route(&header.topic) else {
            return Ok(RemotingCommand::response(
                ResponseCode::TopicNotExist,
                format!(
                    "No topic route info in name server for the topic: {}",
                    header.topic
                ),
            ));
        };
        // Old clients (Go before 2.1.2 among them) need fastjson's unquoted integer keys.
        let standard =
            request.version >= version::V4_9_4 || header.accept_standard_json_only.unwrap_or(false);
        let options = if standard {
            WriteOptions::STANDARD
        } else {
            WriteOptions::FASTJSON
        };
        Ok(success_with_body(route.to_json_bytes_with(options)))
    }

    fn topics_by_cluster(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let cluster =
            tidemark_protocol::ext_fields::read_required::<String>(&request.ext_fields, "cluster")?;
        let topics = self.routes().topics_of_cluster(&cluster);
        Ok(success_with_body(
            TopicList {
                topic_list: topics,
                broker_addr: None,
            }
            .to_json_bytes(),
        ))
    }

    fn query_data_version(
        &self,
        request: &RemotingCommand,
    ) -> Result<RemotingCommand, HeaderError> {
        let header: QueryDataVersionRequestHeader = request.decode_header()?;
        let version = match tidemark_protocol::body::DataVersion::from_json_bytes(&request.body) {
            Ok(version) => version,
            Err(error) => {
                return Ok(RemotingCommand::response(
                    ResponseCode::SystemError,
                    format!("bad data version: {error}"),
                ))
            }
        };
        let mut routes = self.routes();
        let changed = routes.data_version_changed(&header.broker_addr, &version);
        if !changed {
            routes.refresh(&header.broker_addr, now_ms());
        }
        Ok(RemotingCommand::response(ResponseCode::Success, None)
            .with_header(&QueryDataVersionResponseHeader { changed })
            .with_body(version.to_json_bytes()))
    }

    fn put_kv(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: PutKvConfigRequestHeader = request.decode_header()?;
        self.kv()
            .entry(header.namespace)
            .or_default()
            .insert(header.key, header.value);
        Ok(RemotingCommand::response(ResponseCode::Success, None))
    }

    fn get_kv(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: KvConfigKeyRequestHeader = request.decode_header()?;
        let value = self
            .kv()
            .get(&header.namespace)
            .and_then(|entries| entries.get(&header.key))
            .cloned();
        Ok(match value {
            Some(value) => RemotingCommand::response(ResponseCode::Success, None)
                .with_header(&GetKvConfigResponseHeader { value: Some(value) }),
            // Java answers QUERY_NOT_FOUND; clients asking for order-topic config at start expect it.
            None => RemotingCommand::response(
                ResponseCode::QueryNotFound,
                format!(
                    "No config item, Namespace: {} Key: {}",
                    header.namespace, header.key
                ),
            ),
        })
    }

    fn delete_kv(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: KvConfigKeyRequestHeader = request.decode_header()?;
        if let Some(entries) = self.kv().get_mut(&header.namespace) {
            entries.remove(&header.key);
        }
        Ok(RemotingCommand::response(ResponseCode::Success, None))
    }

    fn kv_list(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let header: GetKvListByNamespaceRequestHeader = request.decode_header()?;
        Ok(match self.kv().get(&header.namespace) {
            Some(entries) => success_with_body(
                KvTable {
                    table: entries.clone(),
                }
                .to_json_bytes(),
            ),
            None => RemotingCommand::response(
                ResponseCode::QueryNotFound,
                format!("No config item, Namespace: {}", header.namespace),
            ),
        })
    }

    fn write_permission(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let broker_name = tidemark_protocol::ext_fields::read_required::<String>(
            &request.ext_fields,
            "brokerName",
        )?;
        let writable = request.request_code() == RequestCode::AddWritePermOfBroker;
        let changed = self.routes().set_write_permission(&broker_name, writable);
        let key = if writable {
            "addTopicCount"
        } else {
            "wipeTopicCount"
        };
        let mut response = RemotingCommand::response(ResponseCode::Success, None);
        response.ext_fields.insert(key, changed.to_string());
        Ok(response)
    }

    fn delete_topic(&self, request: &RemotingCommand) -> Result<RemotingCommand, HeaderError> {
        let topic =
            tidemark_protocol::ext_fields::read_required::<String>(&request.ext_fields, "topic")?;
        self.routes().delete_topic(&topic);
        Ok(RemotingCommand::response(ResponseCode::Success, None))
    }
}

fn success_with_body(body: Vec<u8>) -> RemotingCommand {
    RemotingCommand::response(ResponseCode::Success, None).with_body(Bytes::from(body))
}

impl RequestHandler for NameServerHandler {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> tidemark_remoting::ReplyFuture {
        let reply = self.process(Some(channel.id()), &request);
        Box::pin(async move { reply })
    }

    fn on_close(&self, channel: &Channel) {
        for addr in self.routes().channel_closed(channel.id()) {
            info!(broker = %addr, "broker connection closed; unregistered");
        }
    }
}
