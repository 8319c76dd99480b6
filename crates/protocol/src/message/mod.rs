//! Messages as RocketMQ stores and ships them: the stored record (commit-log entry and pull
//! body unit), the properties string, batch bodies, message ids, tag hash codes and flags.

mod batch;
mod ids;
mod properties;
mod recall;
mod record;
mod tags;

pub use batch::{decode_batch, encode_batch, BatchEntry};
pub use ids::{
    civil_from_days, days_from_civil, decode_offset_msg_id, encode_offset_msg_id, UniqueIdGenerator,
};
pub use properties::{find_property, property, Properties};
pub use recall::{BadRecallHandle, RecallHandle};
pub use record::{
    body_crc, decode_records, magic_code_of, properties_of, store_timestamp_of, topic_of,
    total_size_of, transaction_fields_of, DecodeOptions, MessageRecord, RecordRef, RecordVersion,
    BLANK_MAGIC_CODE, MAGIC_CODE_V1, MAGIC_CODE_V2, PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
};
pub use tags::{java_string_hash, tags_code, SubscriptionExpression, SUB_ALL};

/// `MessageSysFlag` bits carried in a record's and a send header's `sysFlag`.
pub mod sys_flag {
    /// The body is compressed (zlib unless a 5.x compression type says otherwise).
    pub const COMPRESSED: i32 = 0x1;
    /// Set by the broker for MULTI_TAG topics.
    pub const MULTI_TAGS: i32 = 0x2;
    /// The 2-bit transaction field.
    pub const TRANSACTION_MASK: i32 = 0xC;
    pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
    pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
    pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
    /// The born host is 16 address bytes + port.
    pub const BORNHOST_V6: i32 = 0x10;
    /// The store host is 16 address bytes + port.
    pub const STOREHOST_V6: i32 = 0x20;
    /// 5.x inner batch flags.
    pub const NEED_UNWRAP: i32 = 0x40;
    pub const INNER_BATCH: i32 = 0x80;
    /// The 3-bit 5.x compression type field: 1 LZ4, 2 ZSTD, 3 ZLIB (0 also means zlib).
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
    pub const COMPRESSION_LZ4: i32 = 0x100;
    pub const COMPRESSION_ZSTD: i32 = 0x200;
    pub const COMPRESSION_ZLIB: i32 = 0x300;
}
