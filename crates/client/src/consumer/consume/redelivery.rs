//! Handing failed messages back to the broker: CONSUMER_SEND_MSG_BACK, and the client's own
//! copy into the group's retry topic when that is refused (or to dead-letter orderly messages).

use tidemark_protocol::headers::ConsumerSendMsgBackRequestHeader;
use tidemark_protocol::message::property;
use tracing::debug;

use crate::consumer::core::ConsumerCore;
use crate::error::{ClientError, Result};
use crate::message::{retry_topic, Message, MessageExt};

impl ConsumerCore {
    /// CONSUMER_SEND_MSG_BACK, falling back to producing the message into the retry topic.
    pub(super) async fn send_back(&self, message: &MessageExt, delay_level: i32) -> Result<()> {
        let header = ConsumerSendMsgBackRequestHeader {
            offset: message.commit_log_offset,
            group: self.settings.group.clone(),
            delay_level,
            origin_msg_id: Some(message.msg_id.clone()),
            origin_topic: Some(message.topic.clone()),
            unit_mode: false,
            max_reconsume_times: Some(self.rules.max_reconsume_times),
            broker_name: Some(message.queue.broker_name.clone()),
        };
        let direct = match self.instance.master_addr(&message.queue.broker_name) {
            Some(addr) => self.instance.send_back(&addr, &header).await,
            None => Err(ClientError::BrokerNotFound {
                broker_name: message.queue.broker_name.clone(),
            }),
        };
        match direct {
            Ok(()) => Ok(()),
            Err(error) => {
                debug!(msg_id = %message.msg_id, %error, "send-back refused; producing to the retry topic");
                self.send_to_retry_topic(message, 3 + message.reconsume_times)
                    .await
            }
        }
    }

    /// Produces the message a client itself puts into `%RETRY%group` (Java
    /// `sendMessageBackAsNormalMessage`); the broker dead-letters it past the maximum.
    pub(super) async fn send_to_retry_topic(
        &self,
        message: &MessageExt,
        delay_level: i32,
    ) -> Result<()> {
        self.sender
            .send_plain(self.retry_message(message, delay_level))
            .await
            .map(|_| ())
    }

    fn retry_message(&self, message: &MessageExt, delay_level: i32) -> Message {
        let mut retry = Message::new(retry_topic(&self.settings.group), message.body.clone())
            .with_flag(message.flag);
        for (name, value) in message.properties.iter() {
            retry = retry.with_property(name, value);
        }
        let origin = message
            .property(property::ORIGIN_MESSAGE_ID)
            .unwrap_or(&message.msg_id)
            .to_owned();
        let original_topic = message
            .property(property::RETRY_TOPIC)
            .unwrap_or(&message.topic)
            .to_owned();
        let mut retry = retry
            .with_property(property::ORIGIN_MESSAGE_ID, origin)
            .with_property(property::RETRY_TOPIC, original_topic)
            .with_property(
                property::RECONSUME_TIME,
                (message.reconsume_times + 1).to_string(),
            )
            .with_property(
                property::MAX_RECONSUME_TIMES,
                self.rules.max_reconsume_times.to_string(),
            )
            .with_delay_level(delay_level);
        retry
            .properties_mut()
            .remove(property::TRANSACTION_PREPARED);
        retry
            .properties_mut()
            .remove(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        retry
    }
}
