//! An Apache RocketMQ `broker.conf` starts `tidemark broker` as it is: the keys only Apache's
//! broker reads are named in one warning, and a key neither reads stops it with the nearest
//! key Tidemark knows.

use tidemark_tests::{free_broker_port, start_namesrv, tidemark_binary, ServerProcess};

/// The keys of Apache 5.x's shipped `conf/broker.conf`, some it documents for a production
/// broker, and the ones this test needs (addresses, ports, store) under Apache's names; only
/// `grpcServerPort` (the port of Apache's proxy) is not a broker key of Apache's, set so that
/// the test binds no fixed port.
fn apache_broker_conf(port: u16, namesrv_port: u16, store: &std::path::Path) -> String {
    format!(
        "brokerClusterName = DefaultCluster\n\
         brokerName = broker-a\n\
         brokerId = 0\n\
         deleteWhen = 04\n\
         fileReservedTime = 48\n\
         brokerRole = ASYNC_MASTER\n\
         flushDiskType = ASYNC_FLUSH\n\
         namesrvAddr = 127.0.0.1:{namesrv_port}\n\
         brokerIP1 = 127.0.0.1\n\
         bindAddress = 127.0.0.1\n\
         listenPort = {port}\n\
         grpcServerPort = 0\n\
         storePathRootDir = {root}\n\
         storePathCommitLog = {root}/commitlog\n\
         autoCreateTopicEnable = true\n\
         authenticationEnabled = false\n\
         enableDLegerCommitLog = false\n\
         sendMessageThreadPoolNums = 16\n\
         useReentrantLockWhenPutMessage = true\n\
         waitTimeMillsInSendQueue = 200\n",
        root = store.display()
    )
}

#[test]
fn an_apache_broker_conf_starts_the_broker_with_one_warning_for_the_keys_it_ignores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_namesrv, namesrv_port) = start_namesrv("apache-conf-namesrv", &[]);
    let config = dir.path().join("broker.conf");
    let store = dir.path().join("store");
    let (broker, _port) = ServerProcess::start_on_free_ports(
        "apache-conf-broker",
        tidemark_binary(),
        free_broker_port,
        |port| {
            std::fs::write(&config, apache_broker_conf(*port, namesrv_port, &store))
                .expect("write broker.conf");
            vec!["broker".into(), "-c".into(), config.display().to_string()]
        },
        "tidemark broker ready",
    );
    let tail = broker.tail_text();
    let warnings: Vec<&str> = tail
        .lines()
        .filter(|line| line.contains("that Tidemark does not use are ignored"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning expected:\n{tail}");
    for key in [
        "authenticationEnabled",
        "enableDLegerCommitLog",
        "sendMessageThreadPoolNums",
        "storePathCommitLog",
        "useReentrantLockWhenPutMessage",
        "waitTimeMillsInSendQueue",
    ] {
        assert!(
            warnings[0].contains(key),
            "{key} not named: {}",
            warnings[0]
        );
    }
    assert!(
        !warnings[0].contains("brokerName") && !warnings[0].contains("deleteWhen"),
        "keys Tidemark reads are not ignored: {}",
        warnings[0]
    );
    assert!(
        store.join("config").is_dir(),
        "the store is where broker.conf put it"
    );
}

#[test]
fn a_key_neither_broker_reads_stops_it_naming_the_nearest_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("broker.conf");
    let store = dir.path().join("store");
    let port = free_broker_port();
    let text = apache_broker_conf(port, 9, &store).replace("brokerName", "brokerNmae");
    std::fs::write(&config, text).expect("write broker.conf");
    let failure = ServerProcess::try_start(
        "apache-conf-typo",
        tidemark_binary(),
        vec!["broker".into(), "-c".into(), config.display().to_string()],
        "tidemark broker ready",
    )
    .expect_err("a misspelt key stops the broker");
    assert!(
        failure.contains("unknown key `brokerNmae` (did you mean `brokerName`?)")
            && failure.contains("broker.conf"),
        "{failure}"
    );
    assert!(
        !store.exists(),
        "nothing was created for a configuration refused"
    );
}
