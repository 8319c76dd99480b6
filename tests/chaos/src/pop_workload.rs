//! The POP part of the workload: a `SimpleConsumer` group (RocketMQ 5's POP over remoting) on
//! the queue topic that receives, acknowledges most of what it gets, keeps one in ten
//! invisible longer before acknowledging it, and leaves one in twenty to come back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{
    ClientConfig, ClientError, ConsumeFromWhere, ReceivedMessage, SimpleConsumer,
};

use crate::history::{Kind, Outcome, QueueRef, Recorder};

pub const POP_GROUP: &str = "chaos-pop";
const INVISIBLE: Duration = Duration::from_secs(10);
const LONGER: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn start(config: ClientConfig, topic: &str) -> Result<SimpleConsumer, ClientError> {
    SimpleConsumer::builder(POP_GROUP)
        .client_config(config)
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .invisible_duration(INVISIBLE)
        .await_duration(Duration::from_secs(2))
        .start()
        .await
}

fn value(received: &ReceivedMessage) -> String {
    String::from_utf8_lossy(&received.message.body).into_owned()
}

/// Receives and settles until `stop`, then leaves.
pub async fn consume(consumer: SimpleConsumer, recorder: Recorder, stop: Arc<AtomicBool>) {
    let process = format!("{POP_GROUP}/m0");
    let mut turn = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let received = match tokio::time::timeout(CALL_TIMEOUT * 4, consumer.receive(16)).await {
            Ok(Ok(received)) => received,
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        // Every message of the batch was handed out when the receive returned, whenever this
        // loop gets to settle it: a delivery recorded later would look handed out after a
        // commit the broker made meanwhile (its floor passes messages whose invisibility ended).
        for message in &received {
            recorder.event(
                &process,
                Kind::Deliver {
                    group: POP_GROUP.into(),
                    consumer: process.clone(),
                    value: value(message),
                    queue: QueueRef {
                        topic: message.message.queue.topic.clone(),
                        broker: message.message.queue.broker_name.clone(),
                        queue: message.message.queue.queue_id,
                    },
                    offset: message.message.queue_offset,
                },
            );
        }
        for mut message in received {
            turn += 1;
            if turn.is_multiple_of(20) {
                // Left alone: it comes back once its invisibility ends.
                continue;
            }
            if turn % 10 == 5 {
                let invoked = recorder.now();
                let changed = tokio::time::timeout(
                    CALL_TIMEOUT,
                    consumer.change_invisible_duration(&mut message, LONGER),
                )
                .await;
                let outcome = match changed {
                    Ok(Ok(())) => Outcome::Ok,
                    _ => Outcome::Unknown,
                };
                recorder.complete(
                    &process,
                    invoked,
                    outcome,
                    Kind::ChangeInvisible {
                        group: POP_GROUP.into(),
                        value: value(&message),
                        visible_until_ms: visible_until(&recorder, &message),
                    },
                );
            }
            let invoked = recorder.now();
            let acked = tokio::time::timeout(CALL_TIMEOUT, consumer.ack(&message)).await;
            let outcome = match acked {
                Ok(Ok(())) => Outcome::Ok,
                _ => Outcome::Unknown,
            };
            recorder.complete(
                &process,
                invoked,
                outcome,
                Kind::PopAck {
                    group: POP_GROUP.into(),
                    value: value(&message),
                    visible_until_ms: visible_until(&recorder, &message),
                },
            );
        }
    }
    consumer.shutdown().await;
}

/// When the message's current receipt expires, in ms of the run.
fn visible_until(recorder: &Recorder, message: &ReceivedMessage) -> f64 {
    recorder.ms_of_unix_us(message.visible_again_at().saturating_mul(1000))
}
