//! Name-server requests: broker registration, routes, data versions and KV config.

use crate::command_header;

command_header! {
    /// `RegisterBrokerRequestHeader` (REGISTER_BROKER, 103).
    pub struct RegisterBrokerRequestHeader {
        required broker_name: String = "brokerName",
        /// `ip:port` of the main listen port.
        required broker_addr: String = "brokerAddr",
        required cluster_name: String = "clusterName",
        /// `ip:haPort`.
        required ha_server_addr: String = "haServerAddr",
        /// 0 master, ≥ 1 slave.
        required broker_id: i64 = "brokerId",
        defaulted compressed: bool = "compressed" (false),
        /// `crc32(body) & 0x7FFFFFFF`, or 0 for "not checked".
        defaulted body_crc32: i32 = "bodyCrc32" (0),
        optional heartbeat_timeout_millis: i64 = "heartbeatTimeoutMillis",
        optional enable_acting_master: bool = "enableActingMaster",
    }
}

command_header! {
    /// `RegisterBrokerResponseHeader`: `masterAddr` is filled for a slave whose master is live.
    pub struct RegisterBrokerResponseHeader {
        optional ha_server_addr: String = "haServerAddr",
        optional master_addr: String = "masterAddr",
    }
}

command_header! {
    /// `UnRegisterBrokerRequestHeader` (UNREGISTER_BROKER, 104).
    pub struct UnregisterBrokerRequestHeader {
        required broker_name: String = "brokerName",
        required broker_addr: String = "brokerAddr",
        required cluster_name: String = "clusterName",
        required broker_id: i64 = "brokerId",
    }
}

command_header! {
    /// `GetRouteInfoRequestHeader` (GET_ROUTEINFO_BY_TOPIC, 105).
    pub struct GetRouteInfoRequestHeader {
        required topic: String = "topic",
        optional accept_standard_json_only: bool = "acceptStandardJsonOnly",
    }
}

command_header! {
    /// `QueryDataVersionRequestHeader` (QUERY_DATA_VERSION, 322).
    pub struct QueryDataVersionRequestHeader {
        required broker_name: String = "brokerName",
        required broker_addr: String = "brokerAddr",
        required cluster_name: String = "clusterName",
        required broker_id: i64 = "brokerId",
    }
}

command_header! {
    /// `QueryDataVersionResponseHeader`.
    pub struct QueryDataVersionResponseHeader {
        required changed: bool = "changed",
    }
}

command_header! {
    /// `GetKVConfigRequestHeader` (GET_KV_CONFIG, 101) and DELETE_KV_CONFIG (102).
    pub struct KvConfigKeyRequestHeader {
        required namespace: String = "namespace",
        required key: String = "key",
    }
}

command_header! {
    /// `PutKVConfigRequestHeader` (PUT_KV_CONFIG, 100).
    pub struct PutKvConfigRequestHeader {
        required namespace: String = "namespace",
        required key: String = "key",
        required value: String = "value",
    }
}

command_header! {
    /// `GetKVConfigResponseHeader`.
    pub struct GetKvConfigResponseHeader {
        optional value: String = "value",
    }
}

command_header! {
    /// `GetKVListByNamespaceRequestHeader` (GET_KVLIST_BY_NAMESPACE, 219).
    pub struct GetKvListByNamespaceRequestHeader {
        required namespace: String = "namespace",
    }
}
