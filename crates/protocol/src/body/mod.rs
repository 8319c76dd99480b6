//! JSON bodies, declared with [`json_object!`](crate::json_object) in fastjson's property order.
//!
//! Encode with [`JsonBody::to_json_bytes`](crate::json::JsonBody::to_json_bytes) (fastjson style,
//! raw non-string keys) or `to_json_bytes_with(WriteOptions::STANDARD)`; decode with
//! `from_json_bytes`, which accepts both key styles.

mod admin;
mod controller;
mod heartbeat;
mod offsets;
mod pop;
mod route;
mod running_info;
mod topic;

pub use admin::*;
pub use controller::*;
pub use heartbeat::*;
pub use offsets::*;
pub use pop::*;
pub use route::*;
pub use running_info::*;
pub use topic::*;
