//! A group's dead letters and retries, as Tidemark brokers serve them: listed, sent again, and
//! replayed for one original topic (TIDEMARK_GET_DEAD_LETTERS, TIDEMARK_RESEND_DEAD_LETTERS,
//! TIDEMARK_REPLAY_RETRIES). Apache brokers answer none of these and are left out.

use tidemark_protocol::body::{DeadLetterList, ResentMessages};
use tidemark_protocol::headers::{
    GetDeadLettersRequestHeader, ReplayRetriesRequestHeader, ResendDeadLettersRequestHeader,
};
use tidemark_protocol::{RemotingCommand, RequestCode};

use super::Admin;
use crate::error::{ClientError, Result};

/// Which dead letters [`Admin::resend_dead_letters`] sends, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResendRequest {
    pub group: String,
    /// Dead-letter queue offsets (they are each broker's own: give `broker_name`); `None`:
    /// every dead letter, of `topic` if given.
    pub offsets: Option<Vec<i64>>,
    pub topic: Option<String>,
    /// Send them to their original topics instead of back to the group's retry topic.
    pub to_origin: bool,
    /// Only answer what would be sent.
    pub dry_run: bool,
}

impl Admin {
    /// The masters to ask: all, or the one of `broker_name` (an error if none).
    pub(super) async fn masters_named(&self, broker_name: Option<&str>) -> Result<Vec<String>> {
        let masters = self.masters(None).await?;
        if let Some(name) = broker_name {
            if !masters.iter().any(|master| master.broker_name == name) {
                return Err(ClientError::InvalidArgument(format!(
                    "the name server knows no master of broker {name:?}"
                )));
            }
        }
        Ok(masters
            .into_iter()
            .filter(|master| broker_name.is_none_or(|name| name == master.broker_name))
            .map(|master| master.addr)
            .collect())
    }

    /// Up to `max_count` of `group`'s dead letters per broker (of `topic` only, if given), from
    /// dead-letter queue offset `from` (each broker's own: give `broker_name` to page).
    pub async fn dead_letters(
        &self,
        group: &str,
        topic: Option<&str>,
        broker_name: Option<&str>,
        from: Option<i64>,
        max_count: Option<i32>,
    ) -> Result<Vec<DeadLetterList>> {
        let header = GetDeadLettersRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.map(str::to_owned),
            offset: from,
            max_count,
        };
        let addrs = self.masters_named(broker_name).await?;
        self.ask_each(addrs, || {
            RemotingCommand::request_with_header(RequestCode::GetDeadLetters, &header)
        })
        .await
    }

    /// Sends dead letters again (see [`ResendRequest`]); each broker records it in the group's
    /// progress history. With offsets, `broker_name` names the broker they belong to.
    pub async fn resend_dead_letters(
        &self,
        request: &ResendRequest,
        broker_name: Option<&str>,
    ) -> Result<Vec<ResentMessages>> {
        let addrs = self.masters_named(broker_name).await?;
        if request.offsets.is_some() && addrs.len() > 1 {
            return Err(ClientError::InvalidArgument(
                "dead-letter offsets are one broker's own: name the broker".to_owned(),
            ));
        }
        let header = ResendDeadLettersRequestHeader {
            consumer_group: request.group.clone(),
            offsets: request.offsets.as_ref().map(|offsets| {
                offsets
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            topic: request.topic.clone(),
            destination: Some(if request.to_origin { "origin" } else { "retry" }.to_owned()),
            dry_run: Some(request.dry_run),
        };
        self.ask_each(addrs, || {
            RemotingCommand::request_with_header(RequestCode::ResendDeadLetters, &header)
        })
        .await
    }

    /// Puts `group`'s consumed retry messages of original topic `topic`, stored since
    /// `since_ms`, back into its retry topic on every master; the rest of the retry queue is
    /// left alone. With `dry_run` only answers what would be put back.
    pub async fn replay_retries(
        &self,
        group: &str,
        topic: &str,
        since_ms: i64,
        dry_run: bool,
    ) -> Result<Vec<ResentMessages>> {
        let header = ReplayRetriesRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            since_ms,
            dry_run: Some(dry_run),
        };
        let addrs = self.masters_named(None).await?;
        self.ask_each(addrs, || {
            RemotingCommand::request_with_header(RequestCode::ReplayRetries, &header)
        })
        .await
    }
}
