//! The remoting layer's tests over loopback, plain and TLS.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test remoting -- <module>::`.

mod loopback;
mod tls;
