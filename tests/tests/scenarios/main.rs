//! Cross-process scenarios: `tidemark` processes started as users start them, driven by real clients.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test scenarios -- <module>::`.

mod acl;
mod acl_flood;
mod admin_commands;
mod apache_config;
mod bench_cli;
mod client_progress;
mod client_retry;
mod client_scenarios;
mod connection_memory;
mod console;
mod console_cluster;
mod consumer_kill;
mod controller_failover;
mod controllers;
mod data_safety;
mod dead_letters;
mod docs_book;
mod hand_off;
mod master_slave;
mod offset_durability;
mod progress_failover;
mod prometheus;
mod reset_followed;
mod transactions;
mod two_groups;
