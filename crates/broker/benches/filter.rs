//! What filtering costs per message, against the tags filter in the same run: the consume-queue
//! tags test (no read of the message), one SQL92 selector (decode the stored record's
//! properties and evaluate), and ten SQL92 subscriptions tested on the same message (ten
//! groups reading one queue, each with its own selector).
//!
//! `cargo bench -p tidemark-broker --bench filter` prints ns per message and the ratio to the
//! tags filter. Under `cargo test` it is a short smoke pass.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_broker::filter::{CompiledSelectors, MessageFilter};
use tidemark_protocol::message::{tags_code, MessageRecord, Properties};

/// A 128-byte message with the properties an application sets and the ones the broker adds.
fn records(count: usize) -> Vec<(i64, Bytes)> {
    (0..count)
        .map(|i| {
            let mut properties = Properties::new();
            let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
            properties.insert("TAGS", tag);
            properties.insert("KEYS", format!("order-{i}"));
            properties.insert("UNIQ_KEY", format!("7F0000015B9C{i:020X}"));
            properties.insert("a", i.to_string());
            properties.insert("color", ["red", "green", "blue"][i % 3]);
            properties.insert("price", format!("{}", i as f64 * 1.5));
            if i % 4 != 0 {
                properties.insert("region", format!("eu-{}", i % 3));
            }
            let record = MessageRecord {
                topic: "BenchFilter".into(),
                body: Bytes::from(vec![b'x'; 128]),
                properties,
                ..MessageRecord::default()
            };
            let bytes = record.encode_to_bytes().expect("encodes");
            (tags_code(Some(tag)), bytes)
        })
        .collect()
}

const SELECTORS: [&str; 10] = [
    "a > 500",
    "color = 'red'",
    "color IN ('red', 'blue') AND a < 100",
    "region IS NULL",
    "region <> 'eu-1'",
    "a BETWEEN 100 AND 200",
    "NOT (color = 'blue') AND TAGS = 'TagA'",
    "price > 50.0",
    "region STARTSWITH 'eu' AND a >= 36",
    "a < 10 OR a > 990",
];

/// ns per message of `test` over every record, repeated for `budget`.
fn measure(records: &[(i64, Bytes)], budget: Duration, test: impl Fn(i64, &Bytes) -> usize) -> f64 {
    let started = Instant::now();
    let mut messages = 0u64;
    let mut matched = 0usize;
    while started.elapsed() < budget {
        for (code, record) in records {
            matched += test(*code, record);
        }
        messages += records.len() as u64;
    }
    black_box(matched);
    started.elapsed().as_nanos() as f64 / messages as f64
}

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let budget = if smoke {
        Duration::from_millis(20)
    } else {
        Duration::from_secs(3)
    };
    let records = records(1_000);
    let selectors = CompiledSelectors::default();
    let tags = match selectors.filter(Some("TAG"), "TagA || TagC", true) {
        Ok(filter) => filter,
        Err(refused) => panic!("{refused:?}"),
    };
    let sql: Vec<MessageFilter> = SELECTORS
        .iter()
        .map(|text| match selectors.filter(Some("SQL92"), text, true) {
            Ok(filter) => filter,
            Err(refused) => panic!("{text}: {refused:?}"),
        })
        .collect();
    let baseline = measure(&records, budget, |code, _| {
        usize::from(tags.matches_code(code))
    });
    let one = measure(&records, budget, |code, record| {
        usize::from(sql[0].matches_code(code) && sql[0].matches_record(record))
    });
    let ten = measure(&records, budget, |code, record| {
        sql.iter()
            .filter(|filter| filter.matches_code(code) && filter.matches_record(record))
            .count()
    });
    println!("filter cost per message (1,000 messages of 128 B with 7 properties)");
    println!("  tags (consume-queue code)   {baseline:>9.1} ns   1.0x");
    println!(
        "  SQL92, 1 subscription       {one:>9.1} ns  {:>5.1}x",
        one / baseline
    );
    println!(
        "  SQL92, 10 subscriptions     {ten:>9.1} ns  {:>5.1}x",
        ten / baseline
    );
}
