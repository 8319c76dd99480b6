//! The cluster behind a gateway. Every gateway serves the topic's queues on every broker of the
//! cluster, as RocketMQ's proxy does in cluster mode: routes come from the name servers, a call
//! about a queue (or a receipt) of another broker is forwarded to that broker's master over
//! remoting, and a call about this broker's queues goes to its own handler in-process.
//!
//! Routes are cached for a few seconds (as a remoting client refreshes them) and refreshed in the
//! background once expired, so a slow or unreachable name server never holds up a call: the
//! last known route is served meanwhile. A topic the name servers do not know yet (created here
//! a moment ago) is this broker's alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tidemark_protocol::body::{perm, TopicConfig, TopicRouteData};
use tidemark_protocol::headers::GetRouteInfoRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient, RemotingError};

/// How long a route answer is trusted before the name servers are asked again.
const ROUTE_TTL: Duration = Duration::from_secs(10);
/// How long one name server gets to answer a route lookup.
const ROUTE_TIMEOUT: Duration = Duration::from_millis(1_500);

/// One broker's queues of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerQueues {
    pub broker_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
}

impl BrokerQueues {
    fn from_config(broker_name: &str, config: &TopicConfig) -> Self {
        Self {
            broker_name: broker_name.to_owned(),
            read_queue_nums: config.read_queue_nums,
            write_queue_nums: config.write_queue_nums,
            perm: config.perm,
        }
    }

    pub fn readable(&self) -> bool {
        perm::is_readable(self.perm) && self.read_queue_nums > 0
    }

    pub fn writable(&self) -> bool {
        perm::is_writeable(self.perm) && self.write_queue_nums > 0
    }
}

/// Where a call about one broker's queues is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This process's broker (its own master).
    Local,
    /// Another broker's master, at this remoting address.
    Remote(String),
    /// No master of that broker is known (down, or not in the topic's route).
    Unreachable,
}

#[derive(Debug)]
struct CachedRoute {
    fetched: Instant,
    /// The route as the name servers gave it; `None` when none of them knew the topic.
    route: Option<Arc<TopicRouteData>>,
    /// A refresh is under way (an expired route keeps being served meanwhile).
    refreshing: bool,
}

/// What the name servers said about a topic.
enum Lookup {
    Found(TopicRouteData),
    /// A name server answered that the topic does not exist.
    Unknown,
    /// None answered: keep whatever was known.
    NoAnswer,
}

/// What every clone of a [`Cluster`] shares (a refresh runs on its own task).
#[derive(Debug)]
struct Shared {
    client: RemotingClient,
    name_servers: Vec<String>,
    routes: Mutex<HashMap<String, CachedRoute>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, CachedRoute>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn lookup(&self, topic: &str) -> Lookup {
        for namesrv in &self.name_servers {
            let request = RemotingCommand::request_with_header(
                RequestCode::GetRouteInfoByTopic,
                &GetRouteInfoRequestHeader {
                    topic: topic.to_owned(),
                    accept_standard_json_only: None,
                },
            );
            let Ok(response) = self.client.invoke(namesrv, request, ROUTE_TIMEOUT).await else {
                continue;
            };
            match response.response_code() {
                ResponseCode::Success => {
                    if let Ok(route) = TopicRouteData::from_json_bytes(&response.body) {
                        return Lookup::Found(route);
                    }
                }
                ResponseCode::TopicNotExist => return Lookup::Unknown,
                _ => {}
            }
        }
        Lookup::NoAnswer
    }

    /// Asks the name servers and stores the answer; when none answers, the route known before
    /// (if any) stays, for another TTL.
    async fn refresh(&self, topic: &str) -> Option<Arc<TopicRouteData>> {
        let lookup = self.lookup(topic).await;
        let mut routes = self.lock();
        let previous = routes.get(topic).and_then(|cached| cached.route.clone());
        let route = match lookup {
            Lookup::Found(route) => Some(Arc::new(route)),
            Lookup::Unknown => None,
            Lookup::NoAnswer => previous,
        };
        routes.insert(
            topic.to_owned(),
            CachedRoute {
                fetched: Instant::now(),
                route: route.clone(),
                refreshing: false,
            },
        );
        route
    }
}

/// Asks whether this process's broker is its name's master at this moment.
pub type OwnRole = Arc<dyn Fn() -> bool + Send + Sync>;

/// Routes from the name servers and the connections to other brokers. Owns its lock.
pub struct Cluster {
    shared: Arc<Shared>,
    own_name: String,
    /// Whether this process's broker is its name's master now (a slave forwards to its
    /// master; in controller mode the answer changes at run time).
    own_is_master: OwnRole,
    next_queue: AtomicUsize,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("own_name", &self.own_name)
            .field("own_is_master", &(self.own_is_master)())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// `broker_requests`: where requests other brokers send back over the gateway's
    /// connections (transaction check-backs for its producers) are queued.
    pub fn new(
        name_servers: Vec<String>,
        own_name: String,
        own_is_master: OwnRole,
        broker_requests: tokio::sync::mpsc::Sender<RemotingCommand>,
        client: ClientConfig,
    ) -> Self {
        let handler = tidemark_remoting::handler_fn(move |_channel, request: RemotingCommand| {
            let queue = broker_requests.clone();
            async move {
                let _ = queue.send(request).await;
                tidemark_remoting::Reply::NoResponse
            }
        });
        Self {
            shared: Arc::new(Shared {
                client: RemotingClient::new(client, Some(Arc::new(handler))),
                name_servers,
                routes: Mutex::new(HashMap::new()),
            }),
            own_name,
            own_is_master,
            next_queue: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, CachedRoute>> {
        self.shared.lock()
    }

    pub fn own_name(&self) -> &str {
        &self.own_name
    }

    /// The topic's route from the name servers, `None` when none knows it. Asked once per
    /// topic; afterwards the cached answer is served, and an expired one is refreshed in the
    /// background (a slow or unreachable name server never holds up a send).
    async fn route(&self, topic: &str) -> Option<Arc<TopicRouteData>> {
        let expired = {
            let mut routes = self.lock();
            match routes.get_mut(topic) {
                Some(cached) if cached.fetched.elapsed() < ROUTE_TTL => {
                    return cached.route.clone()
                }
                Some(cached) => {
                    let start = !cached.refreshing;
                    cached.refreshing = true;
                    Some((cached.route.clone(), start))
                }
                None => None,
            }
        };
        match expired {
            Some((route, start_refresh)) => {
                if start_refresh {
                    let shared = self.shared.clone();
                    let topic = topic.to_owned();
                    tokio::spawn(async move {
                        shared.refresh(&topic).await;
                    });
                }
                route
            }
            // Boxed, as every cold path a call may take to another process: a name server
            // lookup's state would otherwise sit inline in every call's future (which is moved
            // into a box of its own on every call).
            None => Box::pin(self.shared.refresh(topic)).await,
        }
    }

    /// Forgets a topic's cached route (its brokers changed, e.g. it was just created here).
    pub fn invalidate(&self, topic: &str) {
        self.lock().remove(topic);
    }

    /// Every broker holding the topic, sorted by name: the route's brokers that have a master,
    /// with this broker's entry taken from `local` (its own table is never stale). Empty when
    /// neither knows the topic.
    pub async fn brokers(&self, topic: &str, local: Option<&TopicConfig>) -> Vec<BrokerQueues> {
        let route = self.route(topic).await;
        let mut brokers: Vec<BrokerQueues> = route
            .iter()
            .flat_map(|route| {
                route.queue_datas.iter().filter(|data| {
                    data.broker_name != self.own_name
                        && route.broker_datas.iter().any(|broker| {
                            broker.broker_name == data.broker_name
                                && broker.broker_addrs.contains_key(&0)
                        })
                })
            })
            .map(|data| BrokerQueues {
                broker_name: data.broker_name.clone(),
                read_queue_nums: data.read_queue_nums,
                write_queue_nums: data.write_queue_nums,
                perm: data.perm,
            })
            .collect();
        let own = if (self.own_is_master)() {
            local.map(|config| BrokerQueues::from_config(&self.own_name, config))
        } else {
            // A slave's gateway serves its master's queues as the route describes them.
            route.as_ref().and_then(|route| {
                route
                    .queue_datas
                    .iter()
                    .find(|data| data.broker_name == self.own_name)
                    .map(|data| BrokerQueues {
                        broker_name: data.broker_name.clone(),
                        read_queue_nums: data.read_queue_nums,
                        write_queue_nums: data.write_queue_nums,
                        perm: data.perm,
                    })
            })
        };
        brokers.extend(own);
        brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        brokers.dedup_by(|a, b| a.broker_name == b.broker_name);
        brokers
    }

    /// Where calls about `broker`'s queues of `topic` go. An empty name means this broker.
    pub async fn target(&self, topic: &str, broker: &str) -> Target {
        let broker = if broker.is_empty() {
            self.own_name.as_str()
        } else {
            broker
        };
        if broker == self.own_name && (self.own_is_master)() {
            return Target::Local;
        }
        let master = |route: &TopicRouteData| {
            route
                .broker_datas
                .iter()
                .find(|data| data.broker_name == broker)
                .and_then(|data| data.broker_addrs.get(&0).cloned())
        };
        if let Some(address) = self.route(topic).await.as_deref().and_then(master) {
            return Target::Remote(address);
        }
        // The broker may have joined (or its master returned) since the route was cached.
        match Box::pin(self.shared.refresh(topic))
            .await
            .as_deref()
            .and_then(master)
        {
            Some(address) => Target::Remote(address),
            None => Target::Unreachable,
        }
    }

    /// Where a message without a queue of its own goes: the next writable queue of the cluster
    /// in turn, or — for a message group (FIFO) — always the same queue, by the group's hash.
    pub fn pick_queue(
        &self,
        brokers: &[BrokerQueues],
        message_group: Option<&str>,
    ) -> Option<(String, i32)> {
        let queues: Vec<(&str, i32)> = brokers
            .iter()
            .filter(|broker| broker.writable())
            .flat_map(|broker| {
                (0..broker.write_queue_nums).map(move |id| (broker.broker_name.as_str(), id))
            })
            .collect();
        if queues.is_empty() {
            return None;
        }
        let index = match message_group {
            Some(group) => crc32fast::hash(group.as_bytes()) as usize % queues.len(),
            None => self.next_queue.fetch_add(1, Ordering::Relaxed) % queues.len(),
        };
        queues
            .get(index)
            .map(|(broker, id)| ((*broker).to_owned(), *id))
    }

    /// Sends one request to another broker.
    pub async fn forward(
        &self,
        address: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        Box::pin(self.shared.client.invoke(address, request, timeout)).await
    }

    pub fn shutdown(&self) {
        self.shared.client.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(name: &str, queues: i32, perm: i32) -> BrokerQueues {
        BrokerQueues {
            broker_name: name.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm,
        }
    }

    #[test]
    fn queues_are_taken_in_turn_and_a_message_group_always_gets_the_same_one() {
        let cluster = Cluster::new(
            Vec::new(),
            "a".into(),
            Arc::new(|| true),
            tokio::sync::mpsc::channel(1).0,
            ClientConfig::default(),
        );
        let brokers = [broker("a", 2, 6), broker("b", 2, 6), broker("c", 4, 4)];
        let picked: Vec<_> = (0..5)
            .filter_map(|_| cluster.pick_queue(&brokers, None))
            .collect();
        assert_eq!(
            picked,
            vec![
                ("a".to_owned(), 0),
                ("a".to_owned(), 1),
                ("b".to_owned(), 0),
                ("b".to_owned(), 1),
                ("a".to_owned(), 0),
            ],
            "c is read-only"
        );
        let first = cluster.pick_queue(&brokers, Some("order-42"));
        for _ in 0..10 {
            assert_eq!(cluster.pick_queue(&brokers, Some("order-42")), first);
        }
        assert_eq!(cluster.pick_queue(&[broker("c", 4, 4)], None), None);
    }

    #[tokio::test]
    async fn without_name_servers_the_topic_is_this_brokers_alone() {
        let cluster = Cluster::new(
            Vec::new(),
            "a".into(),
            Arc::new(|| true),
            tokio::sync::mpsc::channel(1).0,
            ClientConfig::default(),
        );
        let config = TopicConfig {
            topic_name: "T".into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            perm: 6,
            ..TopicConfig::default()
        };
        assert_eq!(
            cluster.brokers("T", Some(&config)).await,
            vec![broker("a", 4, 6)]
        );
        assert!(cluster.brokers("T", None).await.is_empty());
        assert_eq!(cluster.target("T", "a").await, Target::Local);
        assert_eq!(cluster.target("T", "").await, Target::Local);
        assert_eq!(cluster.target("T", "b").await, Target::Unreachable);
        let slave = Cluster::new(
            Vec::new(),
            "a".into(),
            Arc::new(|| false),
            tokio::sync::mpsc::channel(1).0,
            ClientConfig::default(),
        );
        assert_eq!(slave.target("T", "a").await, Target::Unreachable);
    }

    #[tokio::test]
    async fn an_unanswered_refresh_keeps_the_route_known_before() {
        let cluster = Cluster::new(
            Vec::new(),
            "a".into(),
            Arc::new(|| true),
            tokio::sync::mpsc::channel(1).0,
            ClientConfig::default(),
        );
        let route = TopicRouteData {
            broker_datas: vec![tidemark_protocol::body::BrokerData {
                broker_name: "b".into(),
                broker_addrs: [(0, "127.0.0.1:10911".to_owned())].into(),
                ..Default::default()
            }],
            ..TopicRouteData::default()
        };
        cluster.lock().insert(
            "T".into(),
            CachedRoute {
                fetched: Instant::now() - ROUTE_TTL * 2,
                route: Some(Arc::new(route)),
                refreshing: false,
            },
        );
        // Expired: still served while the refresh (no name server answers) runs.
        assert_eq!(
            cluster.target("T", "b").await,
            Target::Remote("127.0.0.1:10911".into())
        );
        tokio::task::yield_now().await;
        let kept = cluster.shared.refresh("T").await;
        assert!(kept.is_some(), "no answer is not 'no such topic'");
        assert_eq!(
            cluster.target("T", "b").await,
            Target::Remote("127.0.0.1:10911".into())
        );
    }
}
