//! A push consumer that succeeds with every message and counts them: what a scenario starts
//! when it needs a group that keeps up (or has consumed everything) rather than the messages.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer,
};

/// How long [`CountingConsumer::reaches`] waits.
const REACH_TIMEOUT: Duration = Duration::from_secs(30);

#[allow(missing_debug_implementations)]
pub struct CountingConsumer {
    consumer: PushConsumer,
    consumed: Arc<AtomicUsize>,
}

impl CountingConsumer {
    /// Starts a consumer of `group` on every message of `topic`, from the first offset of a
    /// group that has none; panics when it cannot start.
    pub async fn start(config: ClientConfig, group: &str, topic: &str) -> CountingConsumer {
        let consumed = Arc::new(AtomicUsize::new(0));
        let counter = consumed.clone();
        let consumer = PushConsumer::builder(group)
            .client_config(config)
            .subscribe(topic, "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                counter.fetch_add(messages.len(), Ordering::SeqCst);
                async { ConsumeStatus::Success }
            }))
            .await
            .unwrap_or_else(|failure| panic!("consumer of {group} starts: {failure}"));
        CountingConsumer { consumer, consumed }
    }

    /// Messages consumed so far.
    pub fn consumed(&self) -> usize {
        self.consumed.load(Ordering::SeqCst)
    }

    /// Whether `count` messages were consumed within 30 s.
    pub async fn reaches(&self, count: usize) -> bool {
        crate::wait_until(REACH_TIMEOUT, || self.consumed() >= count).await
    }

    pub async fn shutdown(self) {
        self.consumer.shutdown().await;
    }
}
