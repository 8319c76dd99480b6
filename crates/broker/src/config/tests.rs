//! Tests of the broker's configuration loading: property names, errors, the example file.

use super::*;

#[cfg(test)]
mod keys {
    use super::*;

    #[test]
    fn broker_conf_property_names_are_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("broker.conf");
        std::fs::write(&path, "brokerClusterName = DefaultCluster\nbrokerName=broker-b\nbrokerId=0\ndeleteWhen=04\nfileReservedTime=48\nbrokerRole=ASYNC_MASTER\nflushDiskType=SYNC_FLUSH\nlistenPort=20911\n").expect("write");
        let config = BrokerConfig::load(&path).expect("loads");
        assert_eq!(config.broker_name, "broker-b");
        assert_eq!(config.listen_port, 20911);
        assert_eq!(config.store_config().flush, FlushPolicy::Sync);
        assert_eq!(config.store_config().file_reserved_hours, 48);
    }

    #[test]
    fn toml_with_either_key_style_and_unknown_keys_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("broker.toml");
        std::fs::write(&path, "broker_name = \"b\"\nlistenPort = 30911\n").expect("write");
        let config = BrokerConfig::load(&path).expect("loads");
        assert_eq!(
            (config.broker_name.as_str(), config.listen_port),
            ("b", 30911)
        );
        std::fs::write(&path, "brokre_name = \"typo\"\n").expect("write");
        assert!(matches!(
            BrokerConfig::load(&path),
            Err(ConfigError::Parse { .. })
        ));
    }
}

#[cfg(test)]
mod errors {
    use super::*;

    fn load_error(name: &str, text: &str) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        BrokerConfig::load(&path).expect_err("refused").to_string()
    }

    /// The error names the keys as the file wrote them, with their values, once.
    #[test]
    fn a_segment_too_small_for_the_largest_message_names_both_keys() {
        let toml = load_error("broker.toml", "mapped_file_size_commit_log = 1048576\n");
        assert!(
            toml.contains("mapped_file_size_commit_log = 1048576")
                && toml.contains("max_message_size = 4194304")
                && toml.contains("4259848")
                && toml.contains("broker.toml"),
            "{toml}"
        );
        assert_eq!(toml.matches("invalid configuration").count(), 1, "{toml}");
        assert!(!toml.contains("message_size_max_bytes"), "{toml}");
        let conf = load_error(
            "broker.conf",
            "mappedFileSizeCommitLog=1048576\nmaxMessageSize=2097152\n",
        );
        assert!(
            conf.contains("mappedFileSizeCommitLog = 1048576")
                && conf.contains("maxMessageSize = 2097152"),
            "{conf}"
        );
        let exact = 4 * 1024 * 1024 + tidemark_store::RECORD_OVERHEAD_MAX as u64 + 8;
        let config = BrokerConfig {
            mapped_file_size_commit_log: exact,
            ..BrokerConfig::default()
        };
        config.validate().expect("exactly enough room is fine");
    }

    #[test]
    fn every_check_names_its_key_and_value() {
        for (text, expected) in [
            ("brokerId = 3\n", "brokerId = 3"),
            ("listen_port = 1\n", "listen_port = 1"),
            ("brokerPermission = 9\n", "brokerPermission = 9"),
            (
                "mapped_file_size_consume_queue = 30\n",
                "mapped_file_size_consume_queue = 30",
            ),
            ("deleteWhen = \"25\"\n", "deleteWhen = \"25\""),
            (
                "message_delay_level = \"1x\"\n",
                "message_delay_level = \"1x\"",
            ),
            (
                "diskSpaceWarningLevelRatio = 120\n",
                "diskSpaceWarningLevelRatio = 120",
            ),
            ("max_connections = 0\n", "max_connections = 0"),
        ] {
            let message = load_error("broker.toml", text);
            assert!(message.contains(expected), "{text}: {message}");
        }
    }
}

#[cfg(test)]
mod example_file {
    /// The shipped example must stay loadable and equal to the defaults.
    #[test]
    fn example_toml_loads_and_matches_the_defaults() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../broker.example.toml");
        let config = super::super::BrokerConfig::load(&path).expect("example loads");
        assert_eq!(config.config_file.as_deref(), Some(path.as_path()));
        let config = super::super::BrokerConfig {
            config_file: None,
            ..config
        };
        let defaults = super::super::BrokerConfig::default();
        assert_eq!(format!("{config:?}"), format!("{defaults:?}"));
    }
}
