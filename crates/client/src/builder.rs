//! Setters the builders share, written once.
//!
//! Each builder keeps them as inherent methods, so callers need no trait in scope: the macros
//! below expand inside a builder's `impl` block. Every builder keeps its settings in a field
//! named `settings`.

/// Where the cluster is: the setters of every builder (they set `settings.client`).
macro_rules! client_setters {
    () => {
        /// The name server address(es), `;`-separated (`host:port;host:port`).
        pub fn namesrv_addr(mut self, addrs: impl Into<String>) -> Self {
            self.settings.client.namesrv_addrs =
                $crate::config::ClientConfig::new(addrs).namesrv_addrs;
            self
        }

        /// Replaces the whole client configuration, name servers included.
        pub fn client_config(mut self, config: $crate::config::ClientConfig) -> Self {
            self.settings.client = config;
            self
        }
    };
}

/// The setters of what both consumers read from their
/// [`ConsumerSettings`](crate::ConsumerSettings).
macro_rules! consumer_setters {
    () => {
        /// Subscribes to `topic` with a tag expression (`*` or `TagA || TagB`); the group's
        /// rebalance decides which of its queues this consumer gets.
        pub fn subscribe(
            mut self,
            topic: impl Into<String>,
            expression: impl Into<String>,
        ) -> Self {
            self.settings
                .subscriptions
                .push((topic.into(), expression.into()));
            self
        }

        pub fn message_model(mut self, model: tidemark_protocol::body::MessageModel) -> Self {
            self.settings.message_model = model;
            self
        }

        pub fn consume_from_where(
            mut self,
            from: tidemark_protocol::body::ConsumeFromWhere,
        ) -> Self {
            self.settings.consume_from_where = from;
            self
        }

        pub fn allocate_strategy(mut self, strategy: $crate::allocate::AllocateStrategy) -> Self {
            self.settings.allocate_strategy = strategy;
            self
        }

        pub fn pull_batch_size(mut self, size: i32) -> Self {
            self.settings.pull_batch_size = size;
            self
        }

        pub fn rebalance_interval(mut self, interval: std::time::Duration) -> Self {
            self.settings.rebalance_interval = interval;
            self
        }

        /// Broadcasting: the directory of the offset files (default `~/.rocketmq_offsets`).
        pub fn offset_store_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
            self.settings.offset_store_dir = Some(dir.into());
            self
        }
    };
}

pub(crate) use {client_setters, consumer_setters};
