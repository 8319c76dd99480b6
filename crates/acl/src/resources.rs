//! What each request needs: the topics and groups it touches, with the permission, and whether
//! only admin accounts may send it.

use thiserror::Error;
use tidemark_protocol::body::{BatchAckMessageRequestBody, HeartbeatData, LockBatchRequestBody};
use tidemark_protocol::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader, NotificationRequestHeader, PeekMessageRequestHeader,
    PollingInfoRequestHeader, PopMessageRequestHeader, PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader, QueryMessageRequestHeader, RecallMessageRequestHeader,
    SendMessageRequestHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{CommandHeader, HeaderError, JsonError, RemotingCommand, RequestCode};

use crate::perm::Perm;

const RETRY_PREFIX: &str = "%RETRY%";

/// A topic or a group. A `%RETRY%group` topic is its group, as in RocketMQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Topic(String),
    Group(String),
}

impl Resource {
    pub fn topic(name: &str) -> Resource {
        match name.strip_prefix(RETRY_PREFIX) {
            Some(group) => Resource::Group(group.to_owned()),
            None => Resource::Topic(name.to_owned()),
        }
    }

    /// How RocketMQ names it in a refusal (`topic:orders`, `group:billing`).
    pub fn describe(&self) -> String {
        match self {
            Resource::Topic(name) => format!("topic:{name}"),
            Resource::Group(name) => format!("group:{name}"),
        }
    }
}

/// Request codes only admin accounts may send: RocketMQ's five (topic and group creation and
/// deletion, broker config updates) and the others that change what a broker, name server or
/// controller serves: progress resets, write permission, cleanup, routes, ACL itself, the POP
/// state slaves copy (every group's receipts), and the controllers' state (brokers and
/// controllers sign as admin accounts, as for REGISTER_BROKER).
pub fn admin_only(code: RequestCode) -> bool {
    use RequestCode::*;
    matches!(
        code,
        UpdateAndCreateTopic
            | UpdateAndCreateTopicList
            | UpdateBrokerConfig
            | DeleteTopicInBroker
            | UpdateAndCreateSubscriptionGroup
            | UpdateAndCreateSubscriptionGroupList
            | DeleteSubscriptionGroup
            | InvokeBrokerToResetOffset
            | ResetConsumerClientOffset
            | CloneGroupOffset
            | WipeWritePermOfBroker
            | AddWritePermOfBroker
            | CleanExpiredConsumeQueue
            | CleanUnusedTopic
            | DeleteExpiredCommitLog
            | PutKvConfig
            | DeleteKvConfig
            | DeleteTopicInNamesrv
            | UpdateNamesrvConfig
            | RegisterBroker
            | UnregisterBroker
            // Keeps a broker alive on the name server, as a registration does.
            | QueryDataVersion
            | UpdateAndCreateAclConfig
            | DeleteAclConfig
            | UpdateGlobalWhiteAddrsConfig
            // A master's whole POP state (every group's in-flight receipts), for its slaves.
            | GetAllPopState
            // Who moved which group's progress, with their addresses: an audit trail; and
            // putting it back.
            | GetProgressHistory
            | RestoreProgress
            | PlanProgressMove
            // Dead letters read (other groups' messages) and sent again.
            | GetDeadLetters
            | ResendDeadLetters
            | ReplayRetries
            // Controllers: what brokers and controllers change (and a broker's role).
            | BrokerHeartbeat
            | ControllerAlterSyncStateSet
            | ControllerElectMaster
            | ControllerRegisterBroker
            | ControllerApplyBrokerId
            | CleanBrokerData
            | UpdateControllerConfig
            | NotifyBrokerRoleChanged
            | RaftAppendEntries
            | RaftVote
            | RaftInstallSnapshot
    )
}

/// A request whose header or body the ACL could not read. The handler reads the same typed
/// header (or body) and would refuse it too, so it is refused before anything is served.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("request code={code} refused: its {part} cannot be read: {reason}")]
pub struct Unreadable {
    code: i32,
    part: &'static str,
    reason: String,
}

/// The resources `request` touches and the permission each needs.
///
/// Each request code is read with the very header type (or body) its handler decodes, through
/// the same decoder (a send's through [`SendMessageRequestHeader::decode_request`]), so the
/// resource checked is the resource acted on: no field is looked up by name here. A short-form
/// header's long-named field beside it (`topic` next to `b`) is ignored by both.
pub fn needed(request: &RemotingCommand) -> Result<Vec<(Resource, Perm)>, Unreadable> {
    use RequestCode::*;
    let mut needs = Needs::default();
    let code = request.request_code();
    let header_error = |failure: HeaderError| unreadable(code, "header", failure);
    let body_error = |failure: JsonError| unreadable(code, "body", failure);
    match code {
        SendMessage | SendMessageV2 | SendBatchMessage | SendReplyMessage | SendReplyMessageV2 => {
            let header = SendMessageRequestHeader::decode_request(request).map_err(header_error)?;
            needs.send(&header.topic);
        }
        RecallMessage => {
            // The handler acts on this topic only: a handle naming another is refused.
            let header: RecallMessageRequestHeader =
                request.decode_header().map_err(header_error)?;
            needs.send(&header.topic);
        }
        ConsumerSendMsgBack => {
            let header: ConsumerSendMsgBackRequestHeader =
                request.decode_header().map_err(header_error)?;
            needs.group(&header.group);
        }
        PullMessage | LitePullMessage => needs.consume::<PullMessageRequestHeader>(request)?,
        PopMessage => needs.consume::<PopMessageRequestHeader>(request)?,
        PeekMessage => needs.consume::<PeekMessageRequestHeader>(request)?,
        Notification => needs.consume::<NotificationRequestHeader>(request)?,
        PollingInfo => needs.consume::<PollingInfoRequestHeader>(request)?,
        AckMessage => needs.consume::<AckMessageRequestHeader>(request)?,
        ChangeMessageInvisibleTime => needs.consume::<ChangeInvisibleTimeRequestHeader>(request)?,
        QueryConsumerOffset => needs.consume::<QueryConsumerOffsetRequestHeader>(request)?,
        UpdateConsumerOffset => needs.consume::<UpdateConsumerOffsetRequestHeader>(request)?,
        BatchAckMessage => {
            let body =
                BatchAckMessageRequestBody::from_json_bytes(&request.body).map_err(body_error)?;
            for ack in &body.acks {
                needs.consumed(&ack.topic, &ack.consumer_group);
            }
        }
        QueryMessage => {
            let header: QueryMessageRequestHeader =
                request.decode_header().map_err(header_error)?;
            needs.read(&header.topic);
        }
        ViewMessageById => {
            // Without a topic (4.x tools) the handler serves whatever record lies at the offset;
            // with one it serves only a record of that topic, so the topic is what is read.
            let header: ViewMessageRequestHeader = request.decode_header().map_err(header_error)?;
            if let Some(topic) = header.topic.as_deref().filter(|t| !t.is_empty()) {
                needs.read(topic);
            }
        }
        HeartBeat => {
            let heartbeat = HeartbeatData::from_json_bytes(&request.body).map_err(body_error)?;
            for consumer in &heartbeat.consumer_data_set {
                needs.group(&consumer.group_name);
                for subscription in &consumer.subscription_data_set {
                    needs.read(&subscription.topic);
                }
            }
        }
        UnregisterClient => {
            let header: UnregisterClientRequestHeader =
                request.decode_header().map_err(header_error)?;
            if let Some(group) = header.consumer_group.as_deref().filter(|g| !g.is_empty()) {
                needs.group(group);
            }
        }
        GetConsumerListByGroup => {
            let header: GetConsumerListByGroupRequestHeader =
                request.decode_header().map_err(header_error)?;
            needs.group(&header.consumer_group);
        }
        LockBatchMq | UnlockBatchMq => {
            let body = LockBatchRequestBody::from_json_bytes(&request.body).map_err(body_error)?;
            needs.group(&body.consumer_group);
            for queue in &body.mq_set {
                needs.consumed(&queue.topic, &body.consumer_group);
            }
        }
        _ => {}
    }
    Ok(needs.0)
}

fn unreadable(code: RequestCode, part: &'static str, reason: impl std::fmt::Display) -> Unreadable {
    Unreadable {
        code: code.to_i32(),
        part,
        reason: reason.to_string(),
    }
}

/// A consumer request's header: the topic it reads and the group it reads as.
trait Consumes: CommandHeader {
    fn topic_and_group(&self) -> (&str, &str);
}

macro_rules! consumes {
    ($($header:ty),* $(,)?) => {
        $(impl Consumes for $header {
            fn topic_and_group(&self) -> (&str, &str) {
                (&self.topic, &self.consumer_group)
            }
        })*
    };
}

consumes!(
    PullMessageRequestHeader,
    PopMessageRequestHeader,
    PeekMessageRequestHeader,
    NotificationRequestHeader,
    PollingInfoRequestHeader,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
);

#[derive(Default)]
struct Needs(Vec<(Resource, Perm)>);

impl Needs {
    fn consume<H: Consumes>(&mut self, request: &RemotingCommand) -> Result<(), Unreadable> {
        let header: H = request
            .decode_header()
            .map_err(|failure| unreadable(request.request_code(), "header", failure))?;
        let (topic, group) = header.topic_and_group();
        self.consumed(topic, group);
        Ok(())
    }

    /// `group` reading `topic`: SUB on both. The group's own retry topics (`%RETRY%group`, and
    /// POP's `%RETRY%group_topic` / `%RETRY%group+topic`) are the group's.
    fn consumed(&mut self, topic: &str, group: &str) {
        let own_retry = topic.strip_prefix(RETRY_PREFIX).is_some_and(|rest| {
            rest.strip_prefix(group)
                .is_some_and(|tail| tail.is_empty() || tail.starts_with(['_', '+']))
        });
        if !own_retry {
            self.read(topic);
        }
        self.group(group);
    }

    fn read(&mut self, topic: &str) {
        self.0.push((Resource::topic(topic), Perm::SUB));
    }

    fn group(&mut self, group: &str) {
        self.0.push((Resource::Group(group.to_owned()), Perm::SUB));
    }

    /// A consumer sending a failed message back to its retry topic needs its group, not a topic
    /// permission.
    fn send(&mut self, topic: &str) {
        match Resource::topic(topic) {
            group @ Resource::Group(_) => self.0.push((group, Perm::SUB)),
            resource => self.0.push((resource, Perm::PUB)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tidemark_protocol::headers::SendMessageRequestHeaderV2;
    use tidemark_protocol::{ExtFields, SerializeType};

    /// Fills in every field `H` requires (numbers 0, flags false) around the ones already set.
    fn complete<H: CommandHeader>(fields: &mut ExtFields) {
        for _ in 0..64 {
            match H::read_from(fields) {
                Ok(_) => return,
                Err(HeaderError::MissingField { field }) => fields.insert(field, "0"),
                Err(HeaderError::InvalidField { field, .. }) => fields.insert(field, "false"),
                Err(other) => panic!("{other}"),
            }
        }
        panic!("{} cannot be completed", std::any::type_name::<H>());
    }

    fn send(code: RequestCode, long_topic: &str, short_topic: &str) -> RemotingCommand {
        let mut request = RemotingCommand::request(code);
        request.ext_fields.insert("topic", long_topic);
        request.ext_fields.insert("b", short_topic);
        complete::<SendMessageRequestHeader>(&mut request.ext_fields);
        complete::<SendMessageRequestHeaderV2>(&mut request.ext_fields);
        request
    }

    fn topic(name: &str, perm: Perm) -> (Resource, Perm) {
        (Resource::Topic(name.into()), perm)
    }

    fn group(name: &str) -> (Resource, Perm) {
        (Resource::Group(name.into()), Perm::SUB)
    }

    #[test]
    fn a_recall_needs_publishing_to_the_topic_it_names_and_a_handle() {
        let mut request = RemotingCommand::request(RequestCode::RecallMessage);
        request.ext_fields.insert("topic", "orders");
        request
            .ext_fields
            .insert("recallHandle", "djEgb3JkZXJzIGIgMSBJRA==");
        assert_eq!(needed(&request), Ok(vec![topic("orders", Perm::PUB)]));
        let mut headless = RemotingCommand::request(RequestCode::RecallMessage);
        headless.ext_fields.insert("topic", "orders");
        assert!(needed(&headless).is_err(), "no handle: refused unread");
    }

    #[test]
    fn a_send_is_checked_on_the_topic_field_of_its_own_header_form() {
        // The long-form `topic` beside a short-form header is not what the broker writes to.
        for code in [
            RequestCode::SendMessageV2,
            RequestCode::SendBatchMessage,
            RequestCode::SendReplyMessageV2,
        ] {
            let request = send(code, "orders", "audit");
            assert_eq!(needed(&request), Ok(vec![topic("audit", Perm::PUB)]));
            assert_eq!(
                SendMessageRequestHeader::decode_request(&request).map(|h| h.topic),
                Ok("audit".to_owned())
            );
        }
        for code in [RequestCode::SendMessage, RequestCode::SendReplyMessage] {
            let request = send(code, "audit", "orders");
            assert_eq!(needed(&request), Ok(vec![topic("audit", Perm::PUB)]));
        }
    }

    #[test]
    fn a_batch_without_its_short_form_topic_is_unreadable_not_unchecked() {
        let mut batch = RemotingCommand::request(RequestCode::SendBatchMessage);
        batch.ext_fields.insert("topic", "orders");
        complete::<SendMessageRequestHeader>(&mut batch.ext_fields);
        let refused = needed(&batch).expect_err("no short-form header: nothing to check against");
        assert!(
            refused.to_string().contains("header cannot be read"),
            "{refused}"
        );
    }

    #[test]
    fn retry_sends_need_the_group() {
        let request = send(RequestCode::SendMessageV2, "x", "%RETRY%billing");
        assert_eq!(needed(&request), Ok(vec![group("billing")]));
    }

    #[test]
    fn pulls_need_sub_on_topic_and_group() {
        let mut pull = RemotingCommand::request(RequestCode::PullMessage);
        pull.ext_fields.insert("topic", "orders");
        pull.ext_fields.insert("consumerGroup", "billing");
        complete::<PullMessageRequestHeader>(&mut pull.ext_fields);
        assert_eq!(
            needed(&pull),
            Ok(vec![topic("orders", Perm::SUB), group("billing")])
        );
    }

    #[test]
    fn acks_on_a_groups_pop_retry_topic_need_the_group() {
        for retry in ["%RETRY%billing_orders", "%RETRY%billing+orders"] {
            let mut ack = RemotingCommand::request(RequestCode::AckMessage);
            ack.ext_fields.insert("topic", retry);
            ack.ext_fields.insert("consumerGroup", "billing");
            complete::<AckMessageRequestHeader>(&mut ack.ext_fields);
            assert_eq!(needed(&ack), Ok(vec![group("billing")]));
        }
    }

    #[test]
    fn batch_acks_and_queue_locks_are_read_from_their_bodies() {
        let acks = br#"{"acks":[{"c":"billing","t":"audit","r":"0","so":1,"q":0,"rq":0,"pt":1,"it":1,"b":"AQ=="}]}"#;
        let request = RemotingCommand::request(RequestCode::BatchAckMessage).with_body(&acks[..]);
        assert_eq!(
            needed(&request),
            Ok(vec![topic("audit", Perm::SUB), group("billing")])
        );
        let lock = br#"{"clientId":"c","consumerGroup":"billing","mqSet":[{"brokerName":"b","queueId":0,"topic":"audit"}],"onlyThisBroker":false}"#;
        for code in [RequestCode::LockBatchMq, RequestCode::UnlockBatchMq] {
            let request = RemotingCommand::request(code).with_body(&lock[..]);
            assert_eq!(
                needed(&request),
                Ok(vec![
                    group("billing"),
                    topic("audit", Perm::SUB),
                    group("billing")
                ])
            );
        }
        let bad = RemotingCommand::request(RequestCode::LockBatchMq).with_body(&b"{"[..]);
        assert!(needed(&bad).is_err());
    }

    #[test]
    fn a_heartbeat_needs_every_group_and_subscribed_topic() {
        let body = br#"{"clientID":"c","consumerDataSet":[{"groupName":"billing","subscriptionDataSet":[{"topic":"orders","subString":"*"},{"topic":"%RETRY%billing","subString":"*"}]}],"producerDataSet":[]}"#;
        let heartbeat = RemotingCommand::request(RequestCode::HeartBeat).with_body(&body[..]);
        assert_eq!(
            needed(&heartbeat),
            Ok(vec![
                group("billing"),
                topic("orders", Perm::SUB),
                group("billing")
            ])
        );
    }

    /// The consumer codes and the header type each one's broker handler decodes.
    fn consumer_request(code: RequestCode, fields: &mut ExtFields) {
        use RequestCode::*;
        match code {
            PullMessage | LitePullMessage => complete::<PullMessageRequestHeader>(fields),
            PopMessage => complete::<PopMessageRequestHeader>(fields),
            PeekMessage => complete::<PeekMessageRequestHeader>(fields),
            Notification => complete::<NotificationRequestHeader>(fields),
            PollingInfo => complete::<PollingInfoRequestHeader>(fields),
            AckMessage => complete::<AckMessageRequestHeader>(fields),
            ChangeMessageInvisibleTime => complete::<ChangeInvisibleTimeRequestHeader>(fields),
            QueryConsumerOffset => complete::<QueryConsumerOffsetRequestHeader>(fields),
            UpdateConsumerOffset => complete::<UpdateConsumerOffsetRequestHeader>(fields),
            other => unreachable!("{other:?} is not a consumer code"),
        }
    }

    const CONSUMER_CODES: [RequestCode; 10] = [
        RequestCode::PullMessage,
        RequestCode::LitePullMessage,
        RequestCode::PopMessage,
        RequestCode::PeekMessage,
        RequestCode::Notification,
        RequestCode::PollingInfo,
        RequestCode::AckMessage,
        RequestCode::ChangeMessageInvisibleTime,
        RequestCode::QueryConsumerOffset,
        RequestCode::UpdateConsumerOffset,
    ];

    const SEND_CODES: [RequestCode; 5] = [
        RequestCode::SendMessage,
        RequestCode::SendMessageV2,
        RequestCode::SendBatchMessage,
        RequestCode::SendReplyMessage,
        RequestCode::SendReplyMessageV2,
    ];

    /// `request` as it arrives on the wire in `form`, with `extra` fields appended after its own,
    /// so a key may appear twice with different values.
    fn over_the_wire(
        request: &RemotingCommand,
        form: SerializeType,
        extra: &[(&str, &str)],
    ) -> RemotingCommand {
        let mut binary = request.clone();
        binary.serialize_type = form;
        // The 5.x POP codes do not fit the binary header and always travel as JSON.
        let (form, encoded) = binary.encode_header().expect("encodes");
        let header = match form {
            SerializeType::Json => {
                let mut text = request.encode_json_header();
                let at = text.find("\"extFields\":{").expect("has fields") + 13;
                let mut added = String::new();
                for (key, value) in extra {
                    added.push_str(&format!("\"{key}\":\"{value}\","));
                }
                // Ahead of the request's own fields: a reader keeping the first or the last
                // value sees different topics.
                text.insert_str(at, &added);
                text.into_bytes()
            }
            SerializeType::RocketMq => {
                let mut bytes = encoded;
                let remark = 2 + 1 + 2 + 4 + 4;
                let remark_length =
                    i32::from_be_bytes(bytes[remark..remark + 4].try_into().expect("4 bytes"));
                let at = remark + 4 + remark_length as usize;
                let mut ext_length =
                    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
                for (key, value) in extra {
                    bytes.extend_from_slice(&(key.len() as i16).to_be_bytes());
                    bytes.extend_from_slice(key.as_bytes());
                    bytes.extend_from_slice(&(value.len() as i32).to_be_bytes());
                    bytes.extend_from_slice(value.as_bytes());
                    ext_length += (2 + key.len() + 4 + value.len()) as i32;
                }
                bytes[at..at + 4].copy_from_slice(&ext_length.to_be_bytes());
                bytes
            }
        };
        let mut decoded =
            RemotingCommand::decode_header_bytes(form, &header).expect("a well-formed header");
        decoded.body = request.body.clone();
        decoded
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9_-]{0,11}"
    }

    fn form() -> impl Strategy<Value = SerializeType> {
        prop_oneof![Just(SerializeType::Json), Just(SerializeType::RocketMq)]
    }

    proptest! {
        /// A send carrying both header forms with different topics, and the key of its own form
        /// twice on the wire: the ACL checks exactly the topic the send handler writes to.
        #[test]
        fn a_send_is_checked_on_the_topic_it_writes(
            code in proptest::sample::select(SEND_CODES.to_vec()),
            long in name(), short in name(), duplicate in name(), form in form(),
        ) {
            let request = send(code, &long, &short);
            let own_key = if matches!(code, RequestCode::SendMessage | RequestCode::SendReplyMessage) {
                "topic"
            } else {
                "b"
            };
            let arrived = over_the_wire(&request, form, &[(own_key, &duplicate)]);
            let written = SendMessageRequestHeader::decode_request(&arrived)
                .expect("the handler reads it")
                .topic;
            prop_assert_eq!(needed(&arrived), Ok(vec![topic(&written, Perm::PUB)]));
        }

        /// Every consumer code with its topic and group sent twice with different values: the ACL
        /// checks the topic and group the handler's header holds.
        #[test]
        fn a_consumer_request_is_checked_on_the_topic_and_group_it_reads(
            code in proptest::sample::select(CONSUMER_CODES.to_vec()),
            first in name(), second in name(), group_a in name(), group_b in name(),
            form in form(),
        ) {
            let mut request = RemotingCommand::request(code);
            request.ext_fields.insert("topic", &first);
            request.ext_fields.insert("consumerGroup", &group_a);
            consumer_request(code, &mut request.ext_fields);
            let arrived = over_the_wire(
                &request,
                form,
                &[("topic", &second), ("consumerGroup", &group_b)],
            );
            let (read, as_group) = {
                let fields = &arrived.ext_fields;
                (
                    fields.get("topic").expect("topic").to_owned(),
                    fields.get("consumerGroup").expect("group").to_owned(),
                )
            };
            let header = PullMessageRequestHeader::read_from(&arrived.ext_fields);
            if code == RequestCode::PullMessage {
                let header = header.expect("the handler reads it");
                prop_assert_eq!(&header.topic, &read);
                prop_assert_eq!(&header.consumer_group, &as_group);
            }
            let mut expected = Needs::default();
            expected.consumed(&read, &as_group);
            prop_assert_eq!(needed(&arrived), Ok(expected.0));
        }
    }
}
