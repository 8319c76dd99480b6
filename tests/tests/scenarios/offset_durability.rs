//! Consumer progress through broker crashes: the broker is SIGKILLed repeatedly while clients
//! commit offsets, synchronously on some queues and oneway on others. A synchronous
//! UPDATE_CONSUMER_OFFSET is answered only once the offset journal made it durable, so none is
//! ever lost; a oneway commit the broker received is durable within one group commit; no
//! offset is ever lower after a restart than before it. RocketMQ 4.x writes consumer offsets
//! every 5 s (`flushConsumerOffsetInterval`), so a kill there forgets every commit since the
//! last write, acknowledged or not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_protocol::headers::UpdateConsumerOffsetRequestHeader;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tidemark_tests::{init_logging, unique, DevServer};

const WAIT: Duration = Duration::from_secs(5);
const SYNC_QUEUES: [i32; 2] = [0, 1];
const ONEWAY_QUEUES: [i32; 2] = [2, 3];
/// A oneway commit the broker had for this long before the kill must have survived it (the
/// journal syncs within milliseconds; the margin absorbs a busy test machine).
const ONEWAY_DURABLE_WITHIN: Duration = Duration::from_millis(500);

fn commit(topic: &str, group: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::UpdateConsumerOffset,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            commit_offset: offset,
            broker_name: None,
        },
    )
}

async fn query(
    client: &RemotingClient,
    broker: &str,
    topic: &str,
    group: &str,
    queue_id: i32,
) -> i64 {
    tidemark_tests::offsets::stored_offset(client, broker, group, topic, queue_id, WAIT)
        .await
        .expect("query answered")
        .unwrap_or(0)
}

/// What one queue's committer did in a round.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    /// Sync: the highest offset whose commit was answered Success.
    acknowledged: i64,
    /// Oneway: the highest offset sent at least [`ONEWAY_DURABLE_WITHIN`] before the kill.
    surely_received: i64,
    /// The highest offset sent at all.
    last_sent: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_repeated_broker_sigkill() {
    init_logging();
    let kills: usize = std::env::var("TIDEMARK_OFFSET_KILLS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20);
    let mut server = DevServer::start("offset-kill", &[]);
    let broker = server.broker_addr();
    let topic = unique("OffsetKillT");
    let group = unique("OffsetKillG");
    let mut floor = [0i64; 4];
    let (mut sync_acknowledged, mut oneway_sent, mut oneway_lost_max) = (0u64, 0u64, 0i64);
    for round in 0..kills {
        let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sent: Arc<Mutex<[Sent; 4]>> = Arc::new(Mutex::new([Sent::default(); 4]));
        let mut tasks = Vec::new();
        for queue_id in SYNC_QUEUES.into_iter().chain(ONEWAY_QUEUES) {
            let (client, stop, sent) = (client.clone(), stop.clone(), sent.clone());
            let (broker, topic, group) = (broker.clone(), topic.clone(), group.clone());
            let start = floor[queue_id as usize];
            tasks.push(tokio::spawn(async move {
                let oneway = ONEWAY_QUEUES.contains(&queue_id);
                let mut history: Vec<(Instant, i64)> = Vec::new();
                let mut offset = start;
                let mut count = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    offset += 1;
                    // Counted as sent before it goes: the broker may store a commit whose
                    // answer the kill cut off.
                    sent.lock().expect("lock")[queue_id as usize].last_sent = offset;
                    let request = commit(&topic, &group, queue_id, offset);
                    if oneway {
                        if client.invoke_oneway(&broker, request).await.is_err() {
                            break;
                        }
                        history.push((Instant::now(), offset));
                        count += 1;
                        tokio::time::sleep(Duration::from_micros(300)).await;
                    } else {
                        match client.invoke(&broker, request, WAIT).await {
                            Ok(response) if response.response_code() == ResponseCode::Success => {
                                count += 1;
                                sent.lock().expect("lock")[queue_id as usize].acknowledged = offset;
                            }
                            _ => break,
                        }
                    }
                }
                (history, count)
            }));
        }
        // Kill at a different moment of the load each round.
        tokio::time::sleep(Duration::from_millis(300 + (round as u64 * 37) % 400)).await;
        let killed_at = Instant::now();
        server.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut histories = Vec::new();
        for task in tasks {
            histories.push(task.await.expect("committer"));
        }
        client.shutdown();
        for (index, queue_id) in ONEWAY_QUEUES.into_iter().enumerate() {
            let (history, count) = &histories[SYNC_QUEUES.len() + index];
            oneway_sent += count;
            let surely = history
                .iter()
                .filter(|(at, _)| killed_at.duration_since(*at) >= ONEWAY_DURABLE_WITHIN)
                .map(|(_, offset)| *offset)
                .max()
                .unwrap_or(floor[queue_id as usize]);
            sent.lock().expect("lock")[queue_id as usize].surely_received = surely;
        }
        sync_acknowledged += histories[..SYNC_QUEUES.len()]
            .iter()
            .map(|(_, count)| count)
            .sum::<u64>();

        server.restart();
        let reader = RemotingClient::new(ClientConfig::default(), None);
        let sent = *sent.lock().expect("lock");
        for queue_id in SYNC_QUEUES.into_iter().chain(ONEWAY_QUEUES) {
            let index = queue_id as usize;
            let recovered = query(&reader, &broker, &topic, &group, queue_id).await;
            assert!(
                recovered >= floor[index],
                "round {round} queue {queue_id}: offset went back from {} to {recovered}",
                floor[index]
            );
            if SYNC_QUEUES.contains(&queue_id) {
                assert!(
                    recovered >= sent[index].acknowledged,
                    "round {round} queue {queue_id}: acknowledged commit {} lost (recovered {recovered})\n{}",
                    sent[index].acknowledged,
                    server.tail_text()
                );
            } else {
                assert!(
                    recovered >= sent[index].surely_received,
                    "round {round} queue {queue_id}: oneway commit {} sent {ONEWAY_DURABLE_WITHIN:?} before the kill lost (recovered {recovered})",
                    sent[index].surely_received
                );
                oneway_lost_max = oneway_lost_max.max(sent[index].last_sent - recovered);
            }
            assert!(
                recovered <= sent[index].last_sent.max(floor[index]),
                "round {round} queue {queue_id}: {recovered} was never committed"
            );
            floor[index] = recovered;
        }
        reader.shutdown();
    }
    println!(
        "offset durability over {kills} broker SIGKILLs: {sync_acknowledged} acknowledged sync commits, 0 lost \
         (RocketMQ 4.x: every commit since its last 5 s flush); {oneway_sent} oneway commits, at most \
         {oneway_lost_max} of the last ones lost per kill (in flight or in the last group commit)"
    );
    server.stop();
}
