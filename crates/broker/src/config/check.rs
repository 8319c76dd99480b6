//! The broker configuration's checks: each value, and the values that must agree.

use super::{tls, BrokerConfig, BrokerRole, ConfigError};

impl BrokerConfig {
    /// Every check [`BrokerConfig::validate`] makes, with errors naming keys through `key`.
    pub(super) fn check(&self, key: &dyn Fn(&str) -> String) -> Result<(), String> {
        if self.grpc_tls_certificate.is_some() != self.grpc_tls_private_key.is_some() {
            return Err(format!(
                "{} and {} go together: set both, or neither for a self-signed certificate",
                key("grpc_tls_certificate"),
                key("grpc_tls_private_key")
            ));
        }
        tls::check(self, key)?;
        if self.max_connections == 0 {
            return Err(format!(
                "{} = 0 would refuse every client: it must be at least 1",
                key("max_connections")
            ));
        }
        if self.acl_access_key.is_some() != self.acl_secret_key.is_some() {
            return Err(format!(
                "{} and {} go together: the broker's own account needs both",
                key("acl_access_key"),
                key("acl_secret_key")
            ));
        }
        if self.acl_enable && self.acl_file.is_none() && self.config_file.is_none() {
            return Err(format!(
                "{} needs {}: there is no config file to find plain_acl.yml beside",
                key("acl_enable"),
                key("acl_file")
            ));
        }
        match self.broker_role {
            BrokerRole::Slave if self.broker_id <= 0 => {
                return Err(format!(
                    "{} = {} with {} = SLAVE: a slave needs a broker id of 1 or more",
                    key("broker_id"),
                    self.broker_id,
                    key("broker_role")
                ))
            }
            BrokerRole::AsyncMaster | BrokerRole::SyncMaster if self.broker_id != 0 => {
                return Err(format!(
                    "{} = {} with {} = {:?}: a master's broker id is 0 (slaves use 1 and up)",
                    key("broker_id"),
                    self.broker_id,
                    key("broker_role"),
                    self.broker_role
                ))
            }
            _ => {}
        }
        if self.transaction_check_interval == 0 {
            return Err(format!(
                "{} = 0: unresolved transactions must be checked back at some interval (ms)",
                key("transaction_check_interval")
            ));
        }
        if self.listen_port == u16::MAX || self.listen_port < 3 {
            return Err(format!(
                "{} = {} must leave room for the VIP port (port - 2) and the HA port (port + 1)",
                key("listen_port"),
                self.listen_port
            ));
        }
        if !(0..8).contains(&self.broker_permission) {
            return Err(format!(
                "{} = {} is not a permission value between 0 and 7 (4 read, 2 write)",
                key("broker_permission"),
                self.broker_permission
            ));
        }
        if self.mapped_file_size_consume_queue == 0
            || !self.mapped_file_size_consume_queue.is_multiple_of(20)
        {
            return Err(format!(
                "{} = {} must be a positive multiple of 20 (the size of one entry)",
                key("mapped_file_size_consume_queue"),
                self.mapped_file_size_consume_queue
            ));
        }
        let segment_needed =
            self.max_message_size as u64 + tidemark_store::RECORD_OVERHEAD_MAX as u64 + 8;
        if self.mapped_file_size_commit_log < segment_needed {
            return Err(format!(
                "{} = {} is too small for {} = {}: a commit-log file must hold the largest \
                 message (its body plus up to {} bytes of header and properties, and an 8-byte \
                 end marker), so it needs at least {segment_needed} bytes; raise {} or lower {}",
                key("mapped_file_size_commit_log"),
                self.mapped_file_size_commit_log,
                key("max_message_size"),
                self.max_message_size,
                tidemark_store::RECORD_OVERHEAD_MAX,
                key("mapped_file_size_commit_log"),
                key("max_message_size"),
            ));
        }
        for (name, percent) in [
            ("disk_max_used_space_ratio", self.disk_max_used_space_ratio),
            (
                "disk_space_clean_forcibly_ratio",
                self.disk_space_clean_forcibly_ratio,
            ),
            (
                "disk_space_warning_level_ratio",
                self.disk_space_warning_level_ratio,
            ),
        ] {
            if percent > 100 {
                return Err(format!("{} = {percent} is a percentage (0-100)", key(name)));
            }
        }
        if self.delete_when_hour().is_err() {
            return Err(format!(
                "{} = {:?} is not an hour of the day (00-23; \"04;05\" uses the first)",
                key("delete_when"),
                self.delete_when
            ));
        }
        if let Err(ConfigError::Invalid(reason)) = self.delay_levels_ms() {
            return Err(format!(
                "{} = {:?}: {reason}",
                key("message_delay_level"),
                self.message_delay_level
            ));
        }
        if self.progress_checkpoint_interval_ms < 1_000 {
            return Err(format!(
                "{} must be at least 1000 (ms), not {}",
                key("progress_checkpoint_interval_ms"),
                self.progress_checkpoint_interval_ms
            ));
        }
        if self.progress_history_max_bytes < 1 << 20 {
            return Err(format!(
                "{} must be at least 1048576 (1 MiB), not {}",
                key("progress_history_max_bytes"),
                self.progress_history_max_bytes
            ));
        }
        // Anything the store still refuses is a bug in the checks above; say so plainly.
        self.store_config().validate().map_err(|error| match error {
            tidemark_store::StoreError::Config(message) => message,
            other => other.to_string(),
        })
    }
}
