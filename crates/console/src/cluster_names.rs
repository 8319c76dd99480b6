//! What the cluster has, asked through an admin client: the consumer groups its masters are
//! configured with (RocketMQ's own left out) and the topics its name servers route.

use tidemark_client::Admin;

/// Groups RocketMQ creates for itself on every broker; not listed.
const SYSTEM_GROUPS: [&str; 8] = [
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PULL",
    "CID_RMQ_SYS_TRANS",
];

pub fn is_system_group(group: &str) -> bool {
    SYSTEM_GROUPS.contains(&group) || group.starts_with("CID_RMQ_SYS_")
}

/// Every subscription group a master of the cluster has, RocketMQ's own left out, sorted.
pub async fn configured_groups(admin: &Admin) -> Vec<String> {
    let mut groups = Vec::new();
    for master in admin.masters(None).await.unwrap_or_default() {
        let configured = admin
            .subscription_groups(&master.addr)
            .await
            .unwrap_or_default();
        groups.extend(
            configured
                .into_iter()
                .map(|config| config.group_name)
                .filter(|group| !is_system_group(group)),
        );
    }
    groups.sort();
    groups.dedup();
    groups
}

/// The topics users send to: the name servers' list without retry, dead-letter and system
/// topics.
pub async fn user_topics(admin: &Admin) -> Vec<String> {
    admin
        .topic_list()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|topic| {
            !topic.starts_with('%')
                && !topic.starts_with("rmq_sys_")
                && !topic.starts_with("RMQ_SYS_")
                && topic != "SCHEDULE_TOPIC_XXXX"
                && topic != "TBW102"
                && topic != "OFFSET_MOVED_EVENT"
                && topic != "TRANS_CHECK_MAX_TIME_TOPIC"
        })
        .collect()
}
