//! Settings every producer and consumer shares (Java `ClientConfig`).

use std::time::Duration;

/// Where the cluster is and how often to talk to it.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Name server addresses (`host:port`); tried in turn when one fails.
    pub namesrv_addrs: Vec<String>,
    /// The part of the client id after `@`. `None`: `DEFAULT` for broadcasting consumers (so
    /// their offset file is found again after a restart), a per-process unique name otherwise.
    pub instance_name: Option<String>,
    /// The IP in the client id. `None`: the local address of the connection to the name server.
    pub client_ip: Option<String>,
    /// Timeout of ordinary requests (Java `mqClientApiTimeout`).
    pub request_timeout: Duration,
    /// Route refresh period (Java `pollNameServerInterval`).
    pub poll_name_server_interval: Duration,
    /// Heartbeat period (Java `heartbeatBrokerInterval`).
    pub heartbeat_interval: Duration,
    /// Consumer offset persist period (Java `persistConsumerOffsetInterval`): every assigned
    /// queue's offset is sent, changed or not.
    pub persist_offset_interval: Duration,
    /// Clustering consumers: how often the offsets that moved since they were last sent are
    /// reported (oneway, one commit per changed queue), so a consumer killed with -9 replays
    /// about this much work instead of up to `persist_offset_interval`. Zero turns it off (the
    /// Java client's behaviour). Tidemark makes such commits durable within milliseconds;
    /// Apache brokers store them in memory as usual.
    pub progress_report_interval: Duration,
    /// Concurrent push consumers hand queues over in a rebalance: the one giving a queue up
    /// lets its running listener calls finish (for at most this long) and commits its final
    /// progress; the one taking it over waits for that (at most twice this long) before it
    /// pulls. Against Apache brokers, or with consumers of other clients, nobody waits.
    pub hand_off_timeout: Duration,
    /// How request headers are serialised: JSON (the Java client's default) or RocketMQ's
    /// binary form (Java's `rocketmq.serialize.type=ROCKETMQ`), cheaper for both ends. Brokers
    /// answer in the form they were asked in.
    pub serialize_type: tidemark_protocol::SerializeType,
    /// Sign every request with this account (RocketMQ ACL, the Java client's
    /// `AclClientRPCHook`), for name servers and brokers that check ACL.
    pub credentials: Option<tidemark_remoting::Credentials>,
    /// Dial name servers and brokers over TLS (the Java client's `tls.enable`).
    pub tls: Option<std::sync::Arc<tidemark_remoting::tls::ClientTls>>,
}

impl ClientConfig {
    /// Settings of this client's connections.
    pub fn remoting(&self) -> tidemark_remoting::ClientConfig {
        let mut remoting = tidemark_remoting::ClientConfig::default();
        remoting.channel.signer = self.credentials.clone().map(std::sync::Arc::new);
        remoting.tls = self.tls.clone();
        remoting
    }

    pub fn new(namesrv_addrs: impl Into<String>) -> Self {
        Self {
            namesrv_addrs: namesrv_addrs
                .into()
                .split(';')
                .map(str::trim)
                .filter(|addr| !addr.is_empty())
                .map(str::to_owned)
                .collect(),
            ..Self::default()
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            namesrv_addrs: Vec::new(),
            instance_name: None,
            client_ip: None,
            request_timeout: Duration::from_secs(3),
            poll_name_server_interval: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            persist_offset_interval: Duration::from_secs(5),
            progress_report_interval: Duration::from_millis(100),
            hand_off_timeout: Duration::from_secs(3),
            serialize_type: tidemark_protocol::SerializeType::Json,
            credentials: None,
            tls: None,
        }
    }
}

/// A process-unique instance name, as Java derives one from the pid when none is set.
pub(crate) fn unique_instance_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = tidemark_remoting::since_epoch().as_nanos();
    format!(
        "{}#{}{}",
        std::process::id(),
        nanos,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_server_list_is_semicolon_separated() {
        let config = ClientConfig::new("127.0.0.1:9876; 127.0.0.1:9877;");
        assert_eq!(config.namesrv_addrs, ["127.0.0.1:9876", "127.0.0.1:9877"]);
    }

    #[test]
    fn instance_names_are_unique() {
        assert_ne!(unique_instance_name(), unique_instance_name());
    }
}
