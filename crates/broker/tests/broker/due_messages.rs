//! Messages the broker stores itself when they become due — a timer message, a delay-level
//! message — go through the same door as a send: a SYNC master's slave holds each before a
//! held pull hands it out, and the put statistics count them.

use crate::common::*;
use tidemark_broker::BrokerRole;

/// Runtime info's `msgPutTotalTodayNow` once it reaches `expected` (sampled periodically, so
/// asked until then, bounded); what it last said otherwise.
async fn puts_reach(client: &RemotingClient, broker: &str, expected: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let puts: u64 = runtime_info(client, broker)
            .await
            .get("msgPutTotalTodayNow")
            .and_then(|puts| puts.parse().ok())
            .unwrap_or(0);
        if puts >= expected || tokio::time::Instant::now() > deadline {
            return puts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_messages_reach_a_sync_slave_before_a_held_pull_and_count_as_puts() {
    let master_dir = tempfile::tempdir().expect("tempdir");
    let slave_dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let mut settings = config(master_dir.path(), &namesrv);
    settings.broker_role = BrokerRole::SyncMaster;
    let (master, stop_master, master_task) = start_broker_with_ha(settings).await;
    let mut settings = config(slave_dir.path(), &namesrv);
    settings.broker_role = BrokerRole::Slave;
    settings.broker_id = 1;
    let (slave, stop_slave, slave_task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let puller = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let registered = client
        .invoke(&master, heartbeat(), WAIT)
        .await
        .expect("answered");
    assert_eq!(registered.response_code(), ResponseCode::Success);
    // Until the slave is connected a SYNC master stores a send but answers
    // SLAVE_NOT_AVAILABLE: send until one is acknowledged as replicated.
    let mut puts = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let answer = client
            .invoke(
                &master,
                send_request(&format!("first-{puts}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
        puts += 1;
        if answer.response_code() == ResponseCode::Success {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slave never connected: {:?}",
            answer.remark
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let due_in_a_second = [
        with_property(send_request("timer", "TagA", 0), "TIMER_DELAY_MS", "1000"),
        with_delay(send_request("delayed", "TagA", 0), 1),
    ];
    for request in due_in_a_second {
        let end = max_offset(&client, &master).await;
        // Held before the message is sent, so only its arrival can answer it.
        let held = {
            let (puller, master) = (puller.clone(), master.clone());
            tokio::spawn(async move {
                puller
                    .invoke(&master, pull_request(end, None, 15_000), WAIT * 2)
                    .await
                    .expect("answered")
            })
        };
        send_ok((&client, &master), request).await;
        puts += 1;
        let pulled = held.await.expect("pull task");
        assert_eq!(pulled.response_code(), ResponseCode::Success);
        let records = decode_records(&pulled.body, DecodeOptions::default()).expect("records");
        assert_eq!(records.len(), 1, "the due message, alone");
        puts += 1;
        // Asked right after the pull answered: the slave had it already.
        assert!(
            max_offset(&client, &slave).await > end,
            "a held pull handed out a due message its SYNC master's slave did not have"
        );
    }
    assert_eq!(
        puts_reach(&client, &master, puts).await,
        puts,
        "every send and every due message counted once as a put"
    );
    let _ = stop_slave.send(true);
    slave_task.await.expect("task").expect("clean stop");
    let _ = stop_master.send(true);
    master_task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
    client.shutdown();
    puller.shutdown();
}
