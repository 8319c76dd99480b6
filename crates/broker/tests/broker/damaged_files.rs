//! A broker whose progress files are damaged: corrupt offset exports fall back to their backup
//! or refuse to start, and a damaged offset journal keeps every record before the damage.

use crate::common::*;

/// Importing `consumerOffset.json` (no offset journal yet): a corrupt file falls back to its
/// backup; both corrupt refuses to start unless told. Once the journal exists it is the source
/// of truth and the JSON file is only an export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_offset_files_fall_back_or_refuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("config");
    std::fs::create_dir_all(&config_dir).expect("mkdir");
    let file = config_dir.join("consumerOffset.json");
    std::fs::write(&file, b"{\"offsetTable\":{\"T@g\":{0:").expect("torn file");
    std::fs::write(
        config_dir.join("consumerOffset.json.bak"),
        b"{\"offsetTable\":{\"T@g\":{0:42}}}",
    )
    .expect("backup");
    let broker = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("starts from the backup");
    assert_eq!(broker.state().progress.offsets.query("T", "g", 0), Some(42));
    drop(broker);
    std::fs::write(&file, b"garbage").expect("corrupt file");
    std::fs::write(config_dir.join("consumerOffset.json.bak"), b"garbage").expect("corrupt backup");
    let journaled = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("the journal is the truth, not the export");
    assert_eq!(
        journaled.state().progress.offsets.query("T", "g", 0),
        Some(42)
    );
    drop(journaled);
    std::fs::remove_dir_all(config_dir.join("offsetJournal")).expect("no journal");
    let refused = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task");
    let message = refused.expect_err("refuses").to_string();
    assert!(
        message.contains("consumerOffset.json") && message.contains("consumerOffset.json.bak"),
        "{message}"
    );
    let forced = tokio::task::spawn_blocking({
        let config = BrokerConfig {
            ignore_corrupt_config: true,
            ..config(dir.path(), "127.0.0.1:1")
        };
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("the explicit flag overrides");
    assert!(forced.state().progress.offsets.is_empty());
}

/// A journal damaged in the middle (a disk fault): the broker still starts, keeps every commit
/// before the damage and none after, and later commits survive the next restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offset_journal_keeps_what_precedes_the_damage() {
    use tidemark_broker::offsets::Committer;
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || {
        let config = config(dir.path(), "127.0.0.1:1");
        tokio::task::spawn_blocking(move || Broker::open(config))
    };
    let broker = open().await.expect("task").expect("opens");
    for queue_id in 0..3 {
        let (_, journaled) = broker.state().progress.offsets.commit(
            "T",
            "g",
            queue_id,
            10 + i64::from(queue_id),
            100,
            0,
            Committer::Progress,
            None,
        );
        broker
            .state()
            .progress
            .offsets
            .durable(journaled)
            .await
            .expect("durable");
    }
    drop(broker);
    let journal_dir = dir.path().join("config").join("offsetJournal");
    let mut segments: Vec<std::path::PathBuf> = std::fs::read_dir(&journal_dir)
        .expect("journal dir")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "journal"))
        .collect();
    segments.sort();
    let segment = segments.pop().expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    // Header (16) + one record (8 + 29 bytes for "T"/"g"), then a byte inside the second.
    let second_record = 16 + 37;
    assert!(
        bytes.len() >= second_record + 37 * 2,
        "{} bytes",
        bytes.len()
    );
    bytes[second_record + 12] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write");

    let broker = open()
        .await
        .expect("task")
        .expect("starts despite the damage");
    let offsets = &broker.state().progress.offsets;
    assert_eq!(offsets.query("T", "g", 0), Some(10), "before the damage");
    assert_eq!(offsets.query("T", "g", 1), None, "the damaged record");
    assert_eq!(offsets.query("T", "g", 2), None, "after the damage");
    let (_, journaled) = offsets.commit("T", "g", 2, 50, 100, 1, Committer::Progress, None);
    offsets.durable(journaled).await.expect("durable");
    drop(broker);
    let broker = open().await.expect("task").expect("opens");
    assert_eq!(broker.state().progress.offsets.query("T", "g", 0), Some(10));
    assert_eq!(broker.state().progress.offsets.query("T", "g", 2), Some(50));
}
