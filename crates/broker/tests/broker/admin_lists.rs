//! RocketMQ 5's batch admin requests: UPDATE_AND_CREATE_TOPIC_LIST (mqadmin `updateTopicList`)
//! and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (`updateSubGroupList`), on the socket-free
//! handler harness.

use crate::common::*;
use tidemark_protocol::body::{SubscriptionGroupWrapper, TopicConfigSerializeWrapper};

fn with_body(code: RequestCode, body: &str) -> RemotingCommand {
    RemotingCommand::request(code).with_body(Bytes::from(body.as_bytes().to_vec()))
}

#[tokio::test]
async fn topic_and_group_lists_are_created_whole_or_not_at_all() {
    let broker = HandlerHarness::open(|_| {}).await;
    let admin = broker.connect();

    // The body Java's admin sends: attribute keys carry their + sign.
    let topics = r#"{"topicConfigList":[
        {"topicName":"ListA","readQueueNums":2,"writeQueueNums":2,"perm":6,"order":false,
         "topicFilterType":"SINGLE_TAG","topicSysFlag":0,"attributes":{"+message.type":"FIFO"}},
        {"topicName":"ListB","readQueueNums":3,"writeQueueNums":3,"perm":4}]}"#;
    let created = admin
        .call(with_body(RequestCode::UpdateAndCreateTopicList, topics))
        .await;
    assert_eq!(
        created.response_code(),
        ResponseCode::Success,
        "{:?}",
        created.remark
    );
    let all = admin
        .call(RemotingCommand::request(RequestCode::GetAllTopicConfig))
        .await;
    let table = TopicConfigSerializeWrapper::from_json_bytes(&all.body).expect("topics");
    let a = &table.topic_config_table["ListA"];
    assert_eq!((a.read_queue_nums, a.perm), (2, 6));
    assert_eq!(
        a.attributes
            .as_ref()
            .and_then(|attributes| attributes.get("message.type"))
            .map(String::as_str),
        Some("FIFO"),
        "stored without the sign"
    );
    assert_eq!(table.topic_config_table["ListB"].write_queue_nums, 3);

    // One bad entry refuses the request and changes nothing.
    for (body, expected) in [
        (
            r#"{"topicConfigList":[{"topicName":"ListC","readQueueNums":1,"writeQueueNums":1,"perm":6},{"topicName":"bad topic","readQueueNums":1,"writeQueueNums":1,"perm":6}]}"#,
            "illegal characters",
        ),
        (
            r#"{"topicConfigList":[{"topicName":"ListC","readQueueNums":1,"writeQueueNums":1,"perm":6},{"topicName":"SCHEDULE_TOPIC_XXXX","readQueueNums":1,"writeQueueNums":1,"perm":6}]}"#,
            "conflict with system topic",
        ),
        (
            r#"{"topicConfigList":[{"topicName":"ListC","readQueueNums":0,"writeQueueNums":1,"perm":6}]}"#,
            "queue numbers",
        ),
        (
            r#"{"topicConfigList":[{"topicName":"ListC","readQueueNums":1,"writeQueueNums":1,"perm":6,"attributes":{"+message.type":"ODD"}}]}"#,
            "message.type",
        ),
        (r#"{"topicConfigList":"#, "bad topic list body"),
    ] {
        let refused = admin
            .call(with_body(RequestCode::UpdateAndCreateTopicList, body))
            .await;
        assert_eq!(
            refused.response_code(),
            ResponseCode::InvalidParameter,
            "{body}"
        );
        let remark = refused.remark.unwrap_or_default();
        assert!(remark.contains(expected), "{body}: {remark}");
    }
    let all = admin
        .call(RemotingCommand::request(RequestCode::GetAllTopicConfig))
        .await;
    let table = TopicConfigSerializeWrapper::from_json_bytes(&all.body).expect("topics");
    assert!(!table.topic_config_table.contains_key("ListC"));

    let groups = r#"{"groupConfigList":[{"groupName":"list_g1","consumeBroadcastEnable":true},
        {"groupName":"list_g2","retryMaxTimes":3}]}"#;
    let created = admin
        .call(with_body(
            RequestCode::UpdateAndCreateSubscriptionGroupList,
            groups,
        ))
        .await;
    assert_eq!(
        created.response_code(),
        ResponseCode::Success,
        "{:?}",
        created.remark
    );
    let all = admin
        .call(RemotingCommand::request(
            RequestCode::GetAllSubscriptionGroupConfig,
        ))
        .await;
    let table = SubscriptionGroupWrapper::from_json_bytes(&all.body).expect("groups");
    assert_eq!(table.subscription_group_table["list_g2"].retry_max_times, 3);
    assert!(table.subscription_group_table.contains_key("list_g1"));
    let refused = admin
        .call(with_body(
            RequestCode::UpdateAndCreateSubscriptionGroupList,
            r#"{"groupConfigList":[{"groupName":"list_g3"},{"groupName":"bad group"}]}"#,
        ))
        .await;
    assert_eq!(refused.response_code(), ResponseCode::InvalidParameter);
    assert!(refused
        .remark
        .unwrap_or_default()
        .contains("illegal characters"));
    let all = admin
        .call(RemotingCommand::request(
            RequestCode::GetAllSubscriptionGroupConfig,
        ))
        .await;
    let table = SubscriptionGroupWrapper::from_json_bytes(&all.body).expect("groups");
    assert!(!table.subscription_group_table.contains_key("list_g3"));
}
