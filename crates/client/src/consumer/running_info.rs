//! What a push or lite pull consumer tells an operator about itself (GET_CONSUMER_RUNNING_INFO,
//! relayed by the broker; mqadmin `consumerStatus`): its settings, subscriptions, every queue
//! it holds with the messages cached there, and its pull and consume figures per topic.

use std::collections::BTreeMap;
use std::time::Instant;

use tidemark_protocol::body::{running_info_property as prop, ConsumerRunningInfo};
use tidemark_protocol::code::version;
use tidemark_remoting::now_ms;

use super::consume::ConsumeMode;
use super::core::ConsumerCore;

impl ConsumerCore {
    pub(crate) fn running_info(&self) -> ConsumerRunningInfo {
        let now = Instant::now();
        let now_ms = now_ms();
        let settings = &self.settings;
        let mut properties: BTreeMap<String, String> = BTreeMap::new();
        let mut put = |key: &str, value: String| {
            properties.insert(key.to_owned(), value);
        };
        // The settings under the names of Java's consumer fields, as its client lists them.
        put("consumerGroup", settings.group.clone());
        put(
            "messageModel",
            settings.message_model.java_name().to_owned(),
        );
        put(
            "consumeFromWhere",
            settings.consume_from_where.java_name().to_owned(),
        );
        put(
            "consumeTimestamp",
            settings.consume_timestamp_ms.to_string(),
        );
        put(
            "allocateMessageQueueStrategy",
            settings.allocate_strategy.name().to_owned(),
        );
        put("consumeThreadMax", settings.consume_concurrency.to_string());
        put(
            "consumeMessageBatchMaxSize",
            settings.consume_batch_max_size.to_string(),
        );
        put("pullBatchSize", settings.pull_batch_size.to_string());
        put(
            "maxReconsumeTimes",
            settings.max_reconsume_times.unwrap_or(-1).to_string(),
        );
        put(
            "consumeTimeout",
            (settings.consume_timeout.as_secs() / 60).to_string(),
        );
        put(
            "suspendCurrentQueueTimeMillis",
            settings.suspend_current_queue_time.as_millis().to_string(),
        );
        put("namesrvAddr", settings.client.namesrv_addrs.join(";"));
        put("clientId", self.instance.client_id().to_owned());
        put("language", "RUST".to_owned());
        put(
            prop::NAMESRV_ADDR,
            settings
                .client
                .namesrv_addrs
                .iter()
                .map(|addr| format!("{addr};"))
                .collect(),
        );
        put(
            prop::CONSUME_TYPE,
            self.rules.consume_type.java_name().to_owned(),
        );
        put(prop::CLIENT_VERSION, version::CURRENT_NAME.to_owned());
        put(prop::CONSUMER_START_TIMESTAMP, self.started_ms.to_string());
        match &self.mode {
            ConsumeMode::Concurrent(_) | ConsumeMode::Orderly(_) => {
                put(
                    prop::CONSUME_ORDERLY,
                    matches!(self.mode, ConsumeMode::Orderly(_)).to_string(),
                );
                put(
                    prop::THREADPOOL_CORE_SIZE,
                    settings.consume_concurrency.to_string(),
                );
            }
            ConsumeMode::Poll(_) => {}
        }

        let mut subscription_set: Vec<_> = self.subscriptions.values().cloned().collect();
        subscription_set.sort_by(|a, b| (&a.topic, &a.sub_string).cmp(&(&b.topic, &b.sub_string)));

        let mut mq_table = BTreeMap::new();
        for slot in self.queues.slots() {
            let commit = self.offsets.read_memory(&slot.queue).unwrap_or(-1);
            let info = slot.with_process(|process| process.running_info(commit, now, now_ms));
            mq_table.insert(slot.queue.clone(), info);
        }
        let status_table = match self.mode {
            // Java's lite pull consumer reports no rates either.
            ConsumeMode::Poll(_) => BTreeMap::new(),
            _ => self
                .subscriptions
                .keys()
                .map(|topic| (topic.clone(), self.rates.status(topic, now_ms)))
                .collect(),
        };
        ConsumerRunningInfo {
            jstack: None,
            // A push consumer holds queues; POP tables are a POP consumer's.
            mq_pop_table: BTreeMap::new(),
            mq_table,
            properties,
            status_table,
            subscription_set,
        }
    }
}
