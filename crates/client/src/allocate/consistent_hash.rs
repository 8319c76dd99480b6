//! The consistent-hash ring of `AllocateMessageQueueConsistentHash`, bit-compatible with Java's
//! `ConsistentHashRouter` + `MD5Hash` so mixed Java/Rust groups agree on every queue's owner.

use std::collections::BTreeMap;

use md5::{Digest, Md5};
use tidemark_protocol::body::MessageQueue;

/// Consumers placed on a ring of MD5 points, `virtual_nodes` points each.
#[derive(Debug, Clone)]
pub struct ConsistentHashRing<'a> {
    ring: BTreeMap<u32, &'a str>,
}

impl<'a> ConsistentHashRing<'a> {
    pub fn new(consumers: &'a [String], virtual_nodes: usize) -> Self {
        let mut ring = BTreeMap::new();
        for consumer in consumers {
            for index in 0..virtual_nodes {
                // A later point with the same hash replaces the earlier one, as Java's TreeMap.put.
                ring.insert(hash(&format!("{consumer}-{index}")), consumer.as_str());
            }
        }
        Self { ring }
    }

    /// The consumer owning `queue`: the first ring point at or after the queue's hash,
    /// wrapping around to the lowest point.
    pub fn owner_of(&self, queue: &MessageQueue) -> Option<&'a str> {
        let key = format!(
            "MessageQueue [topic={}, brokerName={}, queueId={}]",
            queue.topic, queue.broker_name, queue.queue_id
        );
        let point = hash(&key);
        self.ring
            .range(point..)
            .next()
            .or_else(|| self.ring.iter().next())
            .map(|(_, consumer)| *consumer)
    }
}

/// Java `MD5Hash.hash`: the first four digest bytes, big-endian, as a non-negative number.
fn hash(key: &str) -> u32 {
    let digest = Md5::digest(key.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_the_first_four_md5_bytes_big_endian() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(hash(""), 0xd41d_8cd9);
        // MD5("abc") = 900150983cd24fb0d6963f7d28e17f72
        assert_eq!(hash("abc"), 0x9001_5098);
    }
}
