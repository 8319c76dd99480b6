//! Transactions over gRPC with tonic's client: a transactional send answers with a transaction
//! id; the half is invisible until EndTransaction commits it; a rollback is never delivered; a
//! second commit changes nothing; an undecided transaction comes back on the producer's
//! Telemetry stream as RecoverOrphanedTransactionCommand, and its answer applies.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::*;

const TOPIC: &str = "GrpcTxTopic";
const GROUP: &str = "grpc_tx_group";
const PRODUCER: &str = "tx-producer-1";

fn transactional(id: &str, body: &str) -> Message {
    let mut message = message(TOPIC, id, body, "tx");
    if let Some(system) = message.system_properties.as_mut() {
        system.message_type = MessageType::Transaction as i32;
    }
    message
}

fn end(
    id: &str,
    transaction_id: &str,
    resolution: TransactionResolution,
    source: TransactionSource,
) -> EndTransactionRequest {
    EndTransactionRequest {
        topic: Some(resource(TOPIC)),
        message_id: id.into(),
        transaction_id: transaction_id.into(),
        resolution: resolution as i32,
        source: source as i32,
        trace_context: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_roll_back_and_recover_over_grpc() {
    let (namesrv, _stop_namesrv) = start_namesrv().await;
    let server = start_broker_with(&namesrv, "broker-a", true, |config| {
        config.transaction_check_interval = 200;
        config.transaction_timeout = 300;
    })
    .await;
    let mut client = client(&server).await;

    // The producer's Telemetry stream: its settings publish the topic.
    let Telemetry {
        commands: mut telemetry,
        sender: _sender,
        settings,
    } = open_telemetry(&mut client, PRODUCER, producer_settings(TOPIC)).await;
    assert!(matches!(
        settings.command,
        Some(telemetry_command::Command::Settings(_))
    ));

    let sent = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![
                    transactional("tx-commit", "commit me"),
                    transactional("tx-rollback", "roll me back"),
                    transactional("tx-unknown", "decided by the check-back"),
                ],
            },
            PRODUCER,
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok, "{:?}", sent.status);
    let ids: BTreeMap<String, String> = sent
        .entries
        .iter()
        .map(|entry| (entry.message_id.clone(), entry.transaction_id.clone()))
        .collect();
    assert!(
        ids.values().all(|id| !id.is_empty()),
        "every half has a transaction id: {ids:?}"
    );

    // Invisible before any decision.
    let (_, early) = receive(&mut client, GROUP, TOPIC, 30_000).await;
    assert!(early.is_empty(), "a half was delivered: {early:?}");

    for (id, resolution) in [
        ("tx-commit", TransactionResolution::Commit),
        ("tx-rollback", TransactionResolution::Rollback),
    ] {
        let ended = client
            .end_transaction(with_client_id(
                end(id, &ids[id], resolution, TransactionSource::SourceClient),
                PRODUCER,
            ))
            .await
            .expect("end")
            .into_inner();
        assert_eq!(code(&ended.status), Code::Ok, "{id}: {:?}", ended.status);
    }
    // Again: nothing is pending, nothing changes, and the client is told.
    let again = client
        .end_transaction(with_client_id(
            end(
                "tx-commit",
                &ids["tx-commit"],
                TransactionResolution::Commit,
                TransactionSource::SourceClient,
            ),
            PRODUCER,
        ))
        .await
        .expect("end")
        .into_inner();
    assert_eq!(code(&again.status), Code::InvalidTransactionId);
    let bogus = client
        .end_transaction(with_client_id(
            end(
                "tx-commit",
                "not-a-transaction",
                TransactionResolution::Commit,
                TransactionSource::SourceClient,
            ),
            PRODUCER,
        ))
        .await
        .expect("end")
        .into_inner();
    assert_eq!(code(&bogus.status), Code::InvalidTransactionId);

    // The undecided one comes back to the producer: within one bound for all the commands it
    // may take (check-backs of the decided halves can come first, each one in time).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let recover = loop {
        let command = tokio::time::timeout_at(deadline, telemetry.message())
            .await
            .expect("the undecided half's check-back in time")
            .expect("frame")
            .expect("command");
        // Halves decided above may have been checked back before their decision arrived (the
        // check interval is short): only the undecided one matters here.
        if let Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(recover)) =
            command.command
        {
            let about = recover
                .message
                .as_ref()
                .and_then(|m| m.system_properties.as_ref())
                .map(|s| s.message_id.clone());
            if about.as_deref() == Some("tx-unknown") {
                break recover;
            }
        }
    };
    let message = recover.message.expect("the half message");
    let system = message.system_properties.expect("system properties");
    assert_eq!(system.message_id, "tx-unknown");
    assert_eq!(message.topic.map(|t| t.name).as_deref(), Some(TOPIC));
    assert_eq!(system.message_type, MessageType::Transaction as i32);
    assert_eq!(message.body, b"decided by the check-back");
    assert_eq!(recover.transaction_id, ids["tx-unknown"]);
    let answered = client
        .end_transaction(with_client_id(
            end(
                "tx-unknown",
                &recover.transaction_id,
                TransactionResolution::Commit,
                TransactionSource::SourceServerCheck,
            ),
            PRODUCER,
        ))
        .await
        .expect("end")
        .into_inner();
    assert_eq!(code(&answered.status), Code::Ok, "{:?}", answered.status);

    // Exactly the two commits are delivered.
    let mut delivered = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while delivered.len() < 2 && tokio::time::Instant::now() < deadline {
        let (_, messages) = receive(&mut client, GROUP, TOPIC, 30_000).await;
        delivered.extend(messages.into_iter().map(|m| {
            m.system_properties
                .map(|s| s.message_id)
                .unwrap_or_default()
        }));
    }
    let (_, more) = receive(&mut client, GROUP, TOPIC, 30_000).await;
    assert!(more.is_empty(), "more than the commits: {more:?}");
    delivered.sort();
    assert_eq!(delivered, ["tx-commit", "tx-unknown"]);
}

/// One gateway in front of two brokers: halves land on both; the other broker's check-backs
/// come back through the gateway's connection to it and reach the producer's Telemetry stream;
/// the answers commit on the broker that holds each half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_backs_from_another_broker_reach_the_gateways_producer() {
    let (namesrv, _stop_namesrv) = start_namesrv().await;
    let quick = |config: &mut tidemark_broker::BrokerConfig| {
        config.transaction_check_interval = 200;
        config.transaction_timeout = 300;
        config.grpc_listen_port = 0;
    };
    let gateway = start_broker_with(&namesrv, "broker-a", true, quick).await;
    let other = start_broker_with(&namesrv, "broker-b", false, quick).await;
    let topic = "GrpcTxCluster";
    for server in [&gateway, &other] {
        server
            .state
            .metadata
            .topics
            .ensure(topic, 2, 6, tidemark_remoting::now_ms());
        server.state.topic_changes().announce_soon();
    }
    let mut client = client(&gateway).await;
    // Until the route names both brokers.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let route = client
            .query_route(with_client_id(
                QueryRouteRequest {
                    topic: Some(resource(topic)),
                    endpoints: None,
                },
                PRODUCER,
            ))
            .await
            .expect("route")
            .into_inner();
        let brokers: std::collections::BTreeSet<String> = route
            .message_queues
            .iter()
            .filter_map(|queue| queue.broker.as_ref().map(|b| b.name.clone()))
            .collect();
        if brokers.len() == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "route: {brokers:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let Telemetry {
        commands: mut telemetry,
        sender: _sender,
        ..
    } = open_telemetry(&mut client, PRODUCER, producer_settings(topic)).await;
    let messages: Vec<Message> = (0..8)
        .map(|i| {
            let mut message = message(topic, &format!("open-{i}"), "undecided", "tx");
            if let Some(system) = message.system_properties.as_mut() {
                system.message_type = MessageType::Transaction as i32;
            }
            message
        })
        .collect();
    let sent = client
        .send_message(with_client_id(SendMessageRequest { messages }, PRODUCER))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok, "{:?}", sent.status);
    let on_b = sent
        .entries
        .iter()
        .filter(|entry| entry.transaction_id.ends_with(":broker-b"))
        .count();
    assert!(
        on_b > 0 && on_b < 8,
        "halves spread over both brokers: {on_b} of 8 on b"
    );

    let mut recovered = std::collections::BTreeMap::new();
    // One bound for all: a half checked back again keeps the stream busy without adding to it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
    while recovered.len() < 8 {
        let command = tokio::time::timeout_at(deadline, telemetry.message())
            .await
            .unwrap_or_else(|_| panic!("check-backs in time: {} of 8", recovered.len()))
            .expect("frame")
            .expect("command");
        let Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(recover)) =
            command.command
        else {
            continue;
        };
        let id = recover
            .message
            .and_then(|m| m.system_properties)
            .map(|s| s.message_id)
            .unwrap_or_default();
        recovered.insert(id, recover.transaction_id);
    }
    for (id, transaction_id) in &recovered {
        let answered = client
            .end_transaction(with_client_id(
                EndTransactionRequest {
                    topic: Some(resource(topic)),
                    message_id: id.clone(),
                    transaction_id: transaction_id.clone(),
                    resolution: TransactionResolution::Commit as i32,
                    source: TransactionSource::SourceServerCheck as i32,
                    trace_context: String::new(),
                },
                PRODUCER,
            ))
            .await
            .expect("end")
            .into_inner();
        // A check-back repeated before the answer arrived finds the half resolved already.
        assert!(
            matches!(
                code(&answered.status),
                Code::Ok | Code::InvalidTransactionId
            ),
            "{id}: {:?}",
            answered.status
        );
    }
    let mut delivered = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while delivered.len() < 8 && tokio::time::Instant::now() < deadline {
        for broker in ["broker-a", "broker-b"] {
            let (_, got) = receive_at(&mut client, GROUP, topic, Some(broker), 30_000).await;
            delivered.extend(
                got.into_iter()
                    .filter_map(|m| m.system_properties.map(|s| s.message_id)),
            );
        }
    }
    assert_eq!(
        delivered.len(),
        8,
        "committed on both brokers: {delivered:?}"
    );
}
