//! The `checkpoint` file: RocketMQ's three timestamps, plus Tidemark's durable offsets.
//!
//! ```text
//!   0 physicMsgTimestamp i64   store time of the last commit-log record known flushed
//!   8 logicsMsgTimestamp i64   same, for consume queues
//!  16 indexMsgTimestamp  i64   (index files; Tidemark writes 0)
//!  64 magic "TDMK" u32 | version u32 | commit_log_durable u64 | consume_queues_durable u64 | crc32 u32
//! ```
//! Java reads only the first 24 bytes (5.x: 40) of the 4 KiB file, so the extension at 64 is
//! invisible to it. The CRC tells a torn checkpoint from a valid one; without a valid extension
//! (a store written by Java, or a torn write) recovery scans conservatively.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::io::{Storage, StorageFile};

/// Size of the checkpoint file, as Java maps it.
pub const CHECKPOINT_FILE_BYTES: usize = 4096;
const EXTENSION_AT: usize = 64;
const EXTENSION_MAGIC: u32 = 0x5444_4D4B; // "TDMK"
const EXTENSION_VERSION: u32 = 1;

/// Offsets up to which data was synced when the checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableOffsets {
    /// Commit-log bytes below this were fsynced.
    pub commit_log: u64,
    /// Every record below this commit-log offset had its consume-queue entry fsynced.
    pub consume_queues: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub physic_msg_timestamp: i64,
    pub logics_msg_timestamp: i64,
    pub index_msg_timestamp: i64,
    pub durable: Option<DurableOffsets>,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; CHECKPOINT_FILE_BYTES];
        out[0..8].copy_from_slice(&self.physic_msg_timestamp.to_be_bytes());
        out[8..16].copy_from_slice(&self.logics_msg_timestamp.to_be_bytes());
        out[16..24].copy_from_slice(&self.index_msg_timestamp.to_be_bytes());
        if let Some(durable) = self.durable {
            let extension = &mut out[EXTENSION_AT..EXTENSION_AT + 28];
            extension[0..4].copy_from_slice(&EXTENSION_MAGIC.to_be_bytes());
            extension[4..8].copy_from_slice(&EXTENSION_VERSION.to_be_bytes());
            extension[8..16].copy_from_slice(&durable.commit_log.to_be_bytes());
            extension[16..24].copy_from_slice(&durable.consume_queues.to_be_bytes());
            let crc = crc32fast::hash(&extension[0..24]);
            extension[24..28].copy_from_slice(&crc.to_be_bytes());
        }
        out
    }

    /// Decodes whatever is there; a short file reads as zeros and a bad extension as absent.
    pub fn decode(bytes: &[u8]) -> Checkpoint {
        let word = |at: usize| -> i64 {
            let mut buffer = [0u8; 8];
            if let Some(source) = bytes.get(at..at + 8) {
                buffer.copy_from_slice(source);
            }
            i64::from_be_bytes(buffer)
        };
        let durable = bytes
            .get(EXTENSION_AT..EXTENSION_AT + 28)
            .and_then(|extension| {
                let u32_at = |at: usize| {
                    u32::from_be_bytes([
                        extension[at],
                        extension[at + 1],
                        extension[at + 2],
                        extension[at + 3],
                    ])
                };
                let u64_at = |at: usize| {
                    let mut buffer = [0u8; 8];
                    buffer.copy_from_slice(&extension[at..at + 8]);
                    u64::from_be_bytes(buffer)
                };
                let valid = u32_at(0) == EXTENSION_MAGIC
                    && u32_at(4) == EXTENSION_VERSION
                    && u32_at(24) == crc32fast::hash(&extension[0..24]);
                valid.then(|| DurableOffsets {
                    commit_log: u64_at(8),
                    consume_queues: u64_at(16),
                })
            });
        Checkpoint {
            physic_msg_timestamp: word(0),
            logics_msg_timestamp: word(8),
            index_msg_timestamp: word(16),
            durable,
        }
    }
}

/// Reads and rewrites the checkpoint file in place.
#[derive(Debug)]
pub struct CheckpointFile {
    path: PathBuf,
    file: Arc<dyn StorageFile>,
}

impl CheckpointFile {
    pub fn open(storage: &dyn Storage, path: PathBuf) -> Result<(CheckpointFile, Checkpoint)> {
        let file = storage
            .open(&path, true)
            .map_err(|error| StoreError::io("open", &path, error))?;
        let length = file
            .length()
            .map_err(|error| StoreError::io("stat", &path, error))? as usize;
        let mut bytes = vec![0u8; length.min(CHECKPOINT_FILE_BYTES)];
        file.read_at(0, &mut bytes)
            .map_err(|error| StoreError::io("read", &path, error))?;
        Ok((CheckpointFile { path, file }, Checkpoint::decode(&bytes)))
    }

    /// Writes and syncs the checkpoint.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<()> {
        self.file
            .write_at(0, &checkpoint.encode())
            .map_err(|error| StoreError::io("write", &self.path, error))?;
        self.file
            .sync()
            .map_err(|error| StoreError::io("sync", &self.path, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_extension_is_ignored() {
        let checkpoint = Checkpoint {
            physic_msg_timestamp: 1,
            logics_msg_timestamp: 2,
            index_msg_timestamp: 0,
            durable: Some(DurableOffsets {
                commit_log: 4096,
                consume_queues: 1000,
            }),
        };
        let mut bytes = checkpoint.encode();
        assert_eq!(bytes.len(), CHECKPOINT_FILE_BYTES);
        assert_eq!(Checkpoint::decode(&bytes), checkpoint);
        bytes[EXTENSION_AT + 9] ^= 1;
        assert_eq!(Checkpoint::decode(&bytes).durable, None);
        assert_eq!(Checkpoint::decode(&bytes).logics_msg_timestamp, 2);
        assert_eq!(Checkpoint::decode(&[]), Checkpoint::default());
    }
}
