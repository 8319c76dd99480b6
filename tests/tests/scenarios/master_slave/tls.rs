//! A master, a slave and a name server that only take TLS from clients with a certificate of
//! the cluster's CA: the brokers register, the slave copies metadata and replicates the log,
//! all over TLS with their own certificate; a client without one, or with an expired one, gets
//! nothing and the servers log why.

use super::*;
use tidemark_remoting::tls::{ClientTls, ClientTlsSettings, PemFiles};
use tidemark_tests::certs::{CertFiles, TestAuthority};

fn dialer(ca: &std::path::Path, identity: Option<&CertFiles>) -> Arc<ClientTls> {
    let settings = ClientTlsSettings {
        trust: Some(ca.to_path_buf()),
        identity: identity.map(|files| PemFiles {
            certificate: files.certificate.clone(),
            private_key: files.private_key.clone(),
        }),
    };
    Arc::new(ClientTls::new(&settings).expect("client TLS"))
}

fn tls_client(tls: Arc<ClientTls>) -> RemotingClient {
    RemotingClient::new(
        tidemark_remoting::ClientConfig {
            tls: Some(tls),
            ..Default::default()
        },
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_replicate_and_register_over_tls_with_client_certificates() {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestAuthority::new(dir.path(), "cluster");
    let server = ca.issue("server", false);
    let client = ca.issue("client", false);
    let expired = ca.issue("expired", true);
    let (ca_file, cert, key) = (
        ca.ca_file().display().to_string(),
        server.certificate.display().to_string(),
        server.private_key.display().to_string(),
    );
    let set = BrokerSet::start_with(
        "ms-tls",
        &["ASYNC_MASTER", "SLAVE"],
        &format!(
            "slave_sync_interval_ms = 1000\ntls_mode = \"enforcing\"\n\
             tls_certificate = \"{cert}\"\ntls_private_key = \"{key}\"\ntls_client_ca = \"{ca_file}\"\n\
             tls_enable = true\ntls_client_trust = \"{ca_file}\"\n\
             tls_client_certificate = \"{cert}\"\ntls_client_private_key = \"{key}\""
        ),
        &[
            "--tls-mode",
            "enforcing",
            "--tls-certificate",
            &cert,
            "--tls-private-key",
            &key,
            "--tls-client-ca",
            &ca_file,
        ],
    );
    let topic = unique("MSTLS");
    let mut config = ClientConfig::new(set.namesrv_addr());
    config.tls = Some(dialer(&ca.ca_file(), Some(&client)));
    // Routes exist only if the master's registration over TLS was accepted.
    let producer = Producer::builder(unique("producer"))
        .client_config(config)
        .default_topic_queue_nums(QUEUES)
        .start()
        .await
        .expect("producer");
    for i in 0..8 {
        let sent = producer.send(Message::new(&topic, format!("m{i}"))).await;
        assert!(sent.is_ok(), "{sent:?}\n{}", set.tails());
    }
    producer.shutdown().await;

    let trusted = tls_client(dialer(&ca.ca_file(), Some(&client)));
    let replicated = wait_until_async(Duration::from_secs(30), || async {
        let mut same = true;
        for queue_id in 0..QUEUES {
            let master = max_offset(&trusted, &set.broker_addr(0), &topic, queue_id).await;
            let slave = max_offset(&trusted, &set.broker_addr(1), &topic, queue_id).await;
            same &= master.is_some() && master == slave;
        }
        same
    })
    .await;
    assert!(
        replicated,
        "the slave did not replicate over TLS\n{}",
        set.tails()
    );
    let synced = wait_until_async(Duration::from_secs(15), || async {
        fetch_body(
            &trusted,
            &set.broker_addr(1),
            RequestCode::GetAllTopicConfig,
        )
        .await
        .and_then(|body| TopicConfigSerializeWrapper::from_json_bytes(&body).ok())
        .is_some_and(|topics| topics.topic_config_table.contains_key(&topic))
    })
    .await;
    assert!(
        synced,
        "the slave's metadata sync over TLS did not copy {topic}\n{}",
        set.tails()
    );

    // Without TLS, without a certificate, or with an expired one: nothing.
    let refused = [
        ("plaintext", raw()),
        ("no certificate", tls_client(dialer(&ca.ca_file(), None))),
        (
            "expired certificate",
            tls_client(dialer(&ca.ca_file(), Some(&expired))),
        ),
    ];
    let asks = [
        (set.namesrv_addr(), RequestCode::GetBrokerClusterInfo),
        (set.broker_addr(0), RequestCode::GetAllTopicConfig),
        (set.broker_addr(1), RequestCode::GetAllTopicConfig),
    ];
    for (addr, code) in &asks {
        let answer = fetch_body(&trusted, addr, *code).await;
        assert!(answer.is_some(), "{addr} does not answer {code:?} over TLS");
        for (what, client) in &refused {
            let answer = fetch_body(client, addr, *code).await;
            assert!(answer.is_none(), "{what} client answered by {addr}");
        }
    }
    let logs = set.tails();
    assert!(
        logs.contains("plaintext connection refused"),
        "no log line for the plaintext client\n{logs}"
    );
    assert!(
        logs.contains("TLS handshake refused") && logs.contains("certificate expired"),
        "no log line naming the expired certificate\n{logs}"
    );
}
