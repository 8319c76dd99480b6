//! Topic and subscription-group configuration (RocketMQ's `TopicConfigManager` and
//! `SubscriptionGroupManager`): plain tables with a data version that moves on every change.

use std::collections::BTreeMap;

use tidemark_protocol::body::{
    perm, DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper, TopicConfig,
    TopicConfigSerializeWrapper,
};

/// The template topic producers name in `defaultTopic` to have topics created on first send.
pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
pub const OFFSET_MOVED_EVENT: &str = "OFFSET_MOVED_EVENT";
pub use tidemark_store::SCHEDULE_TOPIC;
/// Queues of a dead-letter topic.
pub const DLQ_QUEUE_NUMS: i32 = 1;

/// `%RETRY%{group}`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

/// `%DLQ%{group}`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

/// Topic names RocketMQ accepts: `[%|a-zA-Z0-9_-]`, at most 127 characters.
pub fn is_valid_topic_name(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 127
        && topic
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'%' | b'|' | b'_' | b'-'))
}

/// Topics a producer may not send to.
pub fn is_system_topic_for_send(topic: &str) -> bool {
    topic == SCHEDULE_TOPIC || topic.starts_with("RMQ_SYS_TRANS")
}

/// The broker's topics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicTable {
    data_version: DataVersion,
    topics: BTreeMap<String, TopicConfig>,
}

impl TopicTable {
    /// The built-in topics a broker always has, as Java's `TopicConfigManager` creates them.
    pub fn with_system_topics(
        cluster: &str,
        broker_name: &str,
        auto_create_topic: bool,
        default_queue_nums: i32,
        delay_levels: i32,
        now_ms: i64,
    ) -> Self {
        let mut table = Self::default();
        let mut add = |name: &str, queues: i32, permission: i32| {
            table.topics.insert(
                name.to_owned(),
                TopicConfig {
                    topic_name: name.to_owned(),
                    read_queue_nums: queues,
                    write_queue_nums: queues,
                    perm: permission,
                    ..TopicConfig::default()
                },
            );
        };
        if auto_create_topic {
            add(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_queue_nums,
                perm::INHERIT | perm::READ | perm::WRITE,
            );
        }
        add(SELF_TEST_TOPIC, 1, perm::READ | perm::WRITE);
        add(cluster, 16, perm::READ | perm::WRITE | perm::INHERIT);
        add(broker_name, 1, perm::READ | perm::WRITE | perm::INHERIT);
        add(OFFSET_MOVED_EVENT, 1, perm::READ | perm::WRITE);
        add(SCHEDULE_TOPIC, delay_levels, perm::READ | perm::WRITE);
        table.data_version = DataVersion {
            counter: 0,
            timestamp: now_ms,
            state_version: None,
        };
        table
    }

    pub fn get(&self, topic: &str) -> Option<&TopicConfig> {
        self.topics.get(topic)
    }

    pub fn data_version(&self) -> &DataVersion {
        &self.data_version
    }

    /// Creates or replaces a topic (UPDATE_AND_CREATE_TOPIC); returns whether anything changed.
    pub fn upsert(&mut self, config: TopicConfig, now_ms: i64) -> bool {
        if self.topics.get(&config.topic_name) == Some(&config) {
            return false;
        }
        self.topics.insert(config.topic_name.clone(), config);
        self.data_version = self.data_version.next(now_ms);
        true
    }

    /// Auto-creation on first send: inherits from a template topic marked `PERM_INHERIT`.
    /// `None` when the template does not allow it.
    pub fn create_from_template(
        &mut self,
        topic: &str,
        template: &str,
        queue_nums: i32,
        now_ms: i64,
    ) -> Option<TopicConfig> {
        if let Some(existing) = self.topics.get(topic) {
            return Some(existing.clone());
        }
        let template = self.topics.get(template)?;
        if !perm::is_inherited(template.perm) {
            return None;
        }
        let queues = queue_nums.min(template.write_queue_nums).max(1);
        let config = TopicConfig {
            topic_name: topic.to_owned(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: template.perm & !perm::INHERIT,
            topic_sys_flag: template.topic_sys_flag,
            ..TopicConfig::default()
        };
        self.upsert(config.clone(), now_ms);
        Some(config)
    }

    /// A topic created on demand with fixed queues and permission (`%RETRY%`, `%DLQ%`).
    pub fn create_if_absent(
        &mut self,
        topic: &str,
        queue_nums: i32,
        permission: i32,
        now_ms: i64,
    ) -> TopicConfig {
        if let Some(existing) = self.topics.get(topic) {
            return existing.clone();
        }
        let config = TopicConfig {
            topic_name: topic.to_owned(),
            read_queue_nums: queue_nums,
            write_queue_nums: queue_nums,
            perm: permission,
            ..TopicConfig::default()
        };
        self.upsert(config.clone(), now_ms);
        config
    }

    pub fn remove(&mut self, topic: &str, now_ms: i64) -> bool {
        let removed = self.topics.remove(topic).is_some();
        if removed {
            self.data_version = self.data_version.next(now_ms);
        }
        removed
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.topics.keys()
    }

    pub fn to_wrapper(&self) -> TopicConfigSerializeWrapper {
        TopicConfigSerializeWrapper {
            data_version: self.data_version.clone(),
            topic_config_table: self.topics.clone(),
        }
    }

    /// Takes topics over the current ones and adopts their data version: the persisted file at
    /// start, and on a slave its master's table (Java's `putAll`).
    pub fn merge_persisted(&mut self, wrapper: TopicConfigSerializeWrapper) {
        self.topics.extend(wrapper.topic_config_table);
        self.data_version = wrapper.data_version;
    }
}

/// The broker's subscription groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionGroupTable {
    data_version: DataVersion,
    groups: BTreeMap<String, SubscriptionGroupConfig>,
}

impl SubscriptionGroupTable {
    pub fn get(&self, group: &str) -> Option<&SubscriptionGroupConfig> {
        self.groups.get(group)
    }

    /// The group's config, created with defaults when `auto_create` allows (Java's
    /// `findSubscriptionGroupConfig`). Returns the config and whether it was created.
    pub fn find_or_create(
        &mut self,
        group: &str,
        auto_create: bool,
        now_ms: i64,
    ) -> Option<(SubscriptionGroupConfig, bool)> {
        if let Some(config) = self.groups.get(group) {
            return Some((config.clone(), false));
        }
        if !auto_create {
            return None;
        }
        let config = SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        };
        self.groups.insert(group.to_owned(), config.clone());
        self.data_version = self.data_version.next(now_ms);
        Some((config, true))
    }

    pub fn upsert(&mut self, config: SubscriptionGroupConfig, now_ms: i64) {
        self.groups.insert(config.group_name.clone(), config);
        self.data_version = self.data_version.next(now_ms);
    }

    pub fn remove(&mut self, group: &str, now_ms: i64) -> bool {
        let removed = self.groups.remove(group).is_some();
        if removed {
            self.data_version = self.data_version.next(now_ms);
        }
        removed
    }

    pub fn to_wrapper(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            data_version: self.data_version.clone(),
            subscription_group_table: self.groups.clone(),
        }
    }

    pub fn from_wrapper(wrapper: SubscriptionGroupWrapper) -> Self {
        Self {
            data_version: wrapper.data_version,
            groups: wrapper.subscription_group_table,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_creation_inherits_from_the_template() {
        let mut table =
            TopicTable::with_system_topics("DefaultCluster", "broker-a", true, 8, 18, 0);
        let version = table.data_version().clone();
        let created = table
            .create_from_template("Orders", AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 5)
            .expect("TBW102 inherits");
        assert_eq!(
            (
                created.read_queue_nums,
                created.write_queue_nums,
                created.perm
            ),
            (4, 4, perm::READ | perm::WRITE)
        );
        assert_ne!(
            table.data_version(),
            &version,
            "a change moves the data version"
        );
        assert!(
            table
                .create_from_template("Other", "Orders", 4, 6)
                .is_none(),
            "Orders does not inherit"
        );
        assert!(
            is_valid_topic_name("%RETRY%g-1_x|y")
                && !is_valid_topic_name("a b")
                && !is_valid_topic_name(&"t".repeat(128))
        );
    }

    #[test]
    fn groups_are_created_only_when_allowed() {
        let mut groups = SubscriptionGroupTable::default();
        assert!(groups.find_or_create("g", false, 0).is_none());
        let (config, created) = groups.find_or_create("g", true, 0).expect("created");
        assert!(created && config.consume_enable && config.retry_max_times == 16);
        assert!(!groups.find_or_create("g", false, 1).expect("exists").1);
    }
}
