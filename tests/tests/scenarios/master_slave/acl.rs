//! A master and a slave that check ACL, behind a name server that checks it too: each broker
//! signs its own requests (registration, the slave's metadata sync) with its account.

use super::*;

const RULES: &str = "\
accounts:
  - accessKey: broker-key
    secretKey: broker-secret
    admin: true
  - accessKey: alice-key
    secretKey: alice-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
";

fn signed_client(key: &str, secret: &str) -> RemotingClient {
    let mut config = tidemark_remoting::ClientConfig::default();
    config.channel.signer = Some(Arc::new(tidemark_remoting::Credentials::new(key, secret)));
    RemotingClient::new(config, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_sign_registration_and_slave_sync_with_their_own_account() {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("plain_acl.yml");
    std::fs::write(&file, RULES).expect("write ACL file");
    let file_arg = file.display().to_string();
    let set = BrokerSet::start_with(
        "ms-acl",
        &["ASYNC_MASTER", "SLAVE"],
        &format!(
            "slave_sync_interval_ms = 1000\nacl_enable = true\nacl_file = \"{file_arg}\"\n\
             acl_access_key = \"broker-key\"\nacl_secret_key = \"broker-secret\""
        ),
        &["--acl-file", &file_arg],
    );
    let topic = unique("MSACL");
    let mut config = ClientConfig::new(set.namesrv_addr());
    config.credentials = Some(tidemark_remoting::Credentials::new(
        "alice-key",
        "alice-secret",
    ));
    // Routes exist only if the master's signed registration was accepted.
    let producer = Producer::builder(unique("producer"))
        .client_config(config)
        .default_topic_queue_nums(QUEUES)
        .start()
        .await
        .expect("producer");
    for i in 0..5 {
        let sent = producer.send(Message::new(&topic, format!("m{i}"))).await;
        assert!(sent.is_ok(), "{sent:?}\n{}", set.tails());
    }
    producer.shutdown().await;

    let alice = signed_client("alice-key", "alice-secret");
    let slave = set.broker_addr(1);
    let synced = wait_until_async(Duration::from_secs(15), || async {
        fetch_body(&alice, &slave, RequestCode::GetAllTopicConfig)
            .await
            .and_then(|body| TopicConfigSerializeWrapper::from_json_bytes(&body).ok())
            .is_some_and(|topics| topics.topic_config_table.contains_key(&topic))
    })
    .await;
    assert!(
        synced,
        "the slave's signed sync did not copy {topic}\n{}",
        set.tails()
    );

    // The effective configuration the brokers log names the account, never its secret.
    let logs = set.tails();
    assert!(
        logs.contains("broker-key"),
        "the broker logs its configuration"
    );
    assert!(
        !logs.contains("broker-secret"),
        "a broker logged its secret"
    );

    // Unsigned, the same question is refused by both brokers and the name server.
    let unsigned = raw();
    for addr in [set.broker_addr(0), slave, set.namesrv_addr()] {
        let response = unsigned
            .invoke(
                &addr,
                RemotingCommand::request(RequestCode::GetBrokerClusterInfo),
                CALL,
            )
            .await
            .expect("an answer");
        assert_eq!(
            response.response_code(),
            ResponseCode::NoPermission,
            "{addr}"
        );
        assert_eq!(
            response.remark.as_deref(),
            Some("No accessKey is configured")
        );
    }
}
