//! Topic and subscription-group configuration (RocketMQ's `TopicConfigManager` and
//! `SubscriptionGroupManager`): tables that own their lock, with a data version (RocketMQ's,
//! sent to name servers and slaves) and a revision (what persistence watches) that move on
//! every change.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tidemark_protocol::body::{
    perm, DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper, TopicConfig,
    TopicConfigSerializeWrapper,
};

use crate::lock_rank::{self, Rank, Ranked};

/// The template topic producers name in `defaultTopic` to have topics created on first send.
pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
pub const OFFSET_MOVED_EVENT: &str = "OFFSET_MOVED_EVENT";
pub use crate::progress_record::PROGRESS_TOPIC;
pub use tidemark_store::{SCHEDULE_TOPIC, TIMER_TOPIC};
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

/// The characters RocketMQ allows in topic and group names: `[%|a-zA-Z0-9_-]`.
pub fn has_only_name_characters(name: &str) -> bool {
    name.bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'%' | b'|' | b'_' | b'-'))
}

/// Topic names RocketMQ accepts: `[%|a-zA-Z0-9_-]`, at most 127 characters.
pub fn is_valid_topic_name(topic: &str) -> bool {
    !topic.is_empty() && topic.len() <= 127 && has_only_name_characters(topic)
}

/// Topics a producer may not send to.
pub fn is_system_topic_for_send(topic: &str) -> bool {
    topic == SCHEDULE_TOPIC
        || topic == TIMER_TOPIC
        || topic == PROGRESS_TOPIC
        || topic.starts_with("RMQ_SYS_TRANS")
}

/// The topic map and its versions; only [`TopicTable`] touches it, under its lock.
#[derive(Debug, Clone, Default)]
struct Topics {
    data_version: DataVersion,
    topics: BTreeMap<String, TopicConfig>,
    /// The broker's own topics (RocketMQ's `systemTopicList`).
    system: std::collections::BTreeSet<String>,
    /// Moves on every change; persistence writes when it moved.
    revision: u64,
}

impl Topics {
    fn insert(&mut self, config: TopicConfig, now_ms: i64) -> bool {
        if self.topics.get(&config.topic_name) == Some(&config) {
            return false;
        }
        self.topics.insert(config.topic_name.clone(), config);
        self.data_version = self.data_version.next(now_ms);
        self.revision += 1;
        true
    }
}

/// The broker's topics (RocketMQ's `TopicConfigManager`). Owns its lock; every operation is
/// atomic, and what it returns is a copy.
#[derive(Debug, Default)]
pub struct TopicTable {
    inner: Mutex<Topics>,
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
        let mut topics = BTreeMap::new();
        let mut add = |name: &str, queues: i32, permission: i32| {
            topics.insert(
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
        add(TIMER_TOPIC, 1, perm::READ | perm::WRITE);
        add(PROGRESS_TOPIC, 1, perm::READ | perm::WRITE);
        Self {
            inner: Mutex::new(Topics {
                data_version: DataVersion {
                    counter: 0,
                    timestamp: now_ms,
                    state_version: None,
                },
                system: topics.keys().cloned().collect(),
                topics,
                revision: 0,
            }),
        }
    }

    fn lock(&self) -> Ranked<'_, Topics> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.lock().topics.get(topic).cloned()
    }

    pub fn data_version(&self) -> DataVersion {
        self.lock().data_version.clone()
    }

    /// Moves on every change (persistence compares it with what it last wrote).
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Creates or replaces a topic (UPDATE_AND_CREATE_TOPIC); returns whether anything changed.
    pub fn upsert(&self, config: TopicConfig, now_ms: i64) -> bool {
        self.lock().insert(config, now_ms)
    }

    /// The topic, created on first send from a template topic marked `PERM_INHERIT`; with
    /// whether this call created it. `None` when it does not exist and the template does not
    /// allow creating it.
    pub fn get_or_create_from_template(
        &self,
        topic: &str,
        template: &str,
        queue_nums: i32,
        now_ms: i64,
    ) -> Option<(TopicConfig, bool)> {
        let mut inner = self.lock();
        if let Some(existing) = inner.topics.get(topic) {
            return Some((existing.clone(), false));
        }
        let template = inner.topics.get(template)?;
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
        inner.insert(config.clone(), now_ms);
        Some((config, true))
    }

    /// The topic, created with fixed queues and permission if absent (`%RETRY%`, `%DLQ%`); with
    /// whether this call created it.
    pub fn ensure(
        &self,
        topic: &str,
        queue_nums: i32,
        permission: i32,
        now_ms: i64,
    ) -> (TopicConfig, bool) {
        let mut inner = self.lock();
        if let Some(existing) = inner.topics.get(topic) {
            return (existing.clone(), false);
        }
        let config = TopicConfig {
            topic_name: topic.to_owned(),
            read_queue_nums: queue_nums,
            write_queue_nums: queue_nums,
            perm: permission,
            ..TopicConfig::default()
        };
        inner.insert(config.clone(), now_ms);
        (config, true)
    }

    pub fn remove(&self, topic: &str, now_ms: i64) -> bool {
        let mut inner = self.lock();
        let removed = inner.topics.remove(topic).is_some();
        if removed {
            inner.data_version = inner.data_version.next(now_ms);
            inner.revision += 1;
        }
        removed
    }

    pub fn names(&self) -> Vec<String> {
        self.lock().topics.keys().cloned().collect()
    }

    /// The broker's own topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER).
    pub fn system_topics(&self) -> Vec<String> {
        self.lock().system.iter().cloned().collect()
    }

    /// Whether `topic` is one of the broker's own topics.
    pub fn is_system(&self, topic: &str) -> bool {
        self.lock().system.contains(topic)
    }

    /// Counts `topic` among the broker's own topics (the trace topic it creates at start).
    pub fn mark_system(&self, topic: &str) {
        self.lock().system.insert(topic.to_owned());
    }

    /// Moves the data version on without a change (the broker's permission changed, which the
    /// registered topic configs carry): name servers then take the registration's topics again.
    pub fn touch(&self, now_ms: i64) {
        let mut inner = self.lock();
        inner.data_version = inner.data_version.next(now_ms);
        inner.revision += 1;
    }

    /// The persisted / REGISTER_BROKER / GET_ALL_TOPIC_CONFIG form, and the revision it shows.
    pub fn snapshot(&self) -> (u64, TopicConfigSerializeWrapper) {
        let inner = self.lock();
        (
            inner.revision,
            TopicConfigSerializeWrapper {
                data_version: inner.data_version.clone(),
                topic_config_table: inner.topics.clone(),
            },
        )
    }

    /// Takes topics over the current ones and adopts their data version: the persisted file at
    /// start, and on a slave its master's table (Java's `putAll`). With `only_if_newer`, nothing
    /// happens when the data version is already this one; returns whether it changed.
    pub fn merge(&self, wrapper: TopicConfigSerializeWrapper, only_if_newer: bool) -> bool {
        let mut inner = self.lock();
        if only_if_newer && inner.data_version == wrapper.data_version {
            return false;
        }
        inner.topics.extend(wrapper.topic_config_table);
        inner.data_version = wrapper.data_version;
        inner.revision += 1;
        true
    }
}

/// The group map and its versions; only [`SubscriptionGroupTable`] touches it.
#[derive(Debug, Clone, Default)]
struct Groups {
    data_version: DataVersion,
    groups: BTreeMap<String, SubscriptionGroupConfig>,
    revision: u64,
}

impl Groups {
    fn changed(&mut self, now_ms: i64) {
        self.data_version = self.data_version.next(now_ms);
        self.revision += 1;
    }
}

/// The broker's subscription groups (RocketMQ's `SubscriptionGroupManager`). Owns its lock.
#[derive(Debug, Default)]
pub struct SubscriptionGroupTable {
    inner: Mutex<Groups>,
}

impl SubscriptionGroupTable {
    fn lock(&self) -> Ranked<'_, Groups> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.lock().groups.get(group).cloned()
    }

    /// A group's `retryMaxTimes` (16 for a group that does not exist).
    /// How many groups the broker has a configuration for.
    pub fn count(&self) -> usize {
        self.lock().groups.len()
    }

    pub fn retry_max_times(&self, group: &str) -> i32 {
        self.lock()
            .groups
            .get(group)
            .map_or(16, |config| config.retry_max_times)
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    pub fn data_version(&self) -> DataVersion {
        self.lock().data_version.clone()
    }

    /// The group's config, created with defaults when `auto_create` allows (Java's
    /// `findSubscriptionGroupConfig`). Returns the config and whether it was created.
    pub fn find_or_create(
        &self,
        group: &str,
        auto_create: bool,
        now_ms: i64,
    ) -> Option<(SubscriptionGroupConfig, bool)> {
        let mut inner = self.lock();
        if let Some(config) = inner.groups.get(group) {
            return Some((config.clone(), false));
        }
        if !auto_create {
            return None;
        }
        let config = SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        };
        inner.groups.insert(group.to_owned(), config.clone());
        inner.changed(now_ms);
        Some((config, true))
    }

    pub fn upsert(&self, config: SubscriptionGroupConfig, now_ms: i64) {
        let mut inner = self.lock();
        inner.groups.insert(config.group_name.clone(), config);
        inner.changed(now_ms);
    }

    pub fn remove(&self, group: &str, now_ms: i64) -> bool {
        let mut inner = self.lock();
        let removed = inner.groups.remove(group).is_some();
        if removed {
            inner.changed(now_ms);
        }
        removed
    }

    /// The persisted / GET_ALL_SUBSCRIPTIONGROUP_CONFIG form, and the revision it shows.
    pub fn snapshot(&self) -> (u64, SubscriptionGroupWrapper) {
        let inner = self.lock();
        (
            inner.revision,
            SubscriptionGroupWrapper {
                data_version: inner.data_version.clone(),
                subscription_group_table: inner.groups.clone(),
            },
        )
    }

    pub fn from_wrapper(wrapper: SubscriptionGroupWrapper) -> Self {
        Self {
            inner: Mutex::new(Groups {
                data_version: wrapper.data_version,
                groups: wrapper.subscription_group_table,
                revision: 0,
            }),
        }
    }

    /// A slave takes its master's groups whole when the master's data version moved; returns
    /// whether anything changed.
    pub fn replace_if_newer(&self, wrapper: SubscriptionGroupWrapper) -> bool {
        let mut inner = self.lock();
        if inner.data_version == wrapper.data_version {
            return false;
        }
        inner.data_version = wrapper.data_version;
        inner.groups = wrapper.subscription_group_table;
        inner.revision += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_creation_inherits_from_the_template() {
        let table = TopicTable::with_system_topics("DefaultCluster", "broker-a", true, 8, 18, 0);
        let version = table.data_version();
        let (created, was_created) = table
            .get_or_create_from_template("Orders", AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 5)
            .expect("TBW102 inherits");
        assert!(was_created);
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
            version,
            "a change moves the data version"
        );
        assert!(
            table
                .get_or_create_from_template("Other", "Orders", 4, 6)
                .is_none(),
            "Orders does not inherit"
        );
        assert_eq!(
            table.ensure("Orders", 1, perm::READ, 7),
            (created, false),
            "an existing topic is returned as it is"
        );
        assert!(
            is_valid_topic_name("%RETRY%g-1_x|y")
                && !is_valid_topic_name("a b")
                && !is_valid_topic_name(&"t".repeat(128))
        );
    }

    #[test]
    fn groups_are_created_only_when_allowed() {
        let groups = SubscriptionGroupTable::default();
        assert!(groups.find_or_create("g", false, 0).is_none());
        let (config, created) = groups.find_or_create("g", true, 0).expect("created");
        assert!(created && config.consume_enable && config.retry_max_times == 16);
        assert!(!groups.find_or_create("g", false, 1).expect("exists").1);
    }
}
