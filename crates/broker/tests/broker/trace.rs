//! The message-trace topic: created at start when `trace_topic_enable` is set (one queue, as
//! RocketMQ creates it), and trace messages stored and served like any other.

use crate::common::*;
use tidemark_protocol::body::TopicConfigSerializeWrapper;
use tidemark_protocol::trace::{decode_trace_data, DEFAULT_TRACE_TOPIC};

#[tokio::test]
async fn the_trace_topic_is_created_at_start_and_serves_trace_records() {
    let broker = HandlerHarness::open(|settings| {
        settings.trace_topic_enable = true;
        settings.auto_create_topic_enable = false;
    })
    .await;
    let client = broker.connect();
    let topics = client
        .call(RemotingCommand::request(RequestCode::GetAllTopicConfig))
        .await;
    let table = TopicConfigSerializeWrapper::from_json_bytes(&topics.body).expect("topics");
    let trace = table
        .topic_config_table
        .get(DEFAULT_TRACE_TOPIC)
        .expect("the trace topic exists");
    assert_eq!((trace.read_queue_nums, trace.write_queue_nums), (1, 1));

    // A trace record as the Java client writes one, keyed by the message id it is about.
    let data = [
        "Pub",
        "1700000000000",
        "DefaultRegion",
        "PG",
        "Orders",
        "ID-1",
        "TagA",
        "",
        "127.0.0.1:10911",
        "5",
        "2",
        "0",
        "7F000001000027AF0000000000000000",
        "true",
    ]
    .join("\u{1}")
        + "\u{2}";
    let mut request = with_property(send_request(&data, "", 0), "KEYS", "ID-1");
    request.ext_fields.insert("b", DEFAULT_TRACE_TOPIC);
    send_ok(&client, request).await;
    let records = pull_all(&client, DEFAULT_TRACE_TOPIC, 0, 1).await;
    assert_eq!(records.len(), 1);
    let decoded = decode_trace_data(&String::from_utf8_lossy(&records[0].body));
    assert_eq!(decoded.len(), 1);
    assert!(decoded[0].is_about("ID-1"));
}
