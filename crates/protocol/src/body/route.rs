//! Route bodies: `TopicRouteData` (GET_ROUTEINFO_BY_TOPIC), `ClusterInfo`, `TopicList`.

use std::collections::BTreeMap;

use crate::json_object;

/// `PermName` bits of a topic or broker.
pub mod perm {
    pub const PRIORITY: i32 = 8;
    pub const READ: i32 = 4;
    pub const WRITE: i32 = 2;
    pub const INHERIT: i32 = 1;

    pub fn is_readable(perm: i32) -> bool {
        perm & READ == READ
    }

    pub fn is_writeable(perm: i32) -> bool {
        perm & WRITE == WRITE
    }

    pub fn is_inherited(perm: i32) -> bool {
        perm & INHERIT == INHERIT
    }
}

/// Broker id of a master (`MixAll.MASTER_ID`).
pub const MASTER_ID: i64 = 0;

json_object! {
    /// `TopicRouteData`.
    pub struct TopicRouteData {
        "brokerDatas" => broker_datas: Vec<BrokerData>,
        "filterServerTable" => filter_server_table: BTreeMap<String, Vec<String>>,
        /// `brokerName:queueNums;…`, set only for order topics configured on the name server.
        "orderTopicConf" => order_topic_conf: Option<String>,
        "queueDatas" => queue_datas: Vec<QueueData>,
    }
}

json_object! {
    /// `QueueData`: one broker's queues of a topic. (Named `topicSynFlag` before 4.9.0.)
    pub struct QueueData {
        "brokerName" => broker_name: String,
        "perm" => perm: i32 = perm::READ | perm::WRITE,
        "readQueueNums" => read_queue_nums: i32,
        "topicSysFlag" => topic_sys_flag: i32,
        "writeQueueNums" => write_queue_nums: i32,
    }
}

json_object! {
    /// `BrokerData`: the addresses of one broker name, by broker id (0 = master).
    pub struct BrokerData {
        /// fastjson writes these `Long` keys unquoted.
        "brokerAddrs" => broker_addrs: BTreeMap<i64, String>,
        "brokerName" => broker_name: String,
        "cluster" => cluster: String,
        /// 5.x.
        "enableActingMaster" => enable_acting_master: Option<bool>,
        /// 5.x.
        "zoneName" => zone_name: Option<String>,
    }
}

impl BrokerData {
    /// The master's address, if the master is registered.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&MASTER_ID).map(String::as_str)
    }
}

json_object! {
    /// `ClusterInfo` (GET_BROKER_CLUSTER_INFO).
    pub struct ClusterInfo {
        "brokerAddrTable" => broker_addr_table: BTreeMap<String, BrokerData>,
        "clusterAddrTable" => cluster_addr_table: BTreeMap<String, Vec<String>>,
    }
}

json_object! {
    /// `TopicList` (GET_ALL_TOPIC_LIST_FROM_NAMESERVER and friends).
    pub struct TopicList {
        "brokerAddr" => broker_addr: Option<String>,
        "topicList" => topic_list: Vec<String>,
    }
}
