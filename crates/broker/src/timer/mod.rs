//! Timer messages (RocketMQ 5's any-delay messages: `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`,
//! `TIMER_DELAY_MS`). A send resolves the delivery time, stores the message in the timer topic
//! (queue 0) with `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID`, and its consume-queue entry
//! carries the delivery time as its tags code. This service keeps every pending message in a
//! map ordered by delivery time, sleeps until the first is due (or a send wakes it), and stores
//! due messages again in their real topic and queue, in order of delivery time.
//!
//! What was delivered is journaled ([`progress`]); at start the pending set is rebuilt from the
//! timer topic's queue from the low-water mark on, skipping delivered offsets. A message is
//! journaled as delivered after it is stored in its real topic, so a crash in between
//! delivers it twice rather than never (RocketMQ's timer is at-least-once too).
//!
//! Where Tidemark differs: the delivery time is the one asked for, to the millisecond
//! (RocketMQ rounds it down to `timerPrecisionMs`, 1 s, and delivers within about a second).

mod apache;
mod progress;
mod recall;
mod replica;
mod tally;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_protocol::message::{
    properties_of, property, DecodeOptions, MessageRecord, Properties,
};
use tidemark_storage::io::Storage;
use tidemark_storage::journal::{Journal, JournalError, JournalOptions, RecoveryReport, Ticket};
use tidemark_store::{NewMessage, QueueEntry, StoreError, TIMER_TOPIC};
use tokio::sync::Notify;
use tracing::warn;

pub use apache::ApacheCheckpoint;
pub use progress::Delivered;
pub use recall::{RecallFailure, Recalled};
use tally::PendingTopics;
pub use tally::TopicTally;
use tidemark_remoting::now_ms;

use crate::lock_rank::{self, Rank, Ranked};
use crate::message_log::LogHandle;
use crate::progress_record::{ProgressOutbox, STREAM_TIMERS};

/// With nothing due sooner, the service still looks for new timer messages this often (sends
/// wake it at once; this covers anything else that appends to the timer topic).
const IDLE_SCAN: Duration = Duration::from_millis(500);
/// Queue entries read per pass, so a restart with a long backlog delivers while it scans.
const SCAN_PER_PASS_MAX: usize = 20_000;
/// A delivery that failed is tried again this much later.
const RETRY_AFTER_MS: i64 = 1_000;

/// The broker's timer messages: what is pending, by delivery time, and what was delivered.
#[derive(Debug)]
pub struct Timers {
    journal: Journal,
    inner: Mutex<Pending>,
    wake: Arc<Notify>,
    /// Where every delivery journaled is also queued for the replicas (`progress_stream`).
    outbox: Option<Arc<ProgressOutbox>>,
    /// What an Apache RocketMQ broker that ran on this store delivered ([`apache`]).
    apache: Option<ApacheTimers>,
}

/// Apache's timer checkpoint found at start, and where it is.
#[derive(Debug)]
struct ApacheTimers {
    checkpoint: ApacheCheckpoint,
    storage: Arc<dyn Storage>,
    path: PathBuf,
}

#[derive(Debug, Default)]
struct Pending {
    delivered: Delivered,
    /// (delivery time, timer-topic offset) of every message seen and not delivered.
    due: BTreeSet<(i64, i64)>,
    /// The next timer-topic offset not looked at yet.
    scanned: i64,
    /// Whether the last scan reached the end of the timer queue.
    scanned_to_end: bool,
    /// The latest due time of a message delivered (what the hand-back to Apache must pass).
    latest_delivered_due: Option<i64>,
    /// The real topic of each pending message.
    topics: PendingTopics,
}

impl Timers {
    /// Recovers what was delivered from `dir`. Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<(Self, RecoveryReport), JournalError> {
        let (journal, delivered, report) =
            Journal::open(storage, dir, "timers", options, &progress::DeliveredCodec)?;
        let scanned = delivered.low();
        Ok((
            Self {
                journal,
                inner: Mutex::new(Pending {
                    delivered,
                    due: BTreeSet::new(),
                    scanned,
                    scanned_to_end: false,
                    latest_delivered_due: None,
                    topics: PendingTopics::default(),
                }),
                wake: Arc::default(),
                outbox: None,
                apache: None,
            },
            report,
        ))
    }

    /// Takes what Apache RocketMQ's `config/timercheck` says it delivered: timer messages an
    /// Apache broker took in from this store's timer queue and delivered are not delivered
    /// again.
    pub fn set_apache_checkpoint(
        &mut self,
        storage: Arc<dyn Storage>,
        path: &Path,
        checkpoint: Option<ApacheCheckpoint>,
    ) {
        self.apache = checkpoint.map(|checkpoint| ApacheTimers {
            checkpoint,
            storage,
            path: path.to_path_buf(),
        });
    }

    fn lock(&self) -> Ranked<'_, Pending> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// What wakes the service, for the message log to hold: a timer message it stores wakes
    /// the service (to look at it now rather than at the next idle scan) without the log
    /// knowing the table.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Resolves when the waker ([`Timers::waker`]) is next notified (or at once if it was).
    pub(crate) fn wake_notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Messages waiting for their delivery time (as far as the service has scanned).
    pub fn pending(&self) -> usize {
        self.lock().due.len()
    }

    /// The next timer-queue offset the service has not looked at: entries from here to the
    /// queue's end are timer messages not taken in yet.
    pub fn scanned_up_to(&self) -> i64 {
        self.lock().scanned
    }

    /// Pending messages whose delivery time is `now` or earlier (due, not delivered yet).
    pub fn due_by(&self, now: i64) -> usize {
        self.lock().due.range(..(now, i64::MAX)).count()
    }

    /// Each real topic's pending timer messages and its entered and delivered counts.
    pub fn topic_tallies(&self) -> BTreeMap<String, TopicTally> {
        self.lock().topics.tallies()
    }

    /// Pending messages due within each of `bounds_ms` from `now` (cumulative: a message due
    /// in 3 s counts for the 5 s bound and every larger one).
    pub fn due_within(&self, now: i64, bounds_ms: &[i64]) -> Vec<usize> {
        let inner = self.lock();
        bounds_ms
            .iter()
            .map(|bound| inner.due.range(..(now + bound, i64::MAX)).count())
            .collect()
    }

    /// The earliest delivery time pending.
    pub fn next_due(&self) -> Option<i64> {
        self.lock().due.first().map(|(due, _)| *due)
    }

    /// Records a delivery (journaled under the lock, so the journal's order is the table's).
    fn mark_delivered(&self, offset: i64, delivered: bool) {
        let mut inner = self.lock();
        inner.topics.remove(offset, delivered);
        if let Err(failure) = self.settle(&mut inner, offset) {
            warn!(%failure, offset, "timer delivery not journaled; it may be delivered again after a restart");
        }
    }

    /// Marks `offset` as needing no delivery any more: journaled and queued for the replicas
    /// while the caller holds the table's lock. The journal's ticket, or `None` when it was
    /// settled already.
    fn settle(&self, inner: &mut Pending, offset: i64) -> Result<Option<Ticket>, JournalError> {
        if !inner.delivered.insert(offset) {
            return Ok(None);
        }
        let record = progress::delivered_record(offset);
        if let Some(outbox) = &self.outbox {
            outbox.push(STREAM_TIMERS, record.clone());
        }
        self.journal.append(&record).map(Some)
    }

    /// Compacts the journal when due. Blocking.
    pub fn compact_if_due(&self) -> Result<bool, JournalError> {
        if !self.journal.compaction_due() {
            return Ok(false);
        }
        self.journal.compact(|cut| {
            let inner = self.lock();
            cut.cut();
            use tidemark_storage::journal::JournalCodec;
            progress::DeliveredCodec.snapshot(&inner.delivered)
        })?;
        Ok(true)
    }

    /// Makes every delivery journaled so far durable and stops the journal; hands the timer
    /// messages back to Apache's checkpoint if one was found at start. Blocking.
    pub fn close(&self) {
        self.journal.close();
        self.hand_back_to_apache(now_ms());
    }

    /// Moves Apache's `lastReadTimeMs` up to what was delivered here ([`apache`]). Only after
    /// a scan reached the end of the queue: an entry not looked at may be due before it.
    fn hand_back_to_apache(&self, now: i64) {
        let Some(apache) = &self.apache else {
            return;
        };
        let read_time = {
            let inner = self.lock();
            if !inner.scanned_to_end {
                return;
            }
            apache::hand_back_read_time(
                inner.due.first().map(|(due, _)| *due),
                inner.latest_delivered_due,
                now,
            )
        };
        if read_time <= apache.checkpoint.last_read_time_ms {
            return;
        }
        // Not ahead of the clock (at most one slot): see `hand_back_read_time`.
        if read_time > now {
            std::thread::sleep(std::time::Duration::from_millis((read_time - now) as u64));
        }
        if let Err(failure) =
            apache::write_read_time(apache.storage.as_ref(), &apache.path, read_time)
        {
            warn!(%failure, file = %apache.path.display(), "Apache RocketMQ's timer checkpoint not updated; an Apache broker started on this store may deliver again timer messages Tidemark delivered");
        }
    }
}

/// The message to store in the real topic once the timer message `record` is due.
pub fn delivery(record: &MessageRecord, now: i64) -> Option<NewMessage> {
    crate::schedule::to_real_topic(record, |properties| {
        properties.remove(property::REAL_TOPIC);
        properties.remove(property::REAL_QUEUE_ID);
        properties.insert(
            property::TIMER_ENQUEUE_MS,
            record.store_timestamp.to_string(),
        );
        properties.insert(property::TIMER_DEQUEUE_MS, now.to_string());
    })
}

/// Takes in the timer topic's entries not seen yet (at most [`SCAN_PER_PASS_MAX`]).
fn scan(log: &LogHandle, timers: &Timers) {
    let floor = log.log().min_offset(TIMER_TOPIC, 0);
    let end = log.log().max_offset(TIMER_TOPIC, 0);
    let mut next = {
        let mut inner = timers.lock();
        // Entries retention removed are gone; they count as delivered.
        inner.delivered.raise_low(floor);
        inner.scanned = inner.scanned.max(inner.delivered.low()).max(floor);
        inner.scanned
    };
    let mut found = Vec::new();
    let mut settled = Vec::new();
    let mut markers = Vec::new();
    let mut read = 0;
    while next < end && read < SCAN_PER_PASS_MAX {
        next = timers.lock().delivered.next_undelivered(next);
        if next >= end {
            break;
        }
        let (due, stored_at) = match log.log().queue_entry(TIMER_TOPIC, 0, next) {
            Ok(Some(entry)) if !entry.is_hole() => {
                (due_time(log, timers, next, entry), entry.commit_log_offset)
            }
            Ok(Some(_)) => (Ok(Found::Settled), 0),
            Ok(None) => break,
            Err(failure) => (Err(failure), 0),
        };
        match due {
            Ok(Found::Due(due)) => found.push((due, next, real_topic(log, stored_at))),
            Ok(Found::Settled) => settled.push(next),
            Ok(Found::RecallMarker { due, topic, id }) => {
                settled.push(next);
                markers.push((due, topic, id));
            }
            Err(failure) => {
                warn!(%failure, offset = next, "timer queue unreadable; will retry");
                break;
            }
        }
        next += 1;
        read += 1;
    }
    for offset in settled {
        timers.mark_delivered(offset, false);
    }
    let mut inner = timers.lock();
    for (due, offset, topic) in found {
        if !inner.delivered.contains(offset) {
            inner.due.insert((due, offset));
            if let Some(topic) = topic {
                inner.topics.add(offset, &topic);
            }
        }
    }
    inner.scanned = inner.scanned.max(next);
    inner.scanned_to_end = next >= end;
    drop(inner);
    // Written after the message they recall, so that one is pending by now (or was delivered
    // by the Apache broker, or is gone with retention).
    for (due, topic, id) in markers {
        if let Err(failure) = timers.cancel_named(log, &topic, &id, due) {
            warn!(%failure, %topic, %id, "Apache recall marker not applied; the message it names may be delivered");
        }
    }
}

/// What a timer-queue entry is to the service.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// A message due then.
    Due(i64),
    /// Nothing to deliver: delivered by an Apache broker on this store, or gone.
    Settled,
    /// An Apache broker's recall marker (5.3.2+): never delivered itself; it cancels `topic`'s
    /// message `id` due at `due` (its slot's start).
    RecallMarker { due: i64, topic: String, id: String },
}

/// The real topic of the timer message stored at commit-log offset `stored_at`, for the
/// per-topic figures; `None` when it cannot be read (it is then pending under no topic).
fn real_topic(log: &LogHandle, stored_at: i64) -> Option<String> {
    let bytes = log.log().read_record(stored_at as u64).ok()??;
    let properties = Properties::parse(properties_of(&bytes)?);
    properties.get(property::REAL_TOPIC).map(str::to_owned)
}

/// What the timer-queue entry at `offset` is: due when, needing no delivery (an Apache broker
/// that ran on this store delivered it), or an Apache recall marker.
fn due_time(
    log: &LogHandle,
    timers: &Timers,
    offset: i64,
    entry: QueueEntry,
) -> Result<Found, StoreError> {
    // The tags code is the due time only in a store no Apache broker ran on: Apache's queue
    // entries hold the tags' hash, and its TIMER_OUT_MS (which a rebuilt entry holds) is
    // rounded down to its slot.
    let (out_ms, due) = if timers.apache.is_none() && apache::tags_code_is_due_time(entry.tags_code)
    {
        (entry.tags_code, entry.tags_code)
    } else {
        let Some(bytes) = log.log().read_record(entry.commit_log_offset as u64)? else {
            // Gone from the log: delivery finds nothing and counts it done.
            return Ok(Found::Due(0));
        };
        let Ok((record, _)) = MessageRecord::decode(&bytes, 0, DecodeOptions::default()) else {
            return Ok(Found::Due(0));
        };
        if let Some(marker) = apache::recall_marker(&record) {
            return Ok(marker);
        }
        match apache::timing(&record) {
            Some(timing) => timing,
            None => return Ok(Found::Settled),
        }
    };
    let delivered = timers
        .apache
        .as_ref()
        .is_some_and(|apache| apache.checkpoint.delivered(offset, out_ms));
    Ok(if delivered {
        Found::Settled
    } else {
        Found::Due(due)
    })
}

/// Stores every due message in its real topic; returns how many.
pub fn deliver_due(log: &LogHandle, timers: &Timers, now: i64) -> usize {
    let mut delivered = 0;
    loop {
        let next = {
            let mut inner = timers.lock();
            match inner.due.first().copied() {
                Some((due, offset)) if due <= now => {
                    inner.due.remove(&(due, offset));
                    inner.latest_delivered_due = inner.latest_delivered_due.max(Some(due));
                    Some((due, offset))
                }
                _ => None,
            }
        };
        let Some((due, offset)) = next else {
            return delivered;
        };
        let record = log
            .log()
            .queue_entry(TIMER_TOPIC, 0, offset)
            .and_then(|entry| match entry {
                Some(entry) => log.log().read_record(entry.commit_log_offset as u64),
                None => Ok(None),
            });
        let message = match record {
            Ok(Some(bytes)) => MessageRecord::decode(&bytes, 0, DecodeOptions::default())
                .ok()
                .and_then(|(record, _)| delivery(&record, now)),
            Ok(None) => None,
            Err(failure) => {
                warn!(%failure, offset, "timer message unreadable; will retry");
                timers
                    .lock()
                    .due
                    .insert((due.max(now + RETRY_AFTER_MS), offset));
                return delivered;
            }
        };
        let Some(message) = message else {
            warn!(
                offset,
                "timer message without a real topic, or gone; skipped"
            );
            timers.mark_delivered(offset, false);
            continue;
        };
        if let Err(failure) = log.log().deliver_blocking(&message) {
            warn!(%failure, offset, topic = %message.topic, "timer message not delivered; will retry");
            timers.lock().due.insert((now + RETRY_AFTER_MS, offset));
            return delivered;
        }
        timers.mark_delivered(offset, true);
        delivered += 1;
    }
}

/// The timer service of a master: scan, deliver what is due, sleep until the next delivery
/// time, a send's wake-up, or the idle scan.
pub(crate) async fn run(log: LogHandle, timers: Arc<Timers>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let pass = log.clone();
        let table = timers.clone();
        let master = !log.role().is_slave();
        // Store reads and appends may block (SYNC_FLUSH): keep them off the async workers.
        let _ = tokio::task::spawn_blocking(move || {
            if !master {
                // In controller mode a master may become a slave: its copy is the master's job.
                return;
            }
            scan(&pass, &table);
            deliver_due(&pass, &table, now_ms());
            if let Err(failure) = table.compact_if_due() {
                warn!(%failure, "timer journal not compacted; will retry");
            }
        })
        .await;
        let wait = match timers.next_due() {
            Some(due) => {
                Duration::from_millis((due - now_ms()).clamp(0, IDLE_SCAN.as_millis() as i64) as u64)
            }
            None => IDLE_SCAN,
        };
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
            _ = timers.wake_notified() => {}
        }
    }
}
