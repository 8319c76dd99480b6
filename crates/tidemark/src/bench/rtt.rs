//! The floor under every synchronous call on this machine: one connection over loopback TCP,
//! one frame out and the same frame back, between two tokio runtimes built as the servers and
//! the benches build theirs — no decoding, no store, nothing in between. A sync sender cannot
//! go faster than this rate, so it is what `produce --producers 1` is read against.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{progress, Stats};

#[derive(Debug, Args, Clone)]
pub struct RttArgs {
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Seconds run first and left out of the figures.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Bytes each way per round trip (a 128 B sync send is about 400 B out and 250 B back).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub size: u32,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: RttArgs) -> anyhow::Result<()> {
    let size = args.size as usize;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the echo port")?;
    let address = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    // The echo side gets a runtime of its own on its own threads, as a server process would.
    let echo = std::thread::Builder::new()
        .name("rtt-echo".into())
        .spawn(move || echo(listener, size))
        .context("starting the echo thread")?;

    let mut socket = tokio::net::TcpStream::connect(address)
        .await
        .context("connecting to the echo port")?;
    socket.set_nodelay(true)?;
    let stats = Arc::new(Stats::new(Duration::from_secs(args.warmup)));
    let reporter = progress(stats.clone(), "round trips");
    let frame = vec![0x5a_u8; size];
    let mut answer = vec![0_u8; size];
    let end = Instant::now() + Duration::from_secs(args.warmup + args.duration);
    let outcome = async {
        while Instant::now() < end {
            let started = Instant::now();
            socket.write_all(&frame).await?;
            socket.read_exact(&mut answer).await?;
            stats.record(size, started.elapsed());
        }
        anyhow::Ok(())
    }
    .await;
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    drop(socket);
    let echoed = echo
        .join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))?;
    outcome.context("round trip")?;
    echoed.context("echo side")?;
    stats.print_summary("rtt", size, args.json, Duration::from_secs(args.duration))
}

/// Answers every `size` bytes with the same bytes until the peer closes.
fn echo(listener: std::net::TcpListener, size: usize) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (mut socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        let mut frame = vec![0_u8; size];
        loop {
            match socket.read_exact(&mut frame).await {
                Ok(_) => socket.write_all(&frame).await?,
                Err(closed) if closed.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(failure) => return Err(failure),
            }
        }
    })
}
