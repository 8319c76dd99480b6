//! `tidemark`: the one binary: the name server and broker together (`dev`) or apart, operator
//! commands over the client (`admin`), load generators (`bench`), and `inspect`.

mod acl_args;
mod admin;
mod bench;
#[cfg(test)]
mod cli_tests;
mod console;
mod controller;
mod inspect;
mod serve;
mod tls_args;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often a runtime thread going idle may hand its free memory back to the system.
const IDLE_COLLECT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Called as a runtime thread goes idle. mimalloc returns a thread's free pages only when that
/// thread calls into it again, so a worker that freed a burst of memory (connections closed, a
/// backlog read) and then went quiet would keep it for as long as it stays quiet.
#[allow(unsafe_code)] // one FFI call into the allocator this binary already runs on
pub(crate) fn collect_when_idle() {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local!(static LAST_COLLECT: Cell<Option<Instant>> = const { Cell::new(None) });
    LAST_COLLECT.with(|last| {
        let now = Instant::now();
        if last
            .get()
            .is_none_or(|at| now.duration_since(at) >= IDLE_COLLECT_INTERVAL)
        {
            last.set(Some(now));
            // SAFETY: mi_collect takes no pointers and may be called on any thread at any time.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}

/// `tidemark --version`: the release and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TIDEMARK_COMMIT"),
    ")"
);

/// A RocketMQ-compatible message broker, name server and tools.
#[derive(Debug, Parser)]
#[command(name = "tidemark", version = VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Name server and broker in one process, data in a local folder: the quick start.
    Dev(serve::DevArgs),
    /// A name server.
    Namesrv(serve::NamesrvArgs),
    /// A broker.
    Broker(serve::BrokerArgs),
    /// A controller: one of three or five that elect a new master when one dies.
    Controller(controller::ControllerArgs),
    /// The web console on its own, over a whole cluster (found through the name server).
    Console(console::ConsoleArgs),
    /// Decode RocketMQ bytes (a captured frame, a stored message record) and print every field.
    #[command(subcommand)]
    Inspect(inspect::Inspect),
    /// Operator commands: send and consume messages, consumer progress, topic status.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Load generators: produce, consume, end to end.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Shell completions on standard output, e.g. `tidemark completions bash >
    /// /etc/bash_completion.d/tidemark`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Man pages, one per command (`tidemark.1`, `tidemark-admin-consume.1`, …), written to a
    /// folder.
    Man {
        /// Where to write them; created if missing.
        #[arg(long, default_value = "man")]
        dir: std::path::PathBuf,
    },
}

/// Prints the completion script for `shell`. Written whole from a buffer: the generator panics
/// on a write error, and a reader that stops early (`| head`) is no error of ours.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "tidemark",
        &mut script,
    );
    match std::io::stdout().lock().write_all(&script) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
}

/// Writes the man pages of every command to `dir`.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))?;
    Ok(())
}

/// Standard error that never fails: a parent that stops reading our log (Java's
/// `Process.destroy` closes the pipes right after SIGTERM) must not turn a graceful shutdown
/// into a panic half way through persisting.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buffer);
        Ok(buffer.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

fn main() {
    if let Err(error) = run() {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "Error: {}", error_text(&error));
        std::process::exit(1);
    }
}

/// The error and its causes, outermost first, leaving out a cause whose text an outer one already
/// includes (many library errors print their source as part of their own message).
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(|| LogWriter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .on_thread_park(collect_when_idle)
            .build()
    };
    match cli.command {
        Command::Inspect(what) => inspect::run(what, &mut std::io::stdout().lock()),
        Command::Dev(args) => runtime()?.block_on(serve::dev(args)),
        Command::Namesrv(args) => runtime()?.block_on(serve::namesrv(args)),
        Command::Broker(args) => runtime()?.block_on(serve::broker(args)),
        Command::Controller(args) => runtime()?.block_on(controller::run(args)),
        Command::Console(args) => runtime()?.block_on(console::run(args)),
        Command::Admin(command) => runtime()?.block_on(admin::run(command)),
        Command::Bench(command) => runtime()?.block_on(bench::run(command)),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man_pages(&dir),
    }
}
