//! The properties string: `name \u{1} value \u{2}` repeated.

/// Separates a property's name from its value.
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
/// Separates properties. Java 4.9 writes none after the last property; 5.x writes one. The
/// parser accepts both.
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Reserved property names (RocketMQ `MessageConst`).
pub mod property {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const WAIT_STORE_MSG_OK: &str = "WAIT";
    pub const DELAY_TIME_LEVEL: &str = "DELAY";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QUEUE_ID: &str = "REAL_QID";
    pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    /// Seconds after its store time before a half message is first checked back (a producer's
    /// own transaction timeout; the broker's `transactionTimeOut` otherwise).
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    /// How often a half message was checked back.
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    pub const UNIQ_CLIENT_MESSAGE_ID_KEYIDX: &str = "UNIQ_KEY";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
    pub const CLUSTER: &str = "CLUSTER";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_SWITCH: &str = "TRACE_ON";
    /// RocketMQ 5 timer messages: deliver at this epoch time in ms.
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    /// RocketMQ 5 timer messages: deliver this many seconds after the broker receives it.
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    /// RocketMQ 5 timer messages: deliver this many ms after the broker receives it.
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// The broker's resolved delivery time of a timer message (epoch ms).
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    /// When the broker took a timer message in (epoch ms), added at delivery.
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    /// When the broker delivered a timer message (epoch ms), added at delivery.
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    /// RocketMQ 5.3's recall: a timer message carrying this (`<topic>+<unique key>`) cancels
    /// the timer message it names instead of being delivered.
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
    /// RocketMQ 5: how many times the broker's timer wheel stored a long-delayed timer message
    /// again to carry it forward (on those copies only).
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    /// A popped message's receipt, set by the client from the pop response.
    pub const POP_CK: &str = "POP_CK";
    /// When a message was first popped (epoch ms), kept on its retry copies.
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
    /// Tidemark: on a POP retry or dead-letter copy, the message it copies
    /// (`<group> <topic> <queue id> <queue offset>`), so a copy made just before a crash is
    /// recognised after it rather than made twice.
    pub const POP_ORIGIN: &str = "TIDEMARK_POP_ORIGIN";
    /// Separates keys inside `KEYS`.
    pub const KEY_SEPARATOR: &str = " ";
}

/// The value of one property in an encoded properties string, found without parsing the rest
/// (the store needs `TAGS` of every append).
pub fn find_property<'a>(encoded: &'a str, name: &str) -> Option<&'a str> {
    encoded.split(PROPERTY_SEPARATOR).find_map(|segment| {
        let (key, value) = segment.split_once(NAME_VALUE_SEPARATOR)?;
        (key == name && !value.is_empty()).then_some(value)
    })
}

/// A message's properties in their string order.
///
/// Java keeps a `HashMap`; keeping the decoded order lets a record be re-encoded byte for byte.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    entries: Vec<(String, String)>,
}

impl Properties {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// Parses a properties string as `MessageDecoder.string2messageProperties` does: a
    /// segment is kept only when it has a non-empty name and a non-empty value.
    pub fn parse(text: &str) -> Self {
        // Sized up front: a received message's properties are parsed on every delivery.
        let mut properties =
            Properties::with_capacity(text.matches(PROPERTY_SEPARATOR).count() + 1);
        for segment in text.split(PROPERTY_SEPARATOR) {
            if let Some((name, value)) = segment.split_once(NAME_VALUE_SEPARATOR) {
                if !name.is_empty() && !value.is_empty() {
                    properties.insert(name, value);
                }
            }
        }
        properties
    }

    /// The properties string as Java 4.9's `messageProperties2String` writes it: no separator
    /// after the last property.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(
            self.entries
                .iter()
                .map(|(name, value)| name.len() + value.len() + 2)
                .sum(),
        );
        for (index, (name, value)) in self.entries.iter().enumerate() {
            if index > 0 {
                out.push(PROPERTY_SEPARATOR);
            }
            out.push_str(name);
            out.push(NAME_VALUE_SEPARATOR);
            out.push_str(value);
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Sets a property, replacing an earlier value.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(key, _)| *key == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<String> {
        let index = self.entries.iter().position(|(key, _)| key == name)?;
        Some(self.entries.remove(index).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// Every property, moved out.
    pub fn into_entries(self) -> impl Iterator<Item = (String, String)> {
        self.entries.into_iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `TAGS` property.
    pub fn tags(&self) -> Option<&str> {
        self.get(property::TAGS)
    }

    /// The `KEYS` property split on spaces.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.get(property::KEYS)
            .unwrap_or("")
            .split(property::KEY_SEPARATOR)
            .filter(|key| !key.is_empty())
    }

    /// The client-generated unique id (`UNIQ_KEY`).
    pub fn unique_key(&self) -> Option<&str> {
        self.get(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut properties = Properties::new();
        for (name, value) in iter {
            properties.insert(name, value);
        }
        properties
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_follows_java_and_drops_empty_names_and_values() {
        let parsed = Properties::parse(
            "TAGS\u{1}A\u{2}\u{1}x\u{2}EMPTY\u{1}\u{2}KEYS\u{1}k1 k2\u{2}junk\u{2}",
        );
        assert_eq!(
            parsed.iter().collect::<Vec<_>>(),
            vec![("TAGS", "A"), ("KEYS", "k1 k2")]
        );
        assert_eq!(parsed.keys().collect::<Vec<_>>(), vec!["k1", "k2"]);
        assert_eq!(parsed.encode(), "TAGS\u{1}A\u{2}KEYS\u{1}k1 k2");
        assert_eq!(Properties::parse(&parsed.encode()), parsed);
        assert_eq!(find_property(&parsed.encode(), "KEYS"), Some("k1 k2"));
        assert_eq!(find_property(&parsed.encode(), "TAG"), None);
    }
}
