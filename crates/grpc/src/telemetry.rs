//! Telemetry, the bidirectional stream every 5.x client opens to each broker endpoint: it sends
//! its settings and waits for the server's (its start-up fails after a few seconds without
//! them), then keeps the stream open. Tidemark answers each settings command with the client's
//! settings completed by the broker — retry back-off, batch size, long-polling time, FIFO flag,
//! body limit — as RocketMQ's proxy does, and registers the client with the broker.

use std::sync::Arc;

use tonic::Streaming;
use tracing::debug;

use crate::convert::{duration, full_name};
use crate::gateway::{Caller, Gateway};
use crate::proto::{
    retry_policy::Strategy, settings::PubSub, telemetry_command::Command, CustomizedBackoff,
    ExponentialBackoff, Metric, RetryPolicy, Settings, TelemetryCommand,
};
use crate::sessions::Outbound;
use crate::status::ok;

/// RocketMQ's default retry schedule for consumers (the proxy's customized back-off), ms.
const CONSUMER_BACKOFF_MS: [i64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
/// Messages a push consumer receives at once, and how long it long-polls.
const RECEIVE_BATCH_SIZE: i32 = 32;
const LONG_POLLING_MS: i64 = 20_000;

impl Gateway {
    /// The settings the server answers with: the client's own, completed.
    pub fn server_settings(&self, client: &Settings) -> Settings {
        let mut merged = client.clone();
        match merged.pub_sub.as_mut() {
            Some(PubSub::Publishing(publishing)) => {
                publishing.max_body_size =
                    self.state.config.max_message_size.min(i32::MAX as usize) as i32;
                publishing.validate_message_type = true;
                let attempts = client
                    .backoff_policy
                    .as_ref()
                    .map_or(3, |policy| policy.max_attempts.max(1));
                merged.backoff_policy = Some(RetryPolicy {
                    max_attempts: attempts,
                    strategy: Some(Strategy::ExponentialBackoff(ExponentialBackoff {
                        initial: Some(duration(10)),
                        max: Some(duration(1_000)),
                        multiplier: 2.0,
                    })),
                });
            }
            Some(PubSub::Subscription(subscription)) => {
                let group = full_name(subscription.group.as_ref());
                subscription.fifo = Some(self.group_is_fifo(&group));
                subscription.receive_batch_size = Some(RECEIVE_BATCH_SIZE);
                subscription.long_polling_timeout = Some(duration(LONG_POLLING_MS));
                merged.backoff_policy = Some(RetryPolicy {
                    max_attempts: self
                        .state
                        .metadata
                        .groups
                        .retry_max_times(&group)
                        .saturating_add(1),
                    strategy: Some(Strategy::CustomizedBackoff(CustomizedBackoff {
                        next: CONSUMER_BACKOFF_MS.iter().map(|ms| duration(*ms)).collect(),
                    })),
                });
            }
            None => {}
        }
        merged.metric = Some(Metric {
            on: false,
            endpoints: None,
        });
        merged
    }

    /// Serves one Telemetry stream until the client closes it (or sends garbage).
    pub async fn telemetry(
        self: Arc<Self>,
        caller: Caller,
        mut inbound: Streaming<TelemetryCommand>,
        outbound: Outbound,
    ) {
        loop {
            let command = match inbound.message().await {
                Ok(Some(command)) => command,
                Ok(None) => return,
                Err(failure) => {
                    debug!(client = %caller.session.client_id, %failure, "telemetry stream ended");
                    return;
                }
            };
            caller.session.touch(tidemark_remoting::now_ms());
            // Answers to commands Tidemark never sends (stack traces, message verification)
            // need nothing.
            let Some(Command::Settings(settings)) = command.command else {
                continue;
            };
            if settings.pub_sub.is_none() {
                let _ = outbound
                    .send(Err(tonic::Status::invalid_argument(
                        "settings carry neither publishing nor subscription",
                    )))
                    .await;
                return;
            }
            caller.session.set_settings(settings.clone());
            caller.session.set_telemetry(outbound.clone());
            let _ = self.register(&caller, &settings).await;
            if matches!(settings.pub_sub, Some(PubSub::Publishing(_))) {
                // Other brokers' check-backs for these topics must find this gateway now.
                self.register_producers_elsewhere().await;
            }
            let reply = TelemetryCommand {
                status: Some(ok()),
                command: Some(Command::Settings(self.server_settings(&settings))),
            };
            if outbound.send(Ok(reply)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_backoff_is_rocketmqs_schedule() {
        assert_eq!(CONSUMER_BACKOFF_MS.len(), 18);
        assert_eq!(CONSUMER_BACKOFF_MS[0], 1_000);
        assert_eq!(CONSUMER_BACKOFF_MS[17], 7_200_000);
    }
}
