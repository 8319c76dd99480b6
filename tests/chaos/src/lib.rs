//! Tidemark's randomized fault harness: a cluster of controllers, name servers and broker sets
//! with a slave each, every process in a network namespace of its own; workloads that record
//! every operation; seeded nemeses that kill, pause, partition, slow and lose packets, fill disks
//! and step clocks; and a checker that reads the whole history for anomalies. `tidemark-chaos run` is the command;
//! CI runs a short fixed-seed run (`tests/seeded.rs`).

pub mod checker;
pub mod clocks;
pub mod cluster;
pub mod disks;
pub mod go_app;
pub mod history;
pub mod nemesis;
pub mod pop_workload;
pub mod report;
pub mod run;
pub mod tx_workload;
pub mod workload;
