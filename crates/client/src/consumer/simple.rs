//! [`SimpleConsumer`]: RocketMQ 5's POP consumption, receive / ack / change-invisibility, as the
//! 5.x clients' `SimpleConsumer` offers it, over the remoting protocol (POP_MESSAGE,
//! ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME).
//!
//! The broker hands each received message out with an invisibility time and keeps it in flight
//! until it is acknowledged; one that is not acknowledged in time comes back (through the
//! group's POP retry topic, its reconsume count raised). No offsets, no rebalance: every
//! consumer of the group pops every queue, and the broker decides who gets what.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tidemark_client::ClientError> {
//! use std::time::Duration;
//! use tidemark_client::SimpleConsumer;
//!
//! let consumer = SimpleConsumer::builder("billing")
//!     .namesrv_addr("127.0.0.1:9876")
//!     .subscribe("Orders", "*")
//!     .invisible_duration(Duration::from_secs(30))
//!     .start()
//!     .await?;
//! for message in consumer.receive(16).await? {
//!     // ... handle it, then
//!     consumer.ack(&message).await?;
//! }
//! consumer.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, MessageModel, MessageQueue, SubscriptionData,
};
use tidemark_protocol::headers::{
    parse_pop_info, AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader, PopMessageRequestHeader, PopMessageResponseHeader,
    PopReceipt, PopSource,
};
use tidemark_protocol::message::{decode_records, property, DecodeOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::builder::client_setters;
use crate::config::{unique_instance_name, ClientConfig};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::message::MessageExt;

/// Builds and starts a [`SimpleConsumer`].
#[derive(Debug, Clone)]
pub struct SimpleConsumerBuilder {
    settings: SimpleSettings,
}

#[derive(Debug, Clone)]
struct SimpleSettings {
    client: ClientConfig,
    group: String,
    topic: Option<(String, String)>,
    invisible: Duration,
    await_duration: Duration,
    from_first: bool,
    orderly: bool,
}

impl SimpleConsumerBuilder {
    client_setters!();

    /// The topic and tag expression (`*` or `TagA || TagB`) to receive from.
    pub fn subscribe(mut self, topic: impl Into<String>, expression: impl Into<String>) -> Self {
        self.settings.topic = Some((topic.into(), expression.into()));
        self
    }

    /// How long a received message stays invisible to the group (default 30 s).
    pub fn invisible_duration(mut self, duration: Duration) -> Self {
        self.settings.invisible = duration;
        self
    }

    /// How long `receive` waits on a broker for messages to arrive (default 15 s; zero
    /// answers at once).
    pub fn await_duration(mut self, duration: Duration) -> Self {
        self.settings.await_duration = duration;
        self
    }

    /// A group that never consumed a queue starts at its first message (the default starts
    /// at its last, as RocketMQ does).
    pub fn consume_from_where(mut self, from: ConsumeFromWhere) -> Self {
        self.settings.from_first = from == ConsumeFromWhere::ConsumeFromFirstOffset;
        self
    }

    /// FIFO: a queue's messages come one batch at a time, the next only once the previous
    /// ones are acknowledged (or their invisibility ended — then they come again, first).
    pub fn orderly(mut self, orderly: bool) -> Self {
        self.settings.orderly = orderly;
        self
    }

    pub async fn start(self) -> Result<SimpleConsumer> {
        let settings = self.settings;
        let Some((topic, expression)) = settings.topic.clone() else {
            return Err(ClientError::InvalidArgument(
                "a simple consumer needs subscribe(topic, expression)".into(),
            ));
        };
        if settings.invisible < Duration::from_millis(1) {
            return Err(ClientError::InvalidArgument(
                "the invisible duration must be positive".into(),
            ));
        }
        let instance_name = settings
            .client
            .instance_name
            .clone()
            .unwrap_or_else(unique_instance_name);
        let instance = ClientInstance::new(settings.client.clone(), instance_name);
        instance.register_consumer(ConsumerData {
            consume_from_where: if settings.from_first {
                ConsumeFromWhere::ConsumeFromFirstOffset
            } else {
                ConsumeFromWhere::ConsumeFromLastOffset
            },
            consume_type: ConsumeType::ConsumePop,
            group_name: settings.group.clone(),
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![SubscriptionData::from_expression(&topic, &expression, 1)],
            unit_mode: false,
        });
        instance.start().await?;
        if instance.update_route(&topic).await?.is_none() {
            instance.shutdown(None, Some(&settings.group)).await;
            return Err(ClientError::NoRoute {
                topic,
                reason: "the topic does not exist".into(),
            });
        }
        Ok(SimpleConsumer {
            instance,
            topic,
            expression,
            settings,
            next_broker: AtomicUsize::new(0),
        })
    }
}

/// A message received by POP, with the receipt that acknowledges it.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    pub message: MessageExt,
    pub receipt: PopReceipt,
    /// The broker it came from (acknowledgements go there).
    broker_addr: String,
}

impl ReceivedMessage {
    /// How many times it was handed out before (0 the first time).
    pub fn delivery_attempt(&self) -> i32 {
        self.message.reconsume_times + 1
    }

    /// When it becomes visible again unless acknowledged (epoch ms).
    pub fn visible_again_at(&self) -> i64 {
        self.receipt.visible_again_at()
    }
}

/// A running POP consumer; see the module documentation.
#[derive(Debug)]
pub struct SimpleConsumer {
    instance: Arc<ClientInstance>,
    topic: String,
    expression: String,
    settings: SimpleSettings,
    next_broker: AtomicUsize,
}

impl SimpleConsumer {
    pub fn builder(group: impl Into<String>) -> SimpleConsumerBuilder {
        SimpleConsumerBuilder {
            settings: SimpleSettings {
                client: ClientConfig::default(),
                group: group.into(),
                topic: None,
                invisible: Duration::from_secs(30),
                await_duration: Duration::from_secs(15),
                from_first: false,
                orderly: false,
            },
        }
    }

    pub fn client_id(&self) -> &str {
        self.instance.client_id()
    }

    /// The master of every broker that holds the topic, refreshing the route when it has none.
    async fn brokers(&self) -> Result<Vec<(String, String)>> {
        let route = match self.instance.cached_route(&self.topic) {
            Some(route) => route,
            None => self
                .instance
                .update_route(&self.topic)
                .await?
                .ok_or_else(|| ClientError::NoRoute {
                    topic: self.topic.clone(),
                    reason: "the topic does not exist".into(),
                })?,
        };
        let mut brokers = Vec::new();
        for data in &route.queue_datas {
            if let Some(addr) = self.instance.master_addr(&data.broker_name) {
                brokers.push((data.broker_name.clone(), addr));
            }
        }
        Ok(brokers)
    }

    /// Receives up to `max` (1 to 32) messages from one broker of the topic (taking the brokers
    /// in turn), waiting up to the await duration for some to arrive. Empty when none came.
    pub async fn receive(&self, max: usize) -> Result<Vec<ReceivedMessage>> {
        if !(1..=32).contains(&max) {
            return Err(ClientError::InvalidArgument(format!(
                "receive takes 1 to 32 messages, not {max}"
            )));
        }
        let brokers = self.brokers().await?;
        if brokers.is_empty() {
            return Err(ClientError::NoRoute {
                topic: self.topic.clone(),
                reason: "no broker master holds it".into(),
            });
        }
        let turn = self.next_broker.fetch_add(1, Ordering::Relaxed) % brokers.len();
        let (broker_name, addr) = &brokers[turn];
        let poll_ms = self.settings.await_duration.as_millis() as i64;
        let header = PopMessageRequestHeader {
            consumer_group: self.settings.group.clone(),
            topic: self.topic.clone(),
            queue_id: -1,
            max_msg_nums: max as i32,
            invisible_time: self.settings.invisible.as_millis() as i64,
            poll_time: poll_ms,
            born_time: tidemark_remoting::now_ms(),
            init_mode: if self.settings.from_first { 0 } else { 1 },
            exp_type: Some("TAG".into()),
            exp: Some(self.expression.clone()),
            order: Some(self.settings.orderly),
            attempt_id: None,
            broker_name: Some(broker_name.clone()),
        };
        let request = RemotingCommand::request_with_header(RequestCode::PopMessage, &header);
        let timeout = self.settings.await_duration + self.instance_timeout();
        let response = self
            .instance
            .call_with_timeout(addr, request, timeout)
            .await?;
        match response.response_code() {
            ResponseCode::Success => self.read_popped(broker_name, addr, &response),
            ResponseCode::PollingTimeout | ResponseCode::PullNotFound => Ok(Vec::new()),
            code => Err(ClientError::Broker {
                peer: addr.clone(),
                code,
                remark: response.remark.clone().unwrap_or_default(),
            }),
        }
    }

    fn instance_timeout(&self) -> Duration {
        self.settings.client.request_timeout
    }

    /// The client's side of a pop answer: each message and the receipt it is acknowledged by.
    fn read_popped(
        &self,
        broker_name: &str,
        addr: &str,
        response: &RemotingCommand,
    ) -> Result<Vec<ReceivedMessage>> {
        let header = response.decode_header::<PopMessageResponseHeader>()?;
        let starts = parse_pop_info(header.start_offset_info.as_deref());
        let counts = parse_pop_info(header.order_count_info.as_deref());
        let records = decode_records(&response.body, DecodeOptions::default())?;
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            let source = if record.topic.starts_with(crate::message::RETRY_TOPIC_PREFIX) {
                if record.topic.contains('+') {
                    PopSource::RetryV2
                } else {
                    PopSource::RetryV1
                }
            } else {
                PopSource::Topic
            };
            let key = format!("{} {}", source.flag(), record.queue_id);
            let start = starts.get(&key).copied().unwrap_or(record.queue_offset);
            let receipt = PopReceipt {
                start_offset: start,
                pop_time: header.pop_time,
                invisible_time: header.invisible_time,
                revive_qid: header.revive_qid,
                source,
                broker_name: broker_name.to_owned(),
                queue_id: record.queue_id,
                queue_offset: record.queue_offset,
                commit_log_offset: None,
            };
            let queue = MessageQueue::new(record.topic.clone(), broker_name, record.queue_id);
            let mut message = MessageExt::from_record(record, &queue)?;
            // Orderly: the broker counts deliveries per message.
            if let Some(count) = counts
                .get(&format!(
                    "{} qo{}%{}",
                    source.flag(),
                    receipt.queue_id,
                    receipt.queue_offset
                ))
                .filter(|count| **count > 0)
            {
                message.reconsume_times = *count as i32;
            }
            message
                .properties
                .insert(property::POP_CK, receipt.encode());
            // The application sees the topic it subscribed to, retries included.
            message.topic = self.topic.clone();
            out.push(ReceivedMessage {
                message,
                receipt,
                broker_addr: addr.to_owned(),
            });
        }
        Ok(out)
    }

    /// Acknowledges a received message: the broker never hands it out again. Acknowledging
    /// one whose invisibility already ended is answered but does nothing (it comes again).
    pub async fn ack(&self, received: &ReceivedMessage) -> Result<()> {
        let header = AckMessageRequestHeader {
            consumer_group: self.settings.group.clone(),
            topic: received
                .receipt
                .source
                .real_topic(&self.settings.group, &self.topic),
            queue_id: received.receipt.queue_id,
            extra_info: received.receipt.encode(),
            offset: received.receipt.queue_offset,
            broker_name: Some(received.receipt.broker_name.clone()),
        };
        let request = RemotingCommand::request_with_header(RequestCode::AckMessage, &header);
        let response = self.instance.call(&received.broker_addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => Ok(()),
            code => Err(ClientError::Broker {
                peer: received.broker_addr.clone(),
                code,
                remark: response.remark.clone().unwrap_or_default(),
            }),
        }
    }

    /// Keeps a received message invisible for `duration` from now; its receipt is replaced
    /// by the new one (acknowledge with the updated message).
    pub async fn change_invisible_duration(
        &self,
        received: &mut ReceivedMessage,
        duration: Duration,
    ) -> Result<()> {
        let header = ChangeInvisibleTimeRequestHeader {
            consumer_group: self.settings.group.clone(),
            topic: received
                .receipt
                .source
                .real_topic(&self.settings.group, &self.topic),
            queue_id: received.receipt.queue_id,
            extra_info: received.receipt.encode(),
            offset: received.receipt.queue_offset,
            invisible_time: duration.as_millis() as i64,
            broker_name: Some(received.receipt.broker_name.clone()),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::ChangeMessageInvisibleTime, &header);
        let response = self.instance.call(&received.broker_addr, request).await?;
        if response.response_code() != ResponseCode::Success {
            return Err(ClientError::Broker {
                peer: received.broker_addr.clone(),
                code: response.response_code(),
                remark: response.remark.clone().unwrap_or_default(),
            });
        }
        let changed = response.decode_header::<ChangeInvisibleTimeResponseHeader>()?;
        received.receipt.pop_time = changed.pop_time;
        received.receipt.invisible_time = changed.invisible_time;
        received.receipt.revive_qid = changed.revive_qid;
        received.receipt.start_offset = received.receipt.queue_offset;
        received
            .message
            .properties
            .insert(property::POP_CK, received.receipt.encode());
        Ok(())
    }

    /// Says goodbye to the brokers and closes connections. Messages still in flight come back
    /// to the group once their invisibility ends.
    pub async fn shutdown(&self) {
        self.instance
            .shutdown(None, Some(&self.settings.group))
            .await;
    }
}
