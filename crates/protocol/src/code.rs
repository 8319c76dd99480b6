//! Request codes, response codes, language codes and header serialize types.
//!
//! Codes travel as plain integers; the enums give them names and keep every unknown value
//! (`Unknown(i32)`), so a frame with a code we have never heard of still decodes and can be
//! answered with `REQUEST_CODE_NOT_SUPPORTED`.

macro_rules! wire_code_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $java:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* #[doc = concat!("`", $java, "` (", stringify!($value), ")")] $variant, )*
            /// A code this build does not know; kept so it can be answered or forwarded.
            Unknown(i32),
        }

        impl $name {
            /// Every named code, for tests and tables.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Maps a wire value to its name; unknown values are kept in `Unknown`.
            pub const fn from_i32(value: i32) -> Self {
                match value {
                    $( $value => Self::$variant, )*
                    other => Self::Unknown(other),
                }
            }

            /// The wire value.
            pub const fn to_i32(self) -> i32 {
                match self {
                    $( Self::$variant => $value, )*
                    Self::Unknown(value) => value,
                }
            }

            /// The Java constant's name, as RocketMQ logs and remarks print it.
            pub const fn java_name(self) -> &'static str {
                match self {
                    $( Self::$variant => $java, )*
                    Self::Unknown(_) => "UNKNOWN",
                }
            }
        }

        impl From<i32> for $name {
            fn from(value: i32) -> Self {
                Self::from_i32(value)
            }
        }

        impl From<$name> for i32 {
            fn from(code: $name) -> i32 {
                code.to_i32()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", self.java_name(), self.to_i32())
            }
        }
    };
}

wire_code_enum! {
    /// Request codes (RocketMQ `RequestCode`), 4.9 names; 5.x-only codes are marked in the docs.
    RequestCode {
        SendMessage = 10 => "SEND_MESSAGE",
        PullMessage = 11 => "PULL_MESSAGE",
        QueryMessage = 12 => "QUERY_MESSAGE",
        QueryConsumerOffset = 14 => "QUERY_CONSUMER_OFFSET",
        UpdateConsumerOffset = 15 => "UPDATE_CONSUMER_OFFSET",
        UpdateAndCreateTopic = 17 => "UPDATE_AND_CREATE_TOPIC",
        /// 5.x only.
        UpdateAndCreateTopicList = 18 => "UPDATE_AND_CREATE_TOPIC_LIST",
        GetAllTopicConfig = 21 => "GET_ALL_TOPIC_CONFIG",
        UpdateBrokerConfig = 25 => "UPDATE_BROKER_CONFIG",
        GetBrokerConfig = 26 => "GET_BROKER_CONFIG",
        GetBrokerRuntimeInfo = 28 => "GET_BROKER_RUNTIME_INFO",
        SearchOffsetByTimestamp = 29 => "SEARCH_OFFSET_BY_TIMESTAMP",
        GetMaxOffset = 30 => "GET_MAX_OFFSET",
        GetMinOffset = 31 => "GET_MIN_OFFSET",
        GetEarliestMsgStoretime = 32 => "GET_EARLIEST_MSG_STORETIME",
        ViewMessageById = 33 => "VIEW_MESSAGE_BY_ID",
        HeartBeat = 34 => "HEART_BEAT",
        UnregisterClient = 35 => "UNREGISTER_CLIENT",
        ConsumerSendMsgBack = 36 => "CONSUMER_SEND_MSG_BACK",
        EndTransaction = 37 => "END_TRANSACTION",
        GetConsumerListByGroup = 38 => "GET_CONSUMER_LIST_BY_GROUP",
        CheckTransactionState = 39 => "CHECK_TRANSACTION_STATE",
        NotifyConsumerIdsChanged = 40 => "NOTIFY_CONSUMER_IDS_CHANGED",
        LockBatchMq = 41 => "LOCK_BATCH_MQ",
        UnlockBatchMq = 42 => "UNLOCK_BATCH_MQ",
        GetAllConsumerOffset = 43 => "GET_ALL_CONSUMER_OFFSET",
        GetAllDelayOffset = 45 => "GET_ALL_DELAY_OFFSET",
        CheckClientConfig = 46 => "CHECK_CLIENT_CONFIG",
        /// 5.x only.
        GetClientConfig = 47 => "GET_CLIENT_CONFIG",
        /// 4.9 ACL (removed in 5.x): create or update one account of `plain_acl.yml`.
        UpdateAndCreateAclConfig = 50 => "UPDATE_AND_CREATE_ACL_CONFIG",
        DeleteAclConfig = 51 => "DELETE_ACL_CONFIG",
        /// 4.9 ACL: the ACL file's version (mqadmin `clusterAclConfigVersion`).
        GetBrokerClusterAclInfo = 52 => "GET_BROKER_CLUSTER_ACL_INFO",
        UpdateGlobalWhiteAddrsConfig = 53 => "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG",
        PutKvConfig = 100 => "PUT_KV_CONFIG",
        GetKvConfig = 101 => "GET_KV_CONFIG",
        DeleteKvConfig = 102 => "DELETE_KV_CONFIG",
        RegisterBroker = 103 => "REGISTER_BROKER",
        UnregisterBroker = 104 => "UNREGISTER_BROKER",
        GetRouteInfoByTopic = 105 => "GET_ROUTEINFO_BY_TOPIC",
        GetBrokerClusterInfo = 106 => "GET_BROKER_CLUSTER_INFO",
        UpdateAndCreateSubscriptionGroup = 200 => "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
        GetAllSubscriptionGroupConfig = 201 => "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        GetTopicStatsInfo = 202 => "GET_TOPIC_STATS_INFO",
        GetConsumerConnectionList = 203 => "GET_CONSUMER_CONNECTION_LIST",
        GetProducerConnectionList = 204 => "GET_PRODUCER_CONNECTION_LIST",
        WipeWritePermOfBroker = 205 => "WIPE_WRITE_PERM_OF_BROKER",
        GetAllTopicListFromNameserver = 206 => "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        DeleteSubscriptionGroup = 207 => "DELETE_SUBSCRIPTIONGROUP",
        GetConsumeStats = 208 => "GET_CONSUME_STATS",
        DeleteTopicInBroker = 215 => "DELETE_TOPIC_IN_BROKER",
        DeleteTopicInNamesrv = 216 => "DELETE_TOPIC_IN_NAMESRV",
        GetKvListByNamespace = 219 => "GET_KVLIST_BY_NAMESPACE",
        ResetConsumerClientOffset = 220 => "RESET_CONSUMER_CLIENT_OFFSET",
        GetConsumerStatusFromClient = 221 => "GET_CONSUMER_STATUS_FROM_CLIENT",
        InvokeBrokerToResetOffset = 222 => "INVOKE_BROKER_TO_RESET_OFFSET",
        InvokeBrokerToGetConsumerStatus = 223 => "INVOKE_BROKER_TO_GET_CONSUMER_STATUS",
        GetTopicsByCluster = 224 => "GET_TOPICS_BY_CLUSTER",
        UpdateAndCreateSubscriptionGroupList = 225 => "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST",
        QueryTopicConsumeByWho = 300 => "QUERY_TOPIC_CONSUME_BY_WHO",
        QueryConsumeTimeSpan = 303 => "QUERY_CONSUME_TIME_SPAN",
        GetSystemTopicListFromBroker = 305 => "GET_SYSTEM_TOPIC_LIST_FROM_BROKER",
        CleanExpiredConsumeQueue = 306 => "CLEAN_EXPIRED_CONSUMEQUEUE",
        GetConsumerRunningInfo = 307 => "GET_CONSUMER_RUNNING_INFO",
        QueryCorrectionOffset = 308 => "QUERY_CORRECTION_OFFSET",
        ConsumeMessageDirectly = 309 => "CONSUME_MESSAGE_DIRECTLY",
        SendMessageV2 = 310 => "SEND_MESSAGE_V2",
        CloneGroupOffset = 314 => "CLONE_GROUP_OFFSET",
        ViewBrokerStatsData = 315 => "VIEW_BROKER_STATS_DATA",
        CleanUnusedTopic = 316 => "CLEAN_UNUSED_TOPIC",
        GetBrokerConsumeStats = 317 => "GET_BROKER_CONSUME_STATS",
        UpdateNamesrvConfig = 318 => "UPDATE_NAMESRV_CONFIG",
        GetNamesrvConfig = 319 => "GET_NAMESRV_CONFIG",
        SendBatchMessage = 320 => "SEND_BATCH_MESSAGE",
        QueryConsumeQueue = 321 => "QUERY_CONSUME_QUEUE",
        QueryDataVersion = 322 => "QUERY_DATA_VERSION",
        SendReplyMessage = 324 => "SEND_REPLY_MESSAGE",
        SendReplyMessageV2 = 325 => "SEND_REPLY_MESSAGE_V2",
        PushReplyMessageToClient = 326 => "PUSH_REPLY_MESSAGE_TO_CLIENT",
        AddWritePermOfBroker = 327 => "ADD_WRITE_PERM_OF_BROKER",
        GetAllProducerInfo = 328 => "GET_ALL_PRODUCER_INFO",
        DeleteExpiredCommitLog = 329 => "DELETE_EXPIRED_COMMITLOG",
        /// 5.x: one topic's config (mqadmin 5.x `topicStatus`, `consumerProgress`).
        GetTopicConfig = 351 => "GET_TOPIC_CONFIG",
        /// 5.x only; 4.9 lite pull consumers use `PULL_MESSAGE`.
        LitePullMessage = 361 => "LITE_PULL_MESSAGE",
        /// 5.3.2+: cancels a timer message before it is due, named by the recall handle its
        /// send was answered with.
        RecallMessage = 370 => "RECALL_MESSAGE",
        /// 5.x: which queues a POP consumer of a group should ask for.
        QueryAssignment = 400 => "QUERY_ASSIGNMENT",
        /// 5.x: switches a group (or one topic of it) between PULL and POP.
        SetMessageRequestMode = 401 => "SET_MESSAGE_REQUEST_MODE",
        /// 5.x controller mode: a broker's liveness report to the controller (its epoch, max
        /// and confirm offsets, election priority).
        BrokerHeartbeat = 904 => "BROKER_HEARTBEAT",
        /// 5.x controller: a master reports its new SyncStateSet (replicas in sync with it).
        ControllerAlterSyncStateSet = 1001 => "CONTROLLER_ALTER_SYNC_STATE_SET",
        ControllerElectMaster = 1002 => "CONTROLLER_ELECT_MASTER",
        ControllerRegisterBroker = 1003 => "CONTROLLER_REGISTER_BROKER",
        ControllerGetReplicaInfo = 1004 => "CONTROLLER_GET_REPLICA_INFO",
        ControllerGetMetadataInfo = 1005 => "CONTROLLER_GET_METADATA_INFO",
        ControllerGetSyncStateData = 1006 => "CONTROLLER_GET_SYNC_STATE_DATA",
        /// 5.x: a broker's epoch file (epoch → start offset), asked by a slave that truncates.
        GetBrokerEpochCache = 1007 => "GET_BROKER_EPOCH_CACHE",
        NotifyBrokerRoleChanged = 1008 => "NOTIFY_BROKER_ROLE_CHANGED",
        UpdateControllerConfig = 1009 => "UPDATE_CONTROLLER_CONFIG",
        GetControllerConfig = 1010 => "GET_CONTROLLER_CONFIG",
        CleanBrokerData = 1011 => "CLEAN_BROKER_DATA",
        ControllerGetNextBrokerId = 1012 => "CONTROLLER_GET_NEXT_BROKER_ID",
        ControllerApplyBrokerId = 1013 => "CONTROLLER_APPLY_BROKER_ID",
        /// 5.x POP consumption: messages handed out with an invisibility time.
        PopMessage = 200050 => "POP_MESSAGE",
        AckMessage = 200051 => "ACK_MESSAGE",
        PeekMessage = 200052 => "PEEK_MESSAGE",
        ChangeMessageInvisibleTime = 200053 => "CHANGE_MESSAGE_INVISIBLETIME",
        /// 5.x: whether something is poppable (long-polls like POP, returns no messages).
        Notification = 200054 => "NOTIFICATION",
        PollingInfo = 200055 => "POLLING_INFO",
        BatchAckMessage = 200151 => "BATCH_ACK_MESSAGE",
        /// Tidemark's extension: a group's progress per queue with time lag, acknowledged
        /// ranges and stuck messages (header `GetConsumeStatsRequestHeader`, body
        /// [`ConsumerProgress`](crate::body::ConsumerProgress)). Apache brokers answer
        /// REQUEST_CODE_NOT_SUPPORTED.
        GetConsumerProgress = 31001 => "TIDEMARK_GET_CONSUMER_PROGRESS",
        /// Tidemark's extension: a master's whole POP state (cursors, in-flight messages and
        /// their receipts), which its slaves copy so a slave promoted to master goes on where
        /// POP consumption stood. The body is Tidemark's own binary form, led by a format
        /// byte. Apache brokers answer REQUEST_CODE_NOT_SUPPORTED.
        GetAllPopState = 31002 => "TIDEMARK_GET_ALL_POP_STATE",
        /// Tidemark's extension: a group's progress history on a broker — who moved its
        /// committed offsets, when, from where to where, and (if asked) checkpoints of routine
        /// progress (header `GetProgressHistoryRequestHeader`, body
        /// [`ProgressHistory`](crate::body::ProgressHistory)). Apache brokers answer
        /// REQUEST_CODE_NOT_SUPPORTED.
        GetProgressHistory = 31003 => "TIDEMARK_GET_PROGRESS_HISTORY",
        /// Tidemark's extension: puts a group's queues back where they stood at a time, or
        /// before a history entry, recorded as a history entry itself; or with `dryRun` only
        /// answers the plan (header `RestoreProgressRequestHeader`, body
        /// [`ProgressPlan`](crate::body::ProgressPlan)). Apache brokers answer
        /// REQUEST_CODE_NOT_SUPPORTED.
        RestoreProgress = 31004 => "TIDEMARK_RESTORE_PROGRESS",
        /// Tidemark's extension: what a reset, skip or clone would do to a group's queues on
        /// this broker, changing nothing (header `PlanProgressMoveRequestHeader`, body
        /// [`ProgressPlan`](crate::body::ProgressPlan)); the move itself is RocketMQ's request.
        /// Apache brokers answer REQUEST_CODE_NOT_SUPPORTED.
        PlanProgressMove = 31005 => "TIDEMARK_PLAN_PROGRESS_MOVE",
        /// Tidemark's extension: a group's dead letters, each with its original topic, keys,
        /// how often it was retried and when it died (header `GetDeadLettersRequestHeader`,
        /// body [`DeadLetterList`](crate::body::DeadLetterList)). Apache brokers answer
        /// REQUEST_CODE_NOT_SUPPORTED.
        GetDeadLetters = 31006 => "TIDEMARK_GET_DEAD_LETTERS",
        /// Tidemark's extension: sends dead letters again, to the group's retry topic with a
        /// fresh count or to their original topic, recorded in the progress history (header
        /// `ResendDeadLettersRequestHeader`, body [`ResentMessages`](crate::body::ResentMessages)).
        ResendDeadLetters = 31007 => "TIDEMARK_RESEND_DEAD_LETTERS",
        /// Tidemark's extension: a group's retry messages of one original topic that it already
        /// consumed, put back into its retry topic so it consumes them again — not the whole
        /// retry queue (header `ReplayRetriesRequestHeader`, body
        /// [`ResentMessages`](crate::body::ResentMessages)).
        ReplayRetries = 31008 => "TIDEMARK_REPLAY_RETRIES",
        /// Tidemark's extension: Raft between controllers (openraft's messages as JSON bodies;
        /// the answer's body is the peer's `Result`).
        RaftAppendEntries = 31101 => "TIDEMARK_RAFT_APPEND_ENTRIES",
        RaftVote = 31102 => "TIDEMARK_RAFT_VOTE",
        RaftInstallSnapshot = 31103 => "TIDEMARK_RAFT_INSTALL_SNAPSHOT",
    }
}

wire_code_enum! {
    /// Response codes (RocketMQ `ResponseCode` and `RemotingSysResponseCode`). Codes 209–211 mean
    /// different things in 4.9 and 5.x and are left `Unknown`.
    ResponseCode {
        Success = 0 => "SUCCESS",
        SystemError = 1 => "SYSTEM_ERROR",
        SystemBusy = 2 => "SYSTEM_BUSY",
        RequestCodeNotSupported = 3 => "REQUEST_CODE_NOT_SUPPORTED",
        TransactionFailed = 4 => "TRANSACTION_FAILED",
        FlushDiskTimeout = 10 => "FLUSH_DISK_TIMEOUT",
        SlaveNotAvailable = 11 => "SLAVE_NOT_AVAILABLE",
        FlushSlaveTimeout = 12 => "FLUSH_SLAVE_TIMEOUT",
        MessageIllegal = 13 => "MESSAGE_ILLEGAL",
        ServiceNotAvailable = 14 => "SERVICE_NOT_AVAILABLE",
        VersionNotSupported = 15 => "VERSION_NOT_SUPPORTED",
        NoPermission = 16 => "NO_PERMISSION",
        TopicNotExist = 17 => "TOPIC_NOT_EXIST",
        TopicExistAlready = 18 => "TOPIC_EXIST_ALREADY",
        PullNotFound = 19 => "PULL_NOT_FOUND",
        PullRetryImmediately = 20 => "PULL_RETRY_IMMEDIATELY",
        PullOffsetMoved = 21 => "PULL_OFFSET_MOVED",
        QueryNotFound = 22 => "QUERY_NOT_FOUND",
        SubscriptionParseFailed = 23 => "SUBSCRIPTION_PARSE_FAILED",
        SubscriptionNotExist = 24 => "SUBSCRIPTION_NOT_EXIST",
        SubscriptionNotLatest = 25 => "SUBSCRIPTION_NOT_LATEST",
        SubscriptionGroupNotExist = 26 => "SUBSCRIPTION_GROUP_NOT_EXIST",
        FilterDataNotExist = 27 => "FILTER_DATA_NOT_EXIST",
        FilterDataNotLatest = 28 => "FILTER_DATA_NOT_LATEST",
        /// 5.x only.
        InvalidParameter = 29 => "INVALID_PARAMETER",
        TransactionShouldCommit = 200 => "TRANSACTION_SHOULD_COMMIT",
        TransactionShouldRollback = 201 => "TRANSACTION_SHOULD_ROLLBACK",
        TransactionStateUnknow = 202 => "TRANSACTION_STATE_UNKNOW",
        TransactionStateGroupWrong = 203 => "TRANSACTION_STATE_GROUP_WRONG",
        NoBuyerId = 204 => "NO_BUYER_ID",
        NotInCurrentUnit = 205 => "NOT_IN_CURRENT_UNIT",
        ConsumerNotOnline = 206 => "CONSUMER_NOT_ONLINE",
        ConsumeMsgTimeout = 207 => "CONSUME_MSG_TIMEOUT",
        NoMessage = 208 => "NO_MESSAGE",
        /// 5.x POP: too many pops already wait on this queue.
        PollingFull = 209 => "POLLING_FULL",
        /// 5.x POP: nothing to pop within the poll time.
        PollingTimeout = 210 => "POLLING_TIMEOUT",
        FlowControl = 215 => "FLOW_CONTROL",
        /// 5.x: a request that names something it may not act on (a recall handle that is
        /// unreadable, of another topic or broker, or already due).
        IllegalOperation = 604 => "ILLEGAL_OPERATION",
        /// 5.x controller: a master's request named an older master epoch.
        ControllerFencedMasterEpoch = 2000 => "CONTROLLER_FENCED_MASTER_EPOCH",
        ControllerFencedSyncStateSetEpoch = 2001 => "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
        ControllerInvalidMaster = 2002 => "CONTROLLER_INVALID_MASTER",
        ControllerInvalidReplicas = 2003 => "CONTROLLER_INVALID_REPLICAS",
        ControllerMasterNotAvailable = 2004 => "CONTROLLER_MASTER_NOT_AVAILABLE",
        ControllerInvalidRequest = 2005 => "CONTROLLER_INVALID_REQUEST",
        ControllerBrokerNotAlive = 2006 => "CONTROLLER_BROKER_NOT_ALIVE",
        /// The controller asked is not the Raft leader; ask the leader (GET_METADATA_INFO).
        ControllerNotLeader = 2007 => "CONTROLLER_NOT_LEADER",
        ControllerBrokerMetadataNotExist = 2008 => "CONTROLLER_BROKER_METADATA_NOT_EXIST",
        ControllerInvalidCleanBrokerMetadata = 2009 => "CONTROLLER_INVALID_CLEAN_BROKER_METADATA",
        ControllerBrokerNeedToBeRegistered = 2010 => "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
        ControllerMasterStillExist = 2011 => "CONTROLLER_MASTER_STILL_EXIST",
        ControllerElectMasterFailed = 2012 => "CONTROLLER_ELECT_MASTER_FAILED",
        ControllerAlterSyncStateSetFailed = 2013 => "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
        ControllerBrokerIdInvalid = 2014 => "CONTROLLER_BROKER_ID_INVALID",
        /// 5.x only, sent to callers newer than 5.3.1 while shutting down.
        GoAway = 1500 => "GO_AWAY",
    }
}

/// The sender's implementation language (RocketMQ `LanguageCode`). JSON headers carry the
/// name, binary headers the byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LanguageCode {
    Java,
    Cpp,
    Dotnet,
    Python,
    Delphi,
    Erlang,
    Ruby,
    Other,
    Http,
    Go,
    Php,
    Oms,
    /// Added in 4.9.4; older Java peers may not know the name, so Tidemark sends `JAVA`.
    Rust,
    /// 5.x only.
    NodeJs,
    /// A byte no release defines.
    Unknown(u8),
}

impl LanguageCode {
    const TABLE: [(LanguageCode, &'static str); 14] = [
        (LanguageCode::Java, "JAVA"),
        (LanguageCode::Cpp, "CPP"),
        (LanguageCode::Dotnet, "DOTNET"),
        (LanguageCode::Python, "PYTHON"),
        (LanguageCode::Delphi, "DELPHI"),
        (LanguageCode::Erlang, "ERLANG"),
        (LanguageCode::Ruby, "RUBY"),
        (LanguageCode::Other, "OTHER"),
        (LanguageCode::Http, "HTTP"),
        (LanguageCode::Go, "GO"),
        (LanguageCode::Php, "PHP"),
        (LanguageCode::Oms, "OMS"),
        (LanguageCode::Rust, "RUST"),
        (LanguageCode::NodeJs, "NODE_JS"),
    ];

    /// The byte a binary header carries.
    pub fn to_byte(self) -> u8 {
        match self {
            LanguageCode::Unknown(byte) => byte,
            known => Self::TABLE
                .iter()
                .position(|(code, _)| *code == known)
                .unwrap_or(7) as u8,
        }
    }

    /// Decodes the binary header byte.
    pub fn from_byte(byte: u8) -> Self {
        Self::TABLE
            .get(byte as usize)
            .map(|(code, _)| *code)
            .unwrap_or(LanguageCode::Unknown(byte))
    }

    /// The name a JSON header carries; an unknown byte is sent as `OTHER`.
    pub fn name(self) -> &'static str {
        Self::TABLE
            .iter()
            .find(|(code, _)| *code == self)
            .map(|(_, name)| *name)
            .unwrap_or("OTHER")
    }

    /// Decodes the JSON header name; `None` for a name no release defines.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::TABLE
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(code, _)| *code)
    }
}

/// How a frame's header is serialised: the high byte of the frame's second word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// fastjson text; what Java peers send by default and the only type C++ clients read.
    #[default]
    Json,
    /// RocketMQ's compact binary header.
    RocketMq,
}

impl SerializeType {
    pub fn to_byte(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }
}

/// `MQVersion` ordinals the protocol's behaviour depends on (§1.7 of the protocol notes).
pub mod version {
    /// Brokers push `RESET_CONSUMER_CLIENT_OFFSET` only to clients at or above this.
    pub const V3_0_7_SNAPSHOT: i32 = 28;
    /// Name servers read `REGISTER_BROKER` bodies as `RegisterBrokerBody` from this version on.
    pub const V3_0_11: i32 = 37;
    /// Brokers honour `maxReconsumeTimes` from send and send-back headers from this version on.
    pub const V3_4_9: i32 = 121;
    /// Java clients refuse SQL92 pulls to brokers answering heartbeats below this.
    pub const V4_1_0_SNAPSHOT: i32 = 232;
    /// Name servers send standard JSON (quoted map keys) to callers at or above this.
    pub const V4_9_4: i32 = 401;
    /// 4.9.8, the release whose behaviour Tidemark follows; Tidemark sends this version.
    pub const V4_9_8: i32 = 409;
    pub const V5_3_1: i32 = 475;
    /// The version Tidemark puts in the commands it sends.
    pub const CURRENT: i32 = V4_9_8;
    /// [`CURRENT`] as `MQVersion.getVersionDesc` names it.
    pub const CURRENT_NAME: &str = "V4_9_8";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_is_kept() {
        for code in RequestCode::ALL {
            assert_eq!(RequestCode::from_i32(code.to_i32()), *code);
        }
        for code in ResponseCode::ALL {
            assert_eq!(ResponseCode::from_i32(code.to_i32()), *code);
        }
        assert_eq!(RequestCode::from_i32(99_999), RequestCode::Unknown(99_999));
        assert_eq!(RequestCode::SendMessageV2.to_i32(), 310);
        assert_eq!(ResponseCode::PullOffsetMoved.to_i32(), 21);
        assert_eq!(RequestCode::PullMessage.to_string(), "PULL_MESSAGE(11)");
    }

    #[test]
    fn language_codes_match_java_ordinals() {
        assert_eq!(LanguageCode::Java.to_byte(), 0);
        assert_eq!(LanguageCode::Go.to_byte(), 9);
        assert_eq!(LanguageCode::Rust.to_byte(), 12);
        assert_eq!(LanguageCode::from_byte(13), LanguageCode::NodeJs);
        assert_eq!(LanguageCode::from_byte(200), LanguageCode::Unknown(200));
        assert_eq!(LanguageCode::from_name("CPP"), Some(LanguageCode::Cpp));
        assert_eq!(LanguageCode::Unknown(200).name(), "OTHER");
    }
}
