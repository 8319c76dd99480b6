//! The protocol's tests: golden frames, Java fixtures, JSON headers and round trips.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test protocol -- <module>::`.

mod golden;
mod java_fixtures;
mod json_header;
mod roundtrip;
