//! Before measuring: the topic exists and is routed, and consumers own its queues — otherwise
//! a run on a new topic measures the wait for routes and rebalancing, not the server.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tidemark_client::{Admin, PushConsumer};
use tidemark_protocol::body::{
    perm, CreateTopicListRequestBody, TopicConfig, TopicFilterType, TopicRouteData,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig as RemotingConfig, RemotingClient};

const ROUTE_WAIT: Duration = Duration::from_secs(30);

/// Makes `common.topic` on every master when no name server routes it yet, then waits until
/// one does. Returns its route, or `None` when the topic could not be made (an account without
/// the right to, say): the run goes on and the broker's auto-creation, if on, makes it.
pub(crate) async fn ensure_topic(common: &super::Common) -> anyhow::Result<Option<TopicRouteData>> {
    let admin = Admin::connect(common.client_config()?).await?;
    let outcome = ensure_with(&admin, &common.topic, common.queues).await;
    admin.shutdown().await;
    match outcome {
        Ok(route) => Ok(Some(route)),
        Err(failure) => {
            eprintln!("warning: {failure:#}; going on without it");
            Ok(None)
        }
    }
}

async fn ensure_with(admin: &Admin, topic: &str, queues: i32) -> anyhow::Result<TopicRouteData> {
    if let Some(route) = admin.topic_route(topic).await? {
        if !route.queue_datas.is_empty() {
            return Ok(route);
        }
    }
    let masters = admin.masters(None).await.context("finding the masters")?;
    if masters.is_empty() {
        bail!("no master broker is registered with the name server to make topic {topic} on");
    }
    let config = bench_topic(topic, queues);
    for master in &masters {
        admin
            .create_topic(&master.addr, &config)
            .await
            .with_context(|| format!("making topic {topic} on {}", master.addr))?;
    }
    eprintln!("made topic {topic} on {} master(s)", masters.len());
    let deadline = Instant::now() + ROUTE_WAIT;
    loop {
        if let Some(route) = admin.topic_route(topic).await? {
            if !route.queue_datas.is_empty() {
                return Ok(route);
            }
        }
        if Instant::now() > deadline {
            bail!("topic {topic} made but not routed by the name server within {ROUTE_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Topics a bench makes per UPDATE_AND_CREATE_TOPIC_LIST request.
const TOPICS_PER_REQUEST: usize = 1_000;

/// Makes `topics` (which must not exist yet to be made) on every master, a list request per
/// thousand, then waits until the name server routes the last one.
pub(crate) async fn ensure_topics(common: &super::Common, topics: &[String]) -> anyhow::Result<()> {
    let Some(last) = topics.last() else {
        return Ok(());
    };
    let admin = Admin::connect(common.client_config()?).await?;
    let made = async {
        let masters = admin.masters(None).await.context("finding the masters")?;
        let client = RemotingClient::new(RemotingConfig::default(), None);
        for master in &masters {
            for chunk in topics.chunks(TOPICS_PER_REQUEST) {
                let body = CreateTopicListRequestBody {
                    topic_config_list: chunk
                        .iter()
                        .map(|name| bench_topic(name, common.queues))
                        .collect(),
                };
                let request = RemotingCommand::request(RequestCode::UpdateAndCreateTopicList)
                    .with_body(body.to_json_bytes());
                let response = client
                    .invoke(&master.addr, request, Duration::from_secs(60))
                    .await?;
                if response.response_code() != ResponseCode::Success {
                    bail!(
                        "making {} topics on {}: {:?} {}",
                        chunk.len(),
                        master.addr,
                        response.response_code(),
                        response.remark.unwrap_or_default()
                    );
                }
            }
        }
        client.shutdown();
        eprintln!(
            "made {} topics on {} master(s)",
            topics.len(),
            masters.len()
        );
        let deadline = Instant::now() + ROUTE_WAIT;
        while admin
            .topic_route(last)
            .await?
            .is_none_or(|route| route.queue_datas.is_empty())
        {
            if Instant::now() > deadline {
                bail!("topic {last} made but not routed within {ROUTE_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
    .await;
    admin.shutdown().await;
    made
}

fn bench_topic(name: &str, queues: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.to_owned(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm: perm::READ | perm::WRITE,
        topic_filter_type: TopicFilterType::SingleTag,
        ..TopicConfig::default()
    }
}

/// `count` connections to the first broker of `route`, each having asked one question (a
/// connection that never speaks may be closed as a stalled TLS handshake), held until dropped.
pub(crate) async fn idle_connections(
    route: &TopicRouteData,
    count: usize,
) -> anyhow::Result<Vec<RemotingClient>> {
    let Some(broker) = route
        .broker_datas
        .first()
        .and_then(|broker| broker.broker_addrs.get(&0))
        .cloned()
    else {
        bail!("the topic's route names no master to hold idle connections to");
    };
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let client = RemotingClient::new(RemotingConfig::default(), None);
        let request = RemotingCommand::request(RequestCode::GetBrokerRuntimeInfo);
        client
            .invoke(&broker, request, Duration::from_secs(10))
            .await
            .with_context(|| format!("opening idle connection {} to {broker}", clients.len()))?;
        clients.push(client);
    }
    eprintln!("holding {count} idle connections to {broker}");
    Ok(clients)
}

/// Waits until `consumers` together own every readable queue of `route` (asking them to
/// rebalance now rather than at their next period).
pub(crate) async fn wait_for_assignment(
    consumers: &[PushConsumer],
    route: &TopicRouteData,
) -> anyhow::Result<()> {
    let wanted: usize = route
        .queue_datas
        .iter()
        .filter(|queue| queue.perm & perm::READ != 0)
        .map(|queue| queue.read_queue_nums.max(0) as usize)
        .sum();
    let deadline = Instant::now() + ROUTE_WAIT;
    loop {
        let owned: HashSet<_> = consumers
            .iter()
            .flat_map(|consumer| consumer.assigned_queues())
            .map(|queue| (queue.broker_name, queue.queue_id))
            .collect();
        if owned.len() >= wanted {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "consumers own {} of the topic's {wanted} queues after {ROUTE_WAIT:?}",
                owned.len()
            );
        }
        for consumer in consumers {
            consumer.rebalance_now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
