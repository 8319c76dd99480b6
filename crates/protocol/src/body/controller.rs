//! Controller bodies: sync state sets, broker member groups, replica tables, epoch caches.

use std::collections::{BTreeMap, BTreeSet};

use crate::json_object;

json_object! {
    /// `SyncStateSet`: the broker ids in sync with the master, and the set's epoch.
    pub struct SyncStateSet {
        "syncStateSet" => sync_state_set: BTreeSet<i64>,
        "syncStateSetEpoch" => sync_state_set_epoch: i32,
    }
}

json_object! {
    /// `BrokerMemberGroup`: a broker set's members by broker id.
    pub struct BrokerMemberGroup {
        "brokerAddrs" => broker_addrs: BTreeMap<i64, String>,
        "brokerName" => broker_name: String,
        "cluster" => cluster: String,
    }
}

json_object! {
    /// `ElectMasterResponseBody` (CONTROLLER_ELECT_MASTER).
    pub struct ElectMasterResponseBody {
        "brokerMemberGroup" => broker_member_group: Option<BrokerMemberGroup>,
        "syncStateSet" => sync_state_set: BTreeSet<i64>,
    }
}

json_object! {
    /// `BrokerReplicasInfo` (CONTROLLER_GET_SYNC_STATE_DATA): per broker name.
    pub struct BrokerReplicasInfo {
        "replicasInfoTable" => replicas_info_table: BTreeMap<String, ReplicasInfo>,
    }
}

json_object! {
    /// `BrokerReplicasInfo.ReplicasInfo`.
    pub struct ReplicasInfo {
        "inSyncReplicas" => in_sync_replicas: Vec<ReplicaIdentity>,
        "masterAddress" => master_address: Option<String>,
        "masterBrokerId" => master_broker_id: Option<i64>,
        "masterEpoch" => master_epoch: i32,
        "notInSyncReplicas" => not_in_sync_replicas: Vec<ReplicaIdentity>,
        "syncStateSetEpoch" => sync_state_set_epoch: i32,
    }
}

json_object! {
    /// `BrokerReplicasInfo.ReplicaIdentity`.
    pub struct ReplicaIdentity {
        "alive" => alive: Option<bool>,
        "brokerAddress" => broker_address: String,
        "brokerId" => broker_id: i64,
        "brokerName" => broker_name: String,
    }
}

json_object! {
    /// `EpochEntry`: the commit log offsets `[startOffset, endOffset)` written in an epoch.
    pub struct EpochEntry {
        "endOffset" => end_offset: i64 = i64::MAX,
        "epoch" => epoch: i32,
        "startOffset" => start_offset: i64,
    }
}

json_object! {
    /// `EpochEntryCache` (GET_BROKER_EPOCH_CACHE): a broker's epoch file and log end.
    pub struct EpochEntryCache {
        "brokerId" => broker_id: i64,
        "brokerName" => broker_name: String,
        "clusterName" => cluster_name: String,
        "epochList" => epoch_list: Vec<EpochEntry>,
        "maxOffset" => max_offset: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonBody;

    #[test]
    fn sync_state_sets_read_what_fastjson_writes() {
        let set =
            SyncStateSet::from_json_bytes(br#"{"syncStateSet":[2,1,2],"syncStateSetEpoch":3}"#)
                .expect("parse");
        assert_eq!(set.sync_state_set, BTreeSet::from([1, 2]));
        assert_eq!(set.sync_state_set_epoch, 3);
        assert_eq!(
            String::from_utf8(set.to_json_bytes()).expect("utf8"),
            r#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#
        );
    }

    #[test]
    fn member_groups_keep_raw_long_keys() {
        let body = ElectMasterResponseBody {
            broker_member_group: Some(BrokerMemberGroup {
                broker_addrs: BTreeMap::from([(1, "10.0.0.1:10911".to_owned())]),
                broker_name: "broker-a".to_owned(),
                cluster: "c".to_owned(),
            }),
            sync_state_set: BTreeSet::from([1]),
        };
        let text = String::from_utf8(body.to_json_bytes()).expect("utf8");
        assert!(
            text.contains(r#""brokerAddrs":{1:"10.0.0.1:10911"}"#),
            "{text}"
        );
        assert_eq!(
            ElectMasterResponseBody::from_json_bytes(text.as_bytes()).expect("parse"),
            body
        );
    }
}
