//! Typed custom headers, one struct per Java header class, all declared with
//! [`command_header!`](crate::command_header) so they share one ext-field conversion.
//!
//! Requests with no header (HEART_BEAT, LOCK/UNLOCK_BATCH_MQ, GET_ALL_CONSUMER_OFFSET,
//! GET_ALL_DELAY_OFFSET, GET_BROKER_RUNTIME_INFO, GET_BROKER_CLUSTER_INFO,
//! GET_ALL_TOPIC_LIST_FROM_NAMESERVER) carry their data in the body or not at all. 5.x
//! clients add routing keys (`bname`, `ns`, `nsd`, `oway`, `lo`) to many requests; the ones
//! Tidemark uses are declared, the rest are ignored as Java brokers ignore them.

mod admin;
mod client;
mod controller;
mod namesrv;
mod offset;
mod pop;
mod pull;
mod send;

pub use admin::*;
pub use client::*;
pub use controller::*;
pub use namesrv::*;
pub use offset::*;
pub use pop::*;
pub use pull::*;
pub use send::*;
