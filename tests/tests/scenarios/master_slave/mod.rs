//! Master and slave as separate processes: replication, SYNC_MASTER acknowledgements, slave
//! synchronisation (`replication`), consumer progress through a master failover (`failover`),
//! and reads served by the slave (`reads`). The helpers live here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer,
    PushConsumer, SendStatus,
};
use tidemark_protocol::body::{
    ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tidemark_protocol::headers::{
    pull_sys_flag, GetMaxOffsetRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;
use tidemark_tests::{
    init_logging, tidemark_binary, unique, wait_until, wait_until_async, BrokerSet,
};

const CALL: Duration = Duration::from_secs(3);
const QUEUES: i32 = 4;

fn raw() -> RemotingClient {
    RemotingClient::new(Default::default(), None)
}

async fn max_offset(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    queue_id: i32,
) -> Option<i64> {
    let header = GetMaxOffsetRequestHeader {
        topic: topic.to_owned(),
        queue_id,
        committed: None,
        broker_name: None,
    };
    offset_call(
        client,
        addr,
        RemotingCommand::request_with_header(RequestCode::GetMaxOffset, &header),
    )
    .await
}

/// A request answered with an `offset` header: `None` on any failure or refusal.
async fn offset_call(client: &RemotingClient, addr: &str, request: RemotingCommand) -> Option<i64> {
    let response = client.invoke(addr, request, CALL).await.ok()?;
    if response.response_code() != ResponseCode::Success {
        return None;
    }
    response
        .decode_header::<OffsetResponseHeader>()
        .ok()
        .map(|header| header.offset)
}

async fn committed(
    client: &RemotingClient,
    addr: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> Option<i64> {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        set_zero_if_not_found: Some(false),
        broker_name: None,
    };
    offset_call(
        client,
        addr,
        RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header),
    )
    .await
}

/// Every stored record of a queue, concatenated, as the broker serves them to pulls.
async fn pull_all(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    queue_id: i32,
    end: i64,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < end {
        let header = PullMessageRequestHeader {
            consumer_group: "ms_compare".into(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        };
        let response = client
            .invoke(
                addr,
                RemotingCommand::request_with_header(RequestCode::PullMessage, &header),
                CALL,
            )
            .await
            .expect("pull");
        assert_eq!(
            response.response_code(),
            ResponseCode::Success,
            "pull {topic}/{queue_id}@{offset} from {addr}"
        );
        let header: PullMessageResponseHeader = response.decode_header().expect("pull header");
        // Without slave reads enabled, consumers are always sent back to the master.
        assert_eq!(
            header.suggest_which_broker_id, 0,
            "suggested broker for {addr}"
        );
        out.extend_from_slice(&response.body);
        offset = header.next_begin_offset;
    }
    out
}

async fn fetch_body(client: &RemotingClient, addr: &str, code: RequestCode) -> Option<Bytes> {
    let response = client
        .invoke(addr, RemotingCommand::request(code), CALL)
        .await
        .ok()?;
    (response.response_code() == ResponseCode::Success).then_some(response.body)
}

async fn producer(set: &BrokerSet) -> Producer {
    Producer::builder(unique("producer"))
        .namesrv_addr(set.namesrv_addr())
        .default_topic_queue_nums(QUEUES)
        .start()
        .await
        .expect("producer")
}

/// Waits until the slave's queues of `topic` are as long as the master's.
async fn wait_replicated(set: &BrokerSet, topic: &str) -> bool {
    let client = raw();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let mut same = true;
        for queue_id in 0..QUEUES {
            let master = max_offset(&client, &set.broker_addr(0), topic, queue_id).await;
            let slave = max_offset(&client, &set.broker_addr(1), topic, queue_id).await;
            same &= master.is_some() && master == slave;
        }
        if same {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

mod acl;
mod failover;
mod reads;
mod replication;
mod tls;
