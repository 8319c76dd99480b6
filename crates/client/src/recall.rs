//! Recalling a timer message before it is due (RocketMQ 5.3.2+'s
//! `DefaultMQProducer.recallMessage`): the handle a send answered with names the topic, the
//! broker and the message; the recall goes to that broker's master.

use tidemark_protocol::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tidemark_protocol::message::RecallHandle;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::instance::{bad_response, broker_error};
use crate::producer::Producer;

impl Producer {
    /// Cancels the timer message `recall_handle` names ([`SendResult::recall_handle`]) so it
    /// is never delivered; its unique id. Only before it is due: after that the broker answers
    /// ILLEGAL_OPERATION ("timestamp invalid"). Tidemark brokers answer success only once the
    /// recall is durable and on the replicas a SYNC send waits for; a recall repeated is
    /// answered the same.
    ///
    /// [`SendResult::recall_handle`]: crate::SendResult::recall_handle
    pub async fn recall_message(&self, topic: &str, recall_handle: &str) -> Result<String> {
        let handle = RecallHandle::decode(recall_handle)
            .map_err(|failure| ClientError::InvalidArgument(failure.to_string()))?;
        if handle.topic != topic {
            return Err(ClientError::InvalidArgument(format!(
                "the recall handle is of topic {}, not {topic}",
                handle.topic
            )));
        }
        let core = self.core();
        let broker = handle.broker_name;
        let addr = match core.instance.master_addr(&broker) {
            Some(addr) => addr,
            None => {
                core.instance.update_route(topic).await?;
                core.instance
                    .master_addr(&broker)
                    .ok_or_else(|| ClientError::BrokerNotFound {
                        broker_name: broker.clone(),
                    })?
            }
        };
        let request = RemotingCommand::request_with_header(
            RequestCode::RecallMessage,
            &RecallMessageRequestHeader {
                topic: topic.to_owned(),
                recall_handle: recall_handle.to_owned(),
                producer_group: Some(core.group().to_owned()),
                broker_name: Some(broker.clone()),
            },
        );
        let response = core
            .instance
            .call_master(&addr, &broker, request, core.send_timeout())
            .await?;
        if response.response_code() != ResponseCode::Success {
            return Err(broker_error(&addr, response.response_code(), &response));
        }
        let header: RecallMessageResponseHeader = response
            .decode_header()
            .map_err(|failure| bad_response(&addr, failure))?;
        Ok(header.msg_id)
    }
}
