//! `tidemark bench consume` (push consumers reading the topic from its first message, or POP)
//! and `tidemark bench e2e` (senders and push consumers at once, timing each message from its
//! making to its consumption).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_client::{
    concurrent_fn, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer, SimpleConsumer,
};
use tidemark_remoting::now_ms;

use super::produce::{now_us, run_senders, stamp_of, topic_names};
use super::{group_or_fresh, prepare, progress, Common, ConsumeArgs, E2eArgs, Stats};

/// Push consumers of a fresh group (or `--group`) from the topic's first message.
pub(crate) async fn push(args: &ConsumeArgs) -> anyhow::Result<()> {
    let route = prepare::ensure_topic(&args.common).await?;
    let group = group_or_fresh(&args.group, "consume");
    let stats = args.common.stats();
    let consumers = start_consumers(
        &args.common,
        &group,
        args.consumers,
        ConsumeFromWhere::ConsumeFromFirstOffset,
        None,
        stats.clone(),
    )
    .await?;
    if let Some(route) = &route {
        prepare::wait_for_assignment(&consumers, route).await?;
    }
    let reporter = progress(stats.clone(), "consumed");
    tokio::time::sleep(args.common.run_for()).await;
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    for consumer in consumers {
        consumer.shutdown().await;
    }
    stats.print_summary("consume", 0, args.common.json, args.common.measured())
}

/// Consumers first, owning every queue; then senders (paced with `--rate`); only messages made
/// in this run count, each timed from its making to its consumption.
pub(crate) async fn end_to_end(args: &E2eArgs) -> anyhow::Result<()> {
    let route = prepare::ensure_topic(&args.common).await?;
    let group = group_or_fresh(&args.group, "e2e");
    // Nothing counts until the senders' warm-up is over: only messages made after it do.
    let made_after = Arc::new(AtomicU64::new(u64::MAX));
    let received = Arc::new(Stats::new(Duration::ZERO));
    let consumers = start_consumers(
        &args.common,
        &group,
        args.consumers,
        ConsumeFromWhere::ConsumeFromLastOffset,
        Some(made_after.clone()),
        received.clone(),
    )
    .await?;
    if let Some(route) = &route {
        prepare::wait_for_assignment(&consumers, route).await?;
    }
    let sent = args.common.stats();
    made_after.store(now_us() + args.common.warmup * 1_000_000, Ordering::Release);
    let reporter = progress(received.clone(), "end-to-end");
    let producing = produce_paced(args, sent.clone()).await;
    // Let the consumers drain what is still in flight.
    tokio::time::sleep(Duration::from_secs(2)).await;
    received.stopped.store(true, Ordering::Release);
    reporter.abort();
    for consumer in consumers {
        consumer.shutdown().await;
    }
    producing?;
    if !args.common.json {
        println!(
            "sent: {} msgs, {} errors",
            sent.count.load(Ordering::Relaxed),
            sent.errors.load(Ordering::Relaxed)
        );
    }
    received.print_summary("e2e", args.size, args.common.json, args.common.measured())
}

/// Sync senders; with `--rate`, each keeps to its share of that many sends per second.
async fn produce_paced(args: &E2eArgs, stats: Arc<Stats>) -> anyhow::Result<()> {
    let senders = args.producers.max(1);
    let every = args
        .rate
        .filter(|rate| *rate > 0)
        .map(|rate| Duration::from_secs_f64(senders as f64 / rate as f64));
    run_senders(
        &args.common,
        topic_names(&args.common.topic, 1).into(),
        senders,
        args.size,
        stats,
        move |sender| sender.sync(every),
    )
    .await
}

/// POP consumption: `consumers` receive loops, each acknowledging every message it got (all of
/// a batch's acknowledgements in flight at once, as the 5.x clients send them).
pub(crate) async fn pop(args: &ConsumeArgs) -> anyhow::Result<()> {
    let group = group_or_fresh(&args.group, "pop");
    let stats = args.common.stats();
    let reporter = progress(stats.clone(), "popped+acked");
    let deadline = Instant::now() + args.common.run_for();
    let mut loops = Vec::new();
    for _ in 0..args.consumers.max(1) {
        let consumer = Arc::new(
            SimpleConsumer::builder(&group)
                .client_config(args.common.client_config()?)
                .subscribe(&args.common.topic, "*")
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .invisible_duration(Duration::from_secs(60))
                .await_duration(Duration::from_secs(1))
                .start()
                .await?,
        );
        let stats = stats.clone();
        loops.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let batch = match consumer.receive(32).await {
                    Ok(batch) => batch,
                    Err(_) => {
                        stats.error();
                        continue;
                    }
                };
                let mut acks = tokio::task::JoinSet::new();
                for message in batch {
                    let (consumer, stats) = (consumer.clone(), stats.clone());
                    acks.spawn(async move {
                        let started = Instant::now();
                        match consumer.ack(&message).await {
                            Ok(()) => stats.record(message.message.body.len(), started.elapsed()),
                            Err(_) => stats.error(),
                        }
                    });
                }
                while acks.join_next().await.is_some() {}
            }
            consumer.shutdown().await;
        }));
    }
    for task in loops {
        task.await?;
    }
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    stats.print_summary(
        if args.consumers > 1 {
            "pop-consume-n"
        } else {
            "pop-consume"
        },
        0,
        args.common.json,
        args.common.measured(),
    )
}

/// With `made_after` (µs since the epoch, read at each message), only messages this bench
/// stamped at or after it count (older ones on the topic are consumed and skipped).
async fn start_consumers(
    common: &Common,
    group: &str,
    count: usize,
    from: ConsumeFromWhere,
    made_after: Option<Arc<AtomicU64>>,
    stats: Arc<Stats>,
) -> anyhow::Result<Vec<PushConsumer>> {
    let mut consumers = Vec::new();
    for _ in 0..count.max(1) {
        let (stats, made_after) = (stats.clone(), made_after.clone());
        let consumer = PushConsumer::builder(group)
            .client_config(common.client_config()?)
            .subscribe(&common.topic, "*")
            .consume_from_where(from)
            .consume_batch_max_size(32)
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                let stats = stats.clone();
                let made_after = made_after
                    .as_ref()
                    .map(|after| after.load(Ordering::Acquire));
                async move {
                    let now = now_us();
                    for message in &messages {
                        // A stamp from the future is not one of ours.
                        let made = stamp_of(&message.body).filter(|stamp| *stamp <= now);
                        let latency = match (made, made_after) {
                            (Some(made), Some(after)) if made >= after => {
                                Duration::from_micros(now - made)
                            }
                            (_, Some(_)) => continue,
                            (Some(made), None) => Duration::from_micros(now - made),
                            (None, None) => Duration::from_millis(
                                (now_ms() - message.born_timestamp).max(0) as u64,
                            ),
                        };
                        stats.record(message.body.len(), latency);
                    }
                    ConsumeStatus::Success
                }
            }))
            .await?;
        consumers.push(consumer);
    }
    Ok(consumers)
}
