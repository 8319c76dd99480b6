//! `tidemark bench produce` over remoting: sync, async, oneway and batch senders, and sends in
//! transactions.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_client::{Message, Producer};
use tokio::task::JoinSet;

use super::{Common, ProduceArgs, SendMode, Stats};

/// A body of `size` bytes whose first eight carry the time it was made, in microseconds since
/// the Unix epoch (big-endian), so that a consumer on this machine can time the message's
/// whole way with microsecond resolution. Shorter bodies carry no time.
pub(crate) fn stamped_body(size: usize) -> Bytes {
    let mut body = vec![b'x'; size];
    if size >= 8 {
        body[..8].copy_from_slice(&now_us().to_be_bytes());
    }
    Bytes::from(body)
}

/// The time a [`stamped_body`] was made, if it is one.
pub(crate) fn stamp_of(body: &[u8]) -> Option<u64> {
    let stamp: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(stamp))
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The topics a run with `--topics count` sends to: `topic`, then `topic-1` … `topic-{count-1}`.
pub(crate) fn topic_names(topic: &str, count: usize) -> Vec<String> {
    let mut names = vec![topic.to_owned()];
    names.extend((1..count).map(|index| format!("{topic}-{index}")));
    names
}

/// Runs `args.producers` senders of one producer in `args.mode` until the run is over.
pub(crate) async fn run(args: &ProduceArgs, stats: Arc<Stats>) -> anyhow::Result<()> {
    let (mode, batch, inflight) = (args.mode, args.batch.max(1), args.inflight.max(1));
    let topics: Arc<[String]> = topic_names(&args.common.topic, args.topics).into();
    run_senders(
        &args.common,
        topics,
        args.producers,
        args.size,
        stats,
        move |sender| async move {
            match mode {
                SendMode::Sync => sender.sync(None).await,
                SendMode::Async => sender.outstanding(inflight).await,
                SendMode::Oneway => sender.oneway().await,
                SendMode::Batch => sender.batches(batch).await,
            }
        },
    )
    .await
}

/// Starts one producer and `count` senders on it, each running `send_loop` until the run is
/// over; then stops counting and shuts the producer down.
pub(crate) async fn run_senders<F, Fut>(
    common: &Common,
    topics: Arc<[String]>,
    count: usize,
    size: usize,
    stats: Arc<Stats>,
    send_loop: F,
) -> anyhow::Result<()>
where
    F: Fn(Sender) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let producer = Producer::builder("benchmark_producer")
        .client_config(common.client_config()?)
        .start()
        .await?;
    let deadline = Instant::now() + common.run_for();
    let mut senders = Vec::new();
    for index in 0..count.max(1) {
        senders.push(tokio::spawn(send_loop(Sender {
            producer: producer.clone(),
            stats: stats.clone(),
            topics: topics.clone(),
            // Senders start at different topics, so many topics are all in use at once.
            next_topic: std::cell::Cell::new(index),
            size,
            deadline,
        })));
    }
    for sender in senders {
        sender.await?;
    }
    stats
        .stopped
        .store(true, std::sync::atomic::Ordering::Release);
    producer.shutdown().await;
    Ok(())
}

/// One sender's loop state.
pub(crate) struct Sender {
    pub(crate) producer: Producer,
    pub(crate) stats: Arc<Stats>,
    /// Taken in turn, from `next_topic`.
    pub(crate) topics: Arc<[String]>,
    pub(crate) next_topic: std::cell::Cell<usize>,
    pub(crate) size: usize,
    pub(crate) deadline: Instant,
}

impl Sender {
    fn message(&self) -> Message {
        let next = self.next_topic.get();
        self.next_topic.set(next.wrapping_add(1));
        Message::new(
            &self.topics[next % self.topics.len()],
            stamped_body(self.size),
        )
    }

    /// One send at a time; with `every`, the n-th send starts no earlier than n × `every`
    /// after the first (an open-loop schedule: a late send does not push the later ones back).
    pub(crate) async fn sync(self, every: Option<Duration>) {
        let first = tokio::time::Instant::now();
        let mut sent: u32 = 0;
        while Instant::now() < self.deadline {
            if let Some(every) = every {
                tokio::time::sleep_until(first + every * sent).await;
                sent = sent.saturating_add(1);
            }
            let started = Instant::now();
            match self.producer.send(self.message()).await {
                Ok(_) => self.stats.record(self.size, started.elapsed()),
                Err(_) => self.stats.error(),
            }
        }
    }

    /// Keeps `inflight` sends outstanding, starting the next as each one completes.
    async fn outstanding(self, inflight: usize) {
        let mut pending = JoinSet::new();
        loop {
            while pending.len() < inflight && Instant::now() < self.deadline {
                let (producer, message) = (self.producer.clone(), self.message());
                pending.spawn(async move {
                    let started = Instant::now();
                    producer.send(message).await.map(|_| started.elapsed())
                });
            }
            match pending.join_next().await {
                Some(Ok(Ok(latency))) => self.stats.record(self.size, latency),
                Some(_) => self.stats.error(),
                None => break,
            }
        }
    }

    async fn oneway(self) {
        while Instant::now() < self.deadline {
            let started = Instant::now();
            match self.producer.send_oneway(self.message()).await {
                Ok(()) => self.stats.record(self.size, started.elapsed()),
                Err(_) => self.stats.error(),
            }
        }
    }

    async fn batches(self, batch: usize) {
        while Instant::now() < self.deadline {
            let messages: Vec<Message> = (0..batch).map(|_| self.message()).collect();
            let started = Instant::now();
            match self.producer.send_batch(messages).await {
                Ok(_) => self
                    .stats
                    .record_many(batch as u64, batch * self.size, started.elapsed()),
                Err(_) => self.stats.error(),
            }
        }
    }
}

/// Commits every local transaction; a check-back (the END_TRANSACTION was lost) commits too.
struct CommitAll;

impl tidemark_client::TransactionListener for CommitAll {
    fn execute(
        &self,
        _message: &Message,
        _sent: &tidemark_client::SendResult,
    ) -> tidemark_client::BoxFuture<'static, tidemark_client::LocalTransactionState> {
        Box::pin(async { tidemark_client::LocalTransactionState::CommitMessage })
    }

    fn check(
        &self,
        _message: &tidemark_client::MessageExt,
    ) -> tidemark_client::BoxFuture<'static, tidemark_client::LocalTransactionState> {
        Box::pin(async { tidemark_client::LocalTransactionState::CommitMessage })
    }
}

pub(crate) async fn transactional(
    common: &Common,
    producers: usize,
    size: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let producer = Producer::builder("benchmark_transactional_producer")
        .client_config(common.client_config()?)
        .start_transactional(Arc::new(CommitAll))
        .await?;
    let deadline = Instant::now() + common.run_for();
    let mut tasks = Vec::new();
    for _ in 0..producers.max(1) {
        let (producer, stats, topic) = (producer.clone(), stats.clone(), common.topic.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let started = Instant::now();
                match producer
                    .send_in_transaction(Message::new(&topic, stamped_body(size)))
                    .await
                {
                    Ok(_) => stats.record(size, started.elapsed()),
                    Err(_) => stats.error(),
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    stats
        .stopped
        .store(true, std::sync::atomic::Ordering::Release);
    producer.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_body_carries_its_time() {
        let before = now_us();
        let body = stamped_body(128);
        assert_eq!(body.len(), 128);
        let stamp = stamp_of(&body).expect("stamped");
        assert!(stamp >= before && stamp <= now_us());
        assert_eq!(stamp_of(&stamped_body(4)), None);
    }
}
