//! Before measuring: the topic exists and is routed, and consumers own its queues — otherwise
//! a run on a new topic measures the wait for routes and rebalancing, not the server.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tidemark_client::{Admin, PushConsumer};
use tidemark_protocol::body::{perm, TopicConfig, TopicFilterType, TopicRouteData};

/// Queues a topic the bench makes gets on each master (RocketMQ's default for new topics).
const QUEUES_PER_BROKER: i32 = 8;
const ROUTE_WAIT: Duration = Duration::from_secs(30);

/// Makes `common.topic` on every master when no name server routes it yet, then waits until
/// one does. Returns its route, or `None` when the topic could not be made (an account without
/// the right to, say): the run goes on and the broker's auto-creation, if on, makes it.
pub(crate) async fn ensure_topic(common: &super::Common) -> anyhow::Result<Option<TopicRouteData>> {
    let admin = Admin::connect(common.client_config()?).await?;
    let outcome = ensure_with(&admin, &common.topic).await;
    admin.shutdown().await;
    match outcome {
        Ok(route) => Ok(Some(route)),
        Err(failure) => {
            eprintln!("warning: {failure:#}; going on without it");
            Ok(None)
        }
    }
}

async fn ensure_with(admin: &Admin, topic: &str) -> anyhow::Result<TopicRouteData> {
    if let Some(route) = admin.topic_route(topic).await? {
        if !route.queue_datas.is_empty() {
            return Ok(route);
        }
    }
    let masters = admin.masters(None).await.context("finding the masters")?;
    if masters.is_empty() {
        bail!("no master broker is registered with the name server to make topic {topic} on");
    }
    let config = TopicConfig {
        topic_name: topic.to_owned(),
        read_queue_nums: QUEUES_PER_BROKER,
        write_queue_nums: QUEUES_PER_BROKER,
        perm: perm::READ | perm::WRITE,
        topic_filter_type: TopicFilterType::SingleTag,
        ..TopicConfig::default()
    };
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
