//! The transactional workload: a producer sends half messages to the queue topic and settles
//! each as its value says — committed or rolled back at once, or left unknown for the broker's
//! check-back to settle. The checker holds the broker to the outcome: a committed value is a
//! write like any acknowledged send (stored once, delivered to every group), a rolled-back one
//! is never stored or delivered, whatever fault came between the half and its settlement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{
    BoxFuture, ClientConfig, ClientError, LocalTransactionState, Message, MessageExt, Producer,
    SendResult, SendStatus, TransactionListener, TransactionProducer,
};

use crate::history::{transaction_commits, Kind, Outcome, QueueRef, Recorder, SendMode};

const PRODUCER_GROUP: &str = "chaos-p-tx";
const SEND_TIMEOUT: Duration = Duration::from_secs(3);

/// The value of the `n`th transaction: in turn committed, rolled back, and left unknown for
/// the check-back to commit or roll back.
fn value_of(n: u64) -> String {
    let kind = match n % 4 {
        0 => "tc",
        1 => "tr",
        2 => "tuc",
        _ => "tur",
    };
    format!("{kind}{n}")
}

/// Settles each transaction as its value says ([`transaction_commits`]).
struct ByValue;

impl TransactionListener for ByValue {
    fn execute(
        &self,
        message: &Message,
        _sent: &SendResult,
    ) -> BoxFuture<'static, LocalTransactionState> {
        let value = String::from_utf8_lossy(message.body()).into_owned();
        let state = if value.starts_with("tu") {
            LocalTransactionState::Unknown
        } else {
            decided(&value)
        };
        Box::pin(async move { state })
    }

    fn check(&self, message: &MessageExt) -> BoxFuture<'static, LocalTransactionState> {
        let state = decided(&String::from_utf8_lossy(&message.body));
        Box::pin(async move { state })
    }
}

fn decided(value: &str) -> LocalTransactionState {
    match transaction_commits(value) {
        Some(true) => LocalTransactionState::CommitMessage,
        // Not ours: nothing to commit.
        Some(false) | None => LocalTransactionState::RollbackMessage,
    }
}

pub async fn start(config: ClientConfig) -> Result<TransactionProducer, ClientError> {
    Producer::builder(PRODUCER_GROUP)
        .client_config(config)
        .retry_times(0)
        .send_timeout(SEND_TIMEOUT)
        .start_transactional(Arc::new(ByValue))
        .await
}

/// Sends transactions to `topic` one at a time until `stop`. Ok once the half was stored and
/// the local outcome sent; the check-back settles what the broker did not get.
pub async fn send(
    producer: TransactionProducer,
    topic: &'static str,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let value = value_of(n);
        n += 1;
        let invoked = recorder.now();
        let result = producer
            .send_in_transaction(Message::new(topic, value.clone()))
            .await;
        let (outcome, queue) = match &result {
            Ok(sent) if sent.send.status == SendStatus::SendOk => (
                Outcome::Ok,
                Some(QueueRef {
                    topic: sent.send.queue.topic.clone(),
                    broker: sent.send.queue.broker_name.clone(),
                    queue: sent.send.queue.queue_id,
                }),
            ),
            // Refused or not confirmed by the slave: rolled back by the producer.
            Ok(_) => (Outcome::Fail, None),
            Err(_) => (Outcome::Unknown, None),
        };
        recorder.complete(
            "producer-tx",
            invoked,
            outcome,
            Kind::Send {
                mode: SendMode::Transaction,
                values: vec![value],
                queue,
                // The half's offset, in the broker's half topic: not where the value lands.
                offset: None,
            },
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
