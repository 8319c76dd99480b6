//! What a consumer's subscription lets through: tags (checked on the consume queue's tags code,
//! before the message is read) or a SQL92 selector (checked on the message's properties, once
//! read). Selectors are compiled once and shared ([`CompiledSelectors`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tidemark_filter::Sql92Filter;
use tidemark_protocol::message::{find_property, properties_of, SubscriptionExpression};
use tidemark_protocol::ResponseCode;

/// RocketMQ's expression types.
pub const TAG: &str = "TAG";
pub const SQL92: &str = "SQL92";

/// Compiled selectors kept at most; past it the table starts over (a few hundred distinct
/// selectors is already unusual).
const SELECTORS_MAX: usize = 1_024;

/// A subscription's filter.
#[derive(Debug, Clone)]
pub enum MessageFilter {
    Tags(SubscriptionExpression),
    Sql92(Arc<Sql92Filter>),
}

/// Why a subscription cannot be served: the code and remark to answer with.
pub type Refusal = (ResponseCode, String);

impl MessageFilter {
    /// Every message.
    pub fn all() -> Self {
        Self::Tags(SubscriptionExpression::parse("*"))
    }

    /// The consume-queue test (tags code); a selector passes everything here.
    pub fn matches_code(&self, tags_code: i64) -> bool {
        match self {
            Self::Tags(expression) => expression.matches_code(tags_code),
            Self::Sql92(_) => true,
        }
    }

    /// The test on the stored message; tags passed already. Properties are looked up in the
    /// record's encoded string in place (an empty value reads as absent, as RocketMQ decodes
    /// it); a malformed record does not match.
    pub fn matches_record(&self, record: &Bytes) -> bool {
        match self {
            Self::Tags(_) => true,
            Self::Sql92(selector) => match properties_of(record) {
                Some(properties) => selector.matches(|name| find_property(properties, name)),
                None => false,
            },
        }
    }

    pub fn is_sql92(&self) -> bool {
        matches!(self, Self::Sql92(_))
    }
}

/// Compiled SQL92 selectors by text. Owns its lock; hands out shared selectors.
#[derive(Debug, Default)]
pub struct CompiledSelectors {
    inner: Mutex<HashMap<String, Arc<Sql92Filter>>>,
}

impl CompiledSelectors {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Sql92Filter>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The filter for an expression of `kind` (`TAG` when absent). SQL92 needs
    /// `property_filter_enabled`; a selector that does not compile is refused with
    /// SUBSCRIPTION_PARSE_FAILED, as RocketMQ refuses it.
    pub fn filter(
        &self,
        kind: Option<&str>,
        expression: &str,
        property_filter_enabled: bool,
    ) -> Result<MessageFilter, Refusal> {
        let kind = kind.filter(|kind| !kind.is_empty()).unwrap_or(TAG);
        if kind.eq_ignore_ascii_case(TAG) {
            let expression = if expression.is_empty() {
                "*"
            } else {
                expression
            };
            return Ok(MessageFilter::Tags(SubscriptionExpression::parse(
                expression,
            )));
        }
        if !kind.eq_ignore_ascii_case(SQL92) {
            return Err((
                ResponseCode::SubscriptionParseFailed,
                format!("expression type {kind} is not supported"),
            ));
        }
        if !property_filter_enabled {
            return Err((
                ResponseCode::SystemError,
                "The broker does not support consumer to filter message by SQL92 \
                 (enable_property_filter is off)"
                    .to_owned(),
            ));
        }
        if let Some(compiled) = self.lock().get(expression) {
            return Ok(MessageFilter::Sql92(compiled.clone()));
        }
        let compiled = Sql92Filter::compile(expression)
            .map(Arc::new)
            .map_err(|failure| {
                (
                    ResponseCode::SubscriptionParseFailed,
                    format!("{failure} in {expression:?}"),
                )
            })?;
        let mut table = self.lock();
        if table.len() >= SELECTORS_MAX {
            table.clear();
        }
        table.insert(expression.to_owned(), compiled.clone());
        Ok(MessageFilter::Sql92(compiled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_compile_once_and_bad_ones_are_refused() {
        let selectors = CompiledSelectors::default();
        let first = selectors.filter(Some("SQL92"), "a > 1", true);
        let second = selectors.filter(Some("sql92"), "a > 1", true);
        match (first, second) {
            (Ok(MessageFilter::Sql92(a)), Ok(MessageFilter::Sql92(b))) => {
                assert!(Arc::ptr_eq(&a, &b), "compiled once")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            selectors.filter(Some("SQL92"), "a >", true),
            Err((ResponseCode::SubscriptionParseFailed, _))
        ));
        assert!(matches!(
            selectors.filter(Some("SQL92"), "a > 1", false),
            Err((ResponseCode::SystemError, _))
        ));
        assert!(matches!(
            selectors.filter(None, "", true),
            Ok(MessageFilter::Tags(expression)) if expression.is_all()
        ));
        assert!(selectors.filter(Some("CLASS"), "x", true).is_err());
    }
}
