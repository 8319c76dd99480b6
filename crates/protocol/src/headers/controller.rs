//! Controller requests (RocketMQ 5's controller mode): brokers register with the controller,
//! report liveness and in-sync replicas; the controller elects masters. Header names are
//! Apache's, so its brokers and `mqadmin` can talk to Tidemark's controller.

use crate::command_header;

command_header! {
    /// `BrokerHeartbeatRequestHeader` (BROKER_HEARTBEAT, 904).
    pub struct BrokerHeartbeatRequestHeader {
        required cluster_name: String = "clusterName",
        required broker_addr: String = "brokerAddr",
        required broker_name: String = "brokerName",
        optional broker_id: i64 = "brokerId",
        /// The last epoch in the broker's epoch file.
        optional epoch: i32 = "epoch",
        /// The end of its commit log.
        optional max_offset: i64 = "maxOffset",
        /// What every in-sync replica has (the master's) or what it confirmed (a slave's).
        optional confirm_offset: i64 = "confirmOffset",
        optional heartbeat_timeout_mills: i64 = "heartbeatTimeoutMills",
        /// Lower is preferred among equally up-to-date replicas.
        optional election_priority: i32 = "electionPriority",
    }
}

command_header! {
    /// `AlterSyncStateSetRequestHeader` (CONTROLLER_ALTER_SYNC_STATE_SET, 1001); the body is
    /// the new [`SyncStateSet`](crate::body::SyncStateSet) with the epoch it replaces.
    pub struct AlterSyncStateSetRequestHeader {
        required broker_name: String = "brokerName",
        required master_broker_id: i64 = "masterBrokerId",
        required master_epoch: i32 = "masterEpoch",
        optional invoke_time: i64 = "invokeTime",
    }
}

command_header! {
    /// `AlterSyncStateSetResponseHeader`.
    pub struct AlterSyncStateSetResponseHeader {
        defaulted new_sync_state_set_epoch: i32 = "newSyncStateSetEpoch" (0),
    }
}

command_header! {
    /// `ElectMasterRequestHeader` (CONTROLLER_ELECT_MASTER, 1002). A broker asks to become
    /// master (`brokerId` its own); an operator may designate one (`designateElect`).
    pub struct ElectMasterRequestHeader {
        defaulted cluster_name: String = "clusterName" (String::new()),
        required broker_name: String = "brokerName",
        defaulted broker_id: i64 = "brokerId" (-1),
        defaulted designate_elect: bool = "designateElect" (false),
        optional invoke_time: i64 = "invokeTime",
    }
}

command_header! {
    /// `ElectMasterResponseHeader`; the body is an
    /// [`ElectMasterResponseBody`](crate::body::ElectMasterResponseBody).
    pub struct ElectMasterResponseHeader {
        optional master_broker_id: i64 = "masterBrokerId",
        optional master_address: String = "masterAddress",
        optional master_epoch: i32 = "masterEpoch",
        optional sync_state_set_epoch: i32 = "syncStateSetEpoch",
    }
}

command_header! {
    /// `GetReplicaInfoRequestHeader` (CONTROLLER_GET_REPLICA_INFO, 1004).
    pub struct GetReplicaInfoRequestHeader {
        required broker_name: String = "brokerName",
    }
}

command_header! {
    /// `GetReplicaInfoResponseHeader`; the body is the [`SyncStateSet`](crate::body::SyncStateSet).
    pub struct GetReplicaInfoResponseHeader {
        optional master_broker_id: i64 = "masterBrokerId",
        optional master_address: String = "masterAddress",
        optional master_epoch: i32 = "masterEpoch",
    }
}

command_header! {
    /// `GetMetaDataResponseHeader` (CONTROLLER_GET_METADATA_INFO, 1005): who leads the
    /// controllers. `peers` is `id:addr;id:addr`.
    pub struct GetMetaDataResponseHeader {
        optional group: String = "group",
        optional controller_leader_id: String = "controllerLeaderId",
        optional controller_leader_address: String = "controllerLeaderAddress",
        defaulted is_leader: bool = "isLeader" (false),
        optional peers: String = "peers",
    }
}

command_header! {
    /// `CleanControllerBrokerDataRequestHeader` (CLEAN_BROKER_DATA, 1011): forget a broker set
    /// or some of its ids (`1;2`).
    pub struct CleanControllerBrokerDataRequestHeader {
        optional cluster_name: String = "clusterName",
        required broker_name: String = "brokerName",
        optional broker_controller_ids_to_clean: String = "brokerControllerIdsToClean",
        defaulted is_clean_living_broker: bool = "isCleanLivingBroker" (false),
        optional invoke_time: i64 = "invokeTime",
    }
}

command_header! {
    /// `GetNextBrokerIdRequestHeader` (CONTROLLER_GET_NEXT_BROKER_ID, 1012).
    pub struct GetNextBrokerIdRequestHeader {
        required cluster_name: String = "clusterName",
        required broker_name: String = "brokerName",
    }
}

command_header! {
    /// `GetNextBrokerIdResponseHeader`.
    pub struct GetNextBrokerIdResponseHeader {
        optional cluster_name: String = "clusterName",
        optional broker_name: String = "brokerName",
        optional next_broker_id: i64 = "nextBrokerId",
    }
}

command_header! {
    /// `ApplyBrokerIdRequestHeader` (CONTROLLER_APPLY_BROKER_ID, 1013). `registerCheckCode` is
    /// `address;timestamp`: a broker re-applying for its own id proves it with the same code.
    pub struct ApplyBrokerIdRequestHeader {
        required cluster_name: String = "clusterName",
        required broker_name: String = "brokerName",
        required applied_broker_id: i64 = "appliedBrokerId",
        required register_check_code: String = "registerCheckCode",
    }
}

command_header! {
    /// `ApplyBrokerIdResponseHeader`.
    pub struct ApplyBrokerIdResponseHeader {
        optional cluster_name: String = "clusterName",
        optional broker_name: String = "brokerName",
    }
}

command_header! {
    /// `RegisterBrokerToControllerRequestHeader` (CONTROLLER_REGISTER_BROKER, 1003).
    pub struct RegisterBrokerToControllerRequestHeader {
        required cluster_name: String = "clusterName",
        required broker_name: String = "brokerName",
        required broker_id: i64 = "brokerId",
        required broker_address: String = "brokerAddress",
        optional invoke_time: i64 = "invokeTime",
    }
}

command_header! {
    /// `RegisterBrokerToControllerResponseHeader`; the master fields are set while a live
    /// master exists. The body is the [`SyncStateSet`](crate::body::SyncStateSet).
    pub struct RegisterBrokerToControllerResponseHeader {
        optional cluster_name: String = "clusterName",
        optional broker_name: String = "brokerName",
        optional master_broker_id: i64 = "masterBrokerId",
        optional master_address: String = "masterAddress",
        optional master_epoch: i32 = "masterEpoch",
        optional sync_state_set_epoch: i32 = "syncStateSetEpoch",
    }
}

command_header! {
    /// `NotifyBrokerRoleChangedRequestHeader` (NOTIFY_BROKER_ROLE_CHANGED, 1008): the
    /// controller tells a broker set's members about a new master.
    pub struct NotifyBrokerRoleChangedRequestHeader {
        optional master_address: String = "masterAddress",
        optional master_epoch: i32 = "masterEpoch",
        optional sync_state_set_epoch: i32 = "syncStateSetEpoch",
        optional master_broker_id: i64 = "masterBrokerId",
    }
}
