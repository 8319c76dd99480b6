//! Which master epoch wrote which part of the commit log (RocketMQ 5's `EpochFileCache`): one
//! entry per epoch, `epoch → first offset written in it`; an epoch ends where the next begins,
//! the last one at the log's end. Two replicas' histories tell how much of their logs is the
//! same ([`consistent_point`]): a returning master cuts its log there before it follows the new
//! one, so nothing it wrote that the others never had survives as a divergent tail.
//!
//! Invariants (checked by [`EpochHistory::begin`]): epochs strictly rise and start offsets
//! never fall along the history. Kept in one small file replaced atomically (`epoch start` per
//! line).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidemark_storage::atomic_file;
use tidemark_storage::io::Storage;

use crate::error::StoreError;

/// One epoch of a history; `end_offset` is where the next epoch starts, or the log's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochSpan {
    pub epoch: i32,
    pub start_offset: i64,
    pub end_offset: i64,
}

/// The epoch file of one store. Cheap to share; every change is written before it returns.
#[derive(Debug)]
pub struct EpochHistory {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    /// `(epoch, start offset)`, epochs ascending.
    entries: Mutex<Vec<(i32, i64)>>,
}

fn parse(bytes: &[u8]) -> Result<Vec<(i32, i64)>, String> {
    let text = std::str::from_utf8(bytes).map_err(|error| error.to_string())?;
    let mut entries: Vec<(i32, i64)> = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let (Some(epoch), Some(start), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!("line {line:?} is not `epoch start`"));
        };
        let epoch: i32 = epoch
            .parse()
            .map_err(|_| format!("line {line:?}: bad epoch"))?;
        let start: i64 = start
            .parse()
            .map_err(|_| format!("line {line:?}: bad offset"))?;
        if let Some((last_epoch, last_start)) = entries.last() {
            if epoch <= *last_epoch || start < *last_start {
                return Err(format!(
                    "line {line:?} does not follow epoch {last_epoch} at {last_start}"
                ));
            }
        }
        entries.push((epoch, start));
    }
    Ok(entries)
}

fn render(entries: &[(i32, i64)]) -> Vec<u8> {
    entries
        .iter()
        .map(|(epoch, start)| format!("{epoch} {start}\n"))
        .collect::<String>()
        .into_bytes()
}

fn spans(entries: &[(i32, i64)], log_end: i64) -> Vec<EpochSpan> {
    entries
        .iter()
        .enumerate()
        .map(|(index, (epoch, start))| EpochSpan {
            epoch: *epoch,
            start_offset: *start,
            end_offset: entries
                .get(index + 1)
                .map_or(log_end, |(_, next_start)| *next_start),
        })
        .collect()
}

impl EpochHistory {
    /// Loads `path` (a missing file is an empty history). Blocking.
    pub fn open(storage: Arc<dyn Storage>, path: PathBuf) -> Result<EpochHistory, StoreError> {
        let entries = atomic_file::load(storage.as_ref(), &path, parse)
            .map_err(|error| StoreError::Unrecoverable {
                reason: format!("epoch file: {error}"),
            })?
            .unwrap_or_default();
        Ok(EpochHistory {
            storage,
            path,
            entries: Mutex::new(entries),
        })
    }

    fn entries(&self) -> MutexGuard<'_, Vec<(i32, i64)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, entries: &[(i32, i64)]) -> Result<(), StoreError> {
        atomic_file::write_atomically(self.storage.as_ref(), &self.path, &render(entries), true)
            .map_err(|error| StoreError::Unrecoverable {
                reason: format!("writing the epoch file {}: {error}", self.path.display()),
            })
    }

    /// The history with each epoch's end, the last ending at `log_end`.
    pub fn spans(&self, log_end: i64) -> Vec<EpochSpan> {
        spans(&self.entries(), log_end)
    }

    pub fn last_epoch(&self) -> Option<i32> {
        self.entries().last().map(|(epoch, _)| *epoch)
    }

    /// Records that this broker writes as master in `epoch` from `start_offset` (its log's end
    /// when it became master). A previous epoch that wrote nothing here (same start) is
    /// replaced: it owns no bytes of this log. Refused when `epoch` is not above the last one or
    /// `start_offset` is below the last start.
    pub fn begin(&self, epoch: i32, start_offset: i64) -> Result<(), StoreError> {
        let mut entries = self.entries();
        let mut next = entries.clone();
        match next.last() {
            Some((last_epoch, last_start))
                if epoch <= *last_epoch || start_offset < *last_start =>
            {
                return Err(StoreError::Unrecoverable {
                    reason: format!(
                        "epoch {epoch} at {start_offset} cannot follow epoch {last_epoch} at {last_start}"
                    ),
                });
            }
            Some((_, last_start)) if *last_start == start_offset => {
                next.pop();
            }
            _ => {}
        }
        next.push((epoch, start_offset));
        self.write(&next)?;
        *entries = next;
        Ok(())
    }

    /// After the log was cut at `offset`: epochs that start at or past it go.
    pub fn truncate_from(&self, offset: i64) -> Result<(), StoreError> {
        let mut entries = self.entries();
        if entries.iter().all(|(_, start)| *start < offset) {
            return Ok(());
        }
        let next: Vec<(i32, i64)> = entries
            .iter()
            .copied()
            .filter(|(_, start)| *start < offset)
            .collect();
        self.write(&next)?;
        *entries = next;
        Ok(())
    }

    /// Replaces the whole history (a slave copying its master's, up to where its log ends).
    pub fn replace(&self, spans: &[EpochSpan]) -> Result<(), StoreError> {
        let next: Vec<(i32, i64)> = spans
            .iter()
            .map(|span| (span.epoch, span.start_offset))
            .collect();
        parse(&render(&next)).map_err(|reason| StoreError::Unrecoverable {
            reason: format!("epoch history to copy: {reason}"),
        })?;
        let mut entries = self.entries();
        self.write(&next)?;
        *entries = next;
        Ok(())
    }
}

/// How far `local`'s log agrees with `remote`'s: the end of the newest epoch both started at
/// the same offset, cut at whichever replica holds less of it. `None` when they share no epoch
/// (the local log must be replaced from its start).
pub fn consistent_point(local: &[EpochSpan], remote: &[EpochSpan]) -> Option<i64> {
    local.iter().rev().find_map(|mine| {
        remote
            .iter()
            .find(|theirs| theirs.epoch == mine.epoch && theirs.start_offset == mine.start_offset)
            .map(|theirs| mine.end_offset.min(theirs.end_offset))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_storage::sim::SimStorage;

    fn history(storage: &SimStorage) -> EpochHistory {
        EpochHistory::open(Arc::new(storage.clone()), PathBuf::from("/store/epochs")).expect("open")
    }

    #[test]
    fn epochs_rise_an_empty_one_is_replaced_and_the_file_keeps_them() {
        let storage = SimStorage::new();
        let epochs = history(&storage);
        epochs.begin(1, 0).expect("first");
        epochs.begin(2, 500).expect("second");
        assert!(epochs.begin(2, 900).is_err(), "an epoch cannot repeat");
        assert!(epochs.begin(3, 400).is_err(), "a start cannot go back");
        epochs.begin(3, 500).expect("epoch 2 wrote nothing here");
        assert_eq!(
            epochs.spans(800),
            vec![
                EpochSpan {
                    epoch: 1,
                    start_offset: 0,
                    end_offset: 500
                },
                EpochSpan {
                    epoch: 3,
                    start_offset: 500,
                    end_offset: 800
                },
            ]
        );
        let reopened = history(&storage);
        assert_eq!(reopened.spans(800), epochs.spans(800));
        reopened.truncate_from(500).expect("truncate");
        assert_eq!(reopened.last_epoch(), Some(1));
        assert_eq!(history(&storage).last_epoch(), Some(1));
    }

    #[test]
    fn the_consistent_point_is_where_the_newest_shared_epoch_ends_on_the_shorter_side() {
        let span = |epoch, start_offset, end_offset| EpochSpan {
            epoch,
            start_offset,
            end_offset,
        };
        // The old master wrote 1000..1200 in epoch 2 that its slave never got; the slave became
        // master in epoch 3 at 1000.
        let old_master = [span(1, 0, 600), span(2, 600, 1200)];
        let new_master = [span(1, 0, 600), span(2, 600, 1000), span(3, 1000, 1500)];
        assert_eq!(consistent_point(&old_master, &new_master), Some(1000));
        // A slave that is simply behind keeps everything it has.
        let behind = [span(1, 0, 600), span(2, 600, 800)];
        assert_eq!(consistent_point(&behind, &new_master), Some(800));
        // Nothing shared: start over.
        assert_eq!(consistent_point(&[span(7, 0, 10)], &new_master), None);
        // An epoch started at different offsets is not shared.
        assert_eq!(
            consistent_point(&[span(1, 0, 600), span(2, 700, 900)], &new_master),
            Some(600)
        );
    }
}
