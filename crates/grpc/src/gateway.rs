//! The gateway: what every RPC shares — the client behind a call, the broker it is served by,
//! and the one way a call reaches a broker: a remoting request to this broker's own handler over
//! the client's in-process connection, or forwarded to the master of the broker that holds the
//! queue ([`Cluster`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tidemark_broker::history::GATEWAY_ACCOUNT;
use tidemark_broker::{BrokerHandler, BrokerState};
use tidemark_protocol::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, ProducerData,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{Reply, RequestHandler};
use tonic::Request;
use tracing::debug;

use crate::cluster::{Cluster, Target};
use crate::convert::full_name;
use crate::proto::{settings::PubSub, ClientType, Code, Settings, Status};
use crate::renewals::Renewals;
use crate::sessions::{Session, Sessions};
use crate::status::status;

/// The metadata key every RocketMQ 5 client sends with its id.
pub const CLIENT_ID_HEADER: &str = "x-mq-client-id";

/// [`CLIENT_ID_HEADER`] as a key made once: looking a header up by a `&str` parses and checks
/// the name on every call (about 1 % of a send's server CPU).
static CLIENT_ID_KEY: std::sync::LazyLock<tonic::metadata::MetadataKey<tonic::metadata::Ascii>> =
    std::sync::LazyLock::new(|| tonic::metadata::MetadataKey::from_static(CLIENT_ID_HEADER));
/// How long a request forwarded to another broker may take (a POP adds its polling time).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);

/// Shared by every RPC.
#[derive(Debug)]
pub struct Gateway {
    pub state: Arc<BrokerState>,
    handler: BrokerHandler,
    pub sessions: Sessions,
    pub renewals: Renewals,
    pub cluster: Cluster,
    /// The port this gateway listens on (route answers name it).
    pub port: u16,
    /// Requests brokers send to the gateway's clients, until `serve` takes them.
    broker_requests: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<RemotingCommand>>>,
}

/// Requests from brokers to gRPC clients queued at most (check-backs wait beyond it).
const BROKER_REQUESTS_QUEUED: usize = 1024;

/// The two ends of the connection a call came on.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub remote: SocketAddr,
    pub local: SocketAddr,
}

/// The client behind one call.
#[derive(Debug, Clone)]
pub struct Caller {
    pub session: Arc<Session>,
    /// Who the call comes from, when the broker checks ACL (white-listed otherwise).
    pub principal: tidemark_acl::Principal,
    /// The host the client dialled, when it says (route answers point back at it).
    pub authority: Option<String>,
}

impl Gateway {
    pub fn new(state: Arc<BrokerState>, port: u16) -> Self {
        let (queue, broker_requests) = tokio::sync::mpsc::channel(BROKER_REQUESTS_QUEUED);
        let cluster = Cluster::new(
            state.config.name_servers(),
            state.config.broker_name.clone(),
            {
                let state = state.clone();
                Arc::new(move || !state.role.is_slave())
            },
            queue.clone(),
            // Forwards to other brokers sign as this broker (callers were checked here).
            state.remoting_client_config(),
        );
        Self {
            handler: BrokerHandler::new(state.clone()),
            cluster,
            state,
            sessions: Sessions::new(queue),
            renewals: Renewals::default(),
            port,
            broker_requests: std::sync::Mutex::new(Some(broker_requests)),
        }
    }

    /// The queue of requests brokers sent to this gateway's clients (once: its server).
    pub fn take_broker_requests(&self) -> Option<tokio::sync::mpsc::Receiver<RemotingCommand>> {
        self.broker_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The client behind a call from `peer` (to `local`), or the status to answer with (no
    /// client id).
    pub fn caller<T>(&self, request: &Request<T>, peer: Peer) -> Result<Caller, Status> {
        let client_id = request
            .metadata()
            .get(&*CLIENT_ID_KEY)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| status(Code::ClientIdRequired, "x-mq-client-id is required"))?;
        let Peer {
            remote: peer,
            local,
        } = peer;
        let principal = match &self.state.security.acl {
            Some(acl) => crate::auth::authenticate(acl, request.metadata(), peer.ip())
                .map_err(|reason| status(Code::Unauthorized, reason))?,
            None => tidemark_acl::Principal::WhiteListed,
        };
        Ok(Caller {
            session: self.sessions.get_or_open(client_id, peer, local),
            principal,
            authority: None,
        })
    }

    /// NO_PERMISSION when the broker checks ACL and `caller` may not make `command`.
    fn refusal(&self, caller: &Caller, command: &RemotingCommand) -> Option<RemotingCommand> {
        let acl = self.state.security.acl.as_ref()?;
        let peer = caller.session.channel.peer_addr().ip();
        crate::auth::authorize_command(acl, &caller.principal, peer, command)
    }

    /// [`Gateway::refusal`] for a route lookup of `topic`.
    pub fn route_refusal(&self, caller: &Caller, topic: &str) -> Option<RemotingCommand> {
        let acl = self.state.security.acl.as_ref()?;
        let peer = caller.session.channel.peer_addr().ip();
        crate::auth::authorize_route(acl, &caller.principal, peer, topic)
    }

    /// Serves one remoting request for `caller` with the broker's own handler.
    pub async fn invoke(&self, caller: &Caller, mut command: RemotingCommand) -> RemotingCommand {
        if let Some(refusal) = self.refusal(caller, &command) {
            return refusal;
        }
        // The command carries no remoting signature: the account this gateway verified is
        // what the broker's progress history records as the actor.
        if let tidemark_acl::Principal::Account(account) = &caller.principal {
            command.ext_fields.insert(GATEWAY_ACCOUNT, account);
        }
        match self
            .handler
            .handle(caller.session.channel.clone(), command)
            .await
        {
            Reply::Response(response) => response,
            Reply::NoResponse => RemotingCommand::response(ResponseCode::Success, None),
            Reply::Unsupported => RemotingCommand::response(
                ResponseCode::RequestCodeNotSupported,
                "not served by this broker".to_owned(),
            ),
        }
    }

    /// Serves one remoting request about `broker`'s queues of `topic` (an empty name: this
    /// broker's): here, or forwarded to that broker's master.
    pub async fn invoke_at(
        &self,
        caller: &Caller,
        topic: &str,
        broker: &str,
        command: RemotingCommand,
        timeout: Duration,
    ) -> RemotingCommand {
        if let Some(refusal) = self.refusal(caller, &command) {
            return refusal;
        }
        match self.cluster.target(topic, broker).await {
            Target::Local => self.invoke(caller, command).await,
            Target::Remote(address) => {
                match self.cluster.forward(&address, command, timeout).await {
                    Ok(response) => response,
                    Err(failure) => RemotingCommand::response(
                        ResponseCode::SystemError,
                        format!("broker {broker} at {address} did not answer: {failure}"),
                    ),
                }
            }
            Target::Unreachable => RemotingCommand::response(
                ResponseCode::SystemError,
                format!("no master of broker {broker} serves topic {topic}"),
            ),
        }
    }

    /// Tells the broker who the client is (RocketMQ's heartbeat), from the settings it sent:
    /// consumers join their group with their subscriptions, producers their topics' group.
    pub async fn register(&self, caller: &Caller, settings: &Settings) -> RemotingCommand {
        let client_type = settings
            .client_type
            .and_then(|value| ClientType::try_from(value).ok())
            .unwrap_or(ClientType::Unspecified);
        let mut data = HeartbeatData {
            client_id: caller.session.client_id.clone(),
            ..HeartbeatData::default()
        };
        match &settings.pub_sub {
            Some(PubSub::Subscription(subscription)) => {
                let group = full_name(subscription.group.as_ref());
                if group.is_empty() {
                    return RemotingCommand::response(
                        ResponseCode::SubscriptionGroupNotExist,
                        "a consumer's settings name no group".to_owned(),
                    );
                }
                let subscriptions = crate::convert::subscriptions_of(subscription);
                data.consumer_data_set = vec![ConsumerData {
                    consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                    consume_type: if client_type == ClientType::PushConsumer {
                        ConsumeType::ConsumePassively
                    } else {
                        ConsumeType::ConsumePop
                    },
                    group_name: group,
                    message_model: MessageModel::Clustering,
                    subscription_data_set: subscriptions,
                    unit_mode: false,
                }];
            }
            Some(PubSub::Publishing(publishing)) => {
                // Each topic is a producer group too, as with RocketMQ's proxy: a transaction's
                // check-back goes to any client publishing its topic.
                data.producer_data_set =
                    std::iter::once(format!("GRPC_PRODUCER_{}", caller.session.client_id))
                        .chain(publishing.topics.iter().map(|topic| full_name(Some(topic))))
                        .map(|group_name| ProducerData { group_name })
                        .collect();
            }
            None => {}
        }
        let request =
            RemotingCommand::request(RequestCode::HeartBeat).with_body(data.to_json_bytes());
        let response = self.invoke(caller, request).await;
        if response.response_code() != ResponseCode::Success {
            debug!(client = %caller.session.client_id, remark = ?response.remark, "gRPC client not registered");
        }
        response
    }

    /// A client left (or went silent): what it held is released and the broker forgets its
    /// connection.
    pub async fn forget(&self, session: Arc<Session>) {
        let held = self.renewals.take_client(&session.client_id);
        if !held.is_empty() {
            let caller = Caller {
                session: session.clone(),
                // The gateway's own work for a client it already let in.
                principal: tidemark_acl::Principal::WhiteListed,
                authority: None,
            };
            self.release(&caller, held).await;
        }
        self.handler.on_close(&session.channel);
        session.channel.mark_closed();
    }

    /// Where clients reach this gateway: the host they dialled (so a route answer works through
    /// whatever address they used), else the broker's advertised address.
    pub fn endpoint_host(&self, dialled: Option<&str>) -> String {
        dialled
            .filter(|host| !host.is_empty())
            .map_or_else(|| self.state.config.broker_ip1.clone(), str::to_owned)
    }
}
