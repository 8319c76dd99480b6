//! GET_BROKER_RUNTIME_INFO reports figures the broker measured, not placeholders.

use crate::common::*;

/// GET_BROKER_RUNTIME_INFO carries the keys the Java admin reads, with measured values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_info_reports_measured_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..3 {
        client
            .invoke(
                &cluster.broker,
                send_request(&format!("r{index}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
    }
    // The figures are sampled periodically: asked until the three puts show (bounded).
    let deadline = tokio::time::Instant::now() + WAIT;
    let table = loop {
        let table = runtime_info(&client, &cluster.broker).await;
        let puts = table
            .get("msgPutTotalTodayNow")
            .cloned()
            .unwrap_or_default();
        if puts == "3" || tokio::time::Instant::now() > deadline {
            break table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(table["msgPutTotalTodayNow"], "3");
    assert_eq!(
        table["putTps"].split(' ').count(),
        3,
        "tps over 10, 60 and 600 s"
    );
    assert!(
        table["commitLogDirCapacity"].starts_with("Total : "),
        "{}",
        table["commitLogDirCapacity"]
    );
    assert!(
        table["earliestMessageTimeStamp"]
            .parse::<i64>()
            .expect("a timestamp")
            > 1_600_000_000_000
    );
    assert_eq!(table["brokerRole"], "ASYNC_MASTER");
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}
