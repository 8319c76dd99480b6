//! The broker's in-process tests: a name server and broker on loopback ports, driven by raw requests.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test broker -- <module>::`.

mod common;

mod admin_lists;
mod admin_queries;
mod bad_input;
mod broker_config;
mod cleanup;
mod damaged_files;
mod dead_letters;
mod due_messages;
mod lock_map;
mod module_circles;
mod offset_journal;
mod offsets_model;
mod pop;
mod progress_history;
mod progress_plan;
mod recall;
mod registration;
mod retry_and_delay;
mod rewinds;
mod runtime_info;
mod send_and_pull;
mod sql92;
mod stale_subscription;
mod timers;
mod trace;
mod transaction;
