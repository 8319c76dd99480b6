//! Scenarios that run by themselves: those that bound how late something happens (a timer's
//! or an invisibility's lateness) and those that load both cores with a cluster of their own
//! (failover across network namespaces, broker-kill storms). Cargo runs test binaries one after
//! another, and every test here holds [`ALONE`] for its whole run, so none of them shares the
//! machine with another test; every other cross-process scenario lives in `scenarios`, whose
//! tests run side by side.

/// Held by every test of this binary from its first line to its last.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

mod failover_hosts;
mod fault_watch;
mod pop;
mod progress_faults;
mod timers;
