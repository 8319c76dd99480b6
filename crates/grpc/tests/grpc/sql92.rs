//! SQL92 filters over gRPC: a receive with a SQL filter expression gets exactly the messages its
//! selector picks (user properties, sent over gRPC); an invalid selector is
//! ILLEGAL_FILTER_EXPRESSION and the gateway keeps serving.

use std::collections::BTreeSet;

use crate::common::*;
use tidemark_grpc::proto::*;

fn sql(selector: &str) -> FilterExpression {
    FilterExpression {
        r#type: FilterType::Sql as i32,
        expression: selector.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_filter_selects_by_user_properties() {
    let server = start().await;
    let mut client = client(&server).await;
    let topic = "GrpcSqlTopic";
    let messages: Vec<Message> = (0..12)
        .map(|i| {
            let mut m = message(topic, &format!("sql-{i}"), &i.to_string(), "TagA");
            m.user_properties
                .insert("amount".into(), (i * 10).to_string());
            if i % 3 == 0 {
                m.user_properties.insert("vip".into(), "yes".into());
            }
            m
        })
        .collect();
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest { messages },
            "sql-producer",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok);

    let (status, got) = receive_filtered(
        &mut client,
        "grpc_sql_group",
        topic,
        None,
        sql("amount >= 50 AND vip IS NOT NULL"),
        30_000,
    )
    .await;
    assert_eq!(status, Code::Ok);
    let bodies: BTreeSet<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(
        bodies,
        ["6", "9"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()
    );
    let (status, rest) = receive_filtered(
        &mut client,
        "grpc_sql_group",
        topic,
        None,
        sql("amount >= 50 AND vip IS NOT NULL"),
        30_000,
    )
    .await;
    assert_eq!(status, Code::MessageNotFound, "{rest:?}");

    let (status, _) = receive_filtered(
        &mut client,
        "grpc_sql_group_2",
        topic,
        None,
        sql("amount >"),
        30_000,
    )
    .await;
    assert_eq!(status, Code::IllegalFilterExpression);
    let (status, all) = receive_at(&mut client, "grpc_sql_group_3", topic, None, 30_000).await;
    assert_eq!(status, Code::Ok);
    assert!(!all.is_empty(), "the gateway keeps serving");
}
