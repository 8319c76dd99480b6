//! The gRPC gateway's tests: RocketMQ 5's MessagingService served over loopback.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test grpc -- <module>::`.

mod common;

mod acl_history;
mod client_flow;
mod client_status;
mod cluster;
mod http2;
mod malformed_calls;
mod push_release;
mod sql92;
mod threads;
mod tls_ports;
mod transaction;
