//! What a fault run watches while it breaks things: committed offsets that go back, and
//! replicas the controllers list in sync while they lack an acknowledged record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_client::{Admin, ClientConfig};
use tidemark_tests::go_fault_client::GoFaultClient;
use tidemark_tests::replica_set::{view_of, SetView};

/// Per queue id, the committed offset as the master answers now; `None` while none answers.
pub async fn committed(namesrv: &str, group: &str, topic: &str) -> Option<BTreeMap<i32, i64>> {
    let admin = Admin::connect(ClientConfig::new(namesrv)).await.ok()?;
    let stats = admin.consume_stats(group, Some(topic)).await.ok();
    admin.shutdown().await;
    Some(
        stats?
            .offset_table
            .into_iter()
            .filter(|(queue, _)| queue.topic == topic)
            .map(|(queue, line)| (queue.queue_id, line.consumer_offset))
            .collect(),
    )
}

/// The address the name server routes clients to as master.
pub async fn routed_master(namesrv: &str) -> Option<String> {
    let admin = Admin::connect(ClientConfig::new(namesrv)).await.ok()?;
    let masters = admin.masters(None).await.ok();
    admin.shutdown().await;
    Some(masters?.first()?.addr.clone())
}

/// `topic`'s log read whole from the master: each body it holds, and how many times.
pub async fn stored_bodies(namesrv: &str, topic: &str) -> BTreeMap<String, usize> {
    let admin = Admin::connect(ClientConfig::new(namesrv))
        .await
        .expect("admin client");
    let mut stored: BTreeMap<String, usize> = BTreeMap::new();
    admin
        .scan_topic(topic, 0, usize::MAX, |message| {
            *stored
                .entry(String::from_utf8_lossy(&message.body).into_owned())
                .or_default() += 1;
        })
        .await
        .expect("read the topic whole");
    admin.shutdown().await;
    stored
}

/// What the controllers say now, read off the async workers.
pub async fn view(controllers: &str) -> SetView {
    let controllers = controllers.to_owned();
    tokio::task::spawn_blocking(move || view_of(&controllers))
        .await
        .unwrap_or_default()
}

/// A committed offset read lower than an earlier reading of the same queue.
#[derive(Debug, Clone)]
pub struct Regression {
    pub group: String,
    pub queue: i32,
    pub before: i64,
    pub after: i64,
}

/// Reads every `(group, topic)`'s committed offsets every 250 ms until `stop`; returns how many
/// readings it took and every one that went back.
pub async fn watch_offsets(
    namesrv: String,
    groups: Vec<(String, String)>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<Regression>) {
    let mut highest: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut readings = 0;
    let mut regressions = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for (group, topic) in &groups {
            let Some(offsets) = committed(&namesrv, group, topic).await else {
                continue;
            };
            readings += 1;
            for (queue, offset) in offsets {
                let seen = highest.entry((group.clone(), queue)).or_insert(offset);
                if offset < *seen {
                    regressions.push(Regression {
                        group: group.clone(),
                        queue,
                        before: *seen,
                        after: offset,
                    });
                }
                *seen = (*seen).max(offset);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (readings, regressions)
}

/// A replica listed in sync whose log ended at or before an acknowledged record's start.
#[derive(Debug, Clone)]
pub struct Lacking {
    pub addr: String,
    pub log_end: u64,
    pub acknowledged_at: u64,
}

/// Where the acknowledged records of a run start: the furthest one so far, over every client.
#[derive(Debug, Default)]
pub struct Acknowledged {
    rust: AtomicU64,
    go: Mutex<Option<Arc<Mutex<GoFaultClient>>>>,
}

impl Acknowledged {
    /// The Rust producer had a record at `offset` acknowledged.
    pub fn rust_acked(&self, offset: u64) {
        self.rust.fetch_max(offset, Ordering::AcqRel);
    }

    /// Where to read the Go application's acknowledged records from.
    pub fn follow_go(&self, go: Arc<Mutex<GoFaultClient>>) {
        *self.go.lock().expect("lock") = Some(go);
    }

    /// The start of the furthest record acknowledged so far (`None`: none yet).
    fn furthest(&self) -> Option<u64> {
        let go = self.go.lock().expect("lock").clone();
        let go = go.and_then(|go| go.lock().expect("lock").furthest_acked());
        let rust = Some(self.rust.load(Ordering::Acquire)).filter(|offset| *offset > 0);
        rust.max(go)
    }
}

/// Every 500 ms until `stop`: notes the furthest acknowledged record, then asks the
/// controllers which replicas are in sync and each of those (that answers within 1 s) where
/// its log ends. A replica in sync must hold every record acknowledged before the question.
/// Returns how many replica readings it took and every one that lacked something.
pub async fn watch_in_sync(
    namesrv: String,
    controllers: String,
    acknowledged: Arc<Acknowledged>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<Lacking>) {
    let admin = Admin::connect(ClientConfig::new(namesrv.as_str()))
        .await
        .expect("admin client");
    let mut readings = 0;
    let mut lacking = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(acknowledged_at) = acknowledged.furthest() {
            let listed = view(&controllers).await;
            for replica in listed.replicas.iter().filter(|replica| replica.in_sync) {
                let Some(log_end) = log_end(&admin, &replica.addr).await else {
                    continue;
                };
                readings += 1;
                if log_end <= acknowledged_at {
                    lacking.push(Lacking {
                        addr: replica.addr.clone(),
                        log_end,
                        acknowledged_at,
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    admin.shutdown().await;
    (readings, lacking)
}

/// Where the broker at `addr` says its commit log ends; `None` if it does not say within 1 s.
async fn log_end(admin: &Admin, addr: &str) -> Option<u64> {
    let reading = async {
        let info = admin.broker_runtime_info(addr).await.ok()?;
        info.get("commitLogMaxOffset")?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(1), reading)
        .await
        .ok()
        .flatten()
}
