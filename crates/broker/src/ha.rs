//! Commit-log replication between a master and its slaves on the HA port (`listen_port + 1`),
//! in RocketMQ's wire format (Java `HAService`/`HAConnection`), so a Java slave can follow a
//! Tidemark master and a Tidemark slave a Java master:
//!
//! - the slave connects and reports its commit-log end: 8 bytes, a big-endian i64 — at once,
//!   after every applied frame, and every `ha_send_heartbeat_interval`;
//! - the master streams from the first reported offset: a 12-byte header (physical offset i64,
//!   body size i32) and up to `ha_transfer_batch_size` bytes of raw commit log, never across a
//!   segment end; with nothing to send it sends an empty frame every heartbeat interval;
//! - either side closes a connection that stayed silent for `ha_housekeeping_interval`.
//!
//! A Java master starts an empty slave (one reporting 0) at its last segment; Tidemark's master
//! sends its whole retained log, so a new slave holds every message. The slave's store indexes
//! what it receives (`MessageLog::append_replicated`).
//!
//! [`HaState`](crate::ha_progress::HaState) is what SYNC_MASTER sends wait on: the highest
//! offset any slave confirmed.

use std::future::Future;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tidemark_remoting::tls::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::state::BrokerState;

const HEADER_BYTES: usize = 12;
/// Controller mode: a Tidemark slave's first 8 bytes, then its controller-given broker id (8
/// bytes), so the master can keep its SyncStateSet. No offset is negative, so a 4.x slave's
/// first report can never look like it.
const HELLO: i64 = -2;
/// The largest frame body a slave accepts (Java slaves buffer 4 MiB).
const FRAME_BODY_MAX: usize = 4 * 1024 * 1024;
/// Pause before a slave reconnects.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

fn transfer_header(offset: u64, size: usize) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(&(offset as i64).to_be_bytes());
    header[8..].copy_from_slice(&(size as i32).to_be_bytes());
    header
}

// --- master -------------------------------------------------------------------------------

/// Accepts slaves on the HA port until `stop`.
pub async fn serve_master(
    state: Arc<BrokerState>,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) if state.role.is_slave() => {
                // In controller mode a slave keeps its HA port; only a master serves it.
                debug!(%peer, "HA connection refused: this broker is not a master now");
                drop(stream);
            }
            Ok((stream, peer)) => {
                info!(%peer, "slave connected to the HA port");
                let state = state.clone();
                tokio::spawn(async move {
                    // A Java slave dials plaintext; a Tidemark slave with `tls_enable`, TLS.
                    let Some(stream) = state.security.tls.accept(stream, peer).await else {
                        return;
                    };
                    state.ha.slave_connected();
                    // Whole progress tables into the log, which this slave copies from its
                    // end on: whatever the stream carried before it may be missing there.
                    state.progress_stream.outbox().request_resync();
                    if let Err(error) = serve_slave(&state, stream).await {
                        debug!(%peer, %error, "HA connection ended");
                    }
                    state.ha.slave_disconnected();
                    info!(%peer, "slave disconnected from the HA port");
                });
            }
            Err(error) => {
                warn!(%error, "HA accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// How long a silent HA connection is kept (`ha_housekeeping_interval`, live: read at each
/// wait, so a change reaches the connections already open).
fn housekeeping(state: &BrokerState) -> Duration {
    Duration::from_millis(state.live.get().ha_housekeeping_interval)
}

/// How often an idle HA connection shows it is alive (`ha_send_heartbeat_interval`, live).
fn heartbeat(state: &BrokerState) -> Duration {
    Duration::from_millis(state.live.get().ha_send_heartbeat_interval)
}

async fn serve_slave(state: &Arc<BrokerState>, stream: Stream) -> std::io::Result<()> {
    stream.tcp().set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_halves();
    let (reported_tx, mut reported) = watch::channel::<Option<u64>>(None);

    let reading = {
        let state = state.clone();
        async move {
            let mut buffer = BytesMut::with_capacity(1024);
            let mut identified = false;
            let mut slave_id: Option<i64> = None;
            let outcome = loop {
                let read =
                    tokio::time::timeout(housekeeping(&state), reader.read_buf(&mut buffer)).await;
                match read {
                    Err(_) => break Err(std::io::Error::other("slave silent too long")),
                    Ok(Ok(0)) => break Ok(()),
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => break Err(error),
                }
                if !identified {
                    if buffer.len() < 8 {
                        continue;
                    }
                    if i64::from_be_bytes(buffer[..8].try_into().unwrap_or([0; 8])) == HELLO {
                        if buffer.len() < 16 {
                            continue;
                        }
                        slave_id = Some(i64::from_be_bytes(
                            buffer[8..16].try_into().unwrap_or([0; 8]),
                        ));
                        buffer.advance(16);
                    }
                    identified = true;
                }
                // Reports are 8 bytes each; only the newest complete one matters.
                let whole = buffer.len() - buffer.len() % 8;
                if whole == 0 {
                    continue;
                }
                let offset =
                    i64::from_be_bytes(buffer[whole - 8..whole].try_into().unwrap_or([0; 8]));
                buffer.advance(whole);
                let offset = u64::try_from(offset).unwrap_or(0);
                let log_end = state.log().positions().1;
                if offset > log_end {
                    break Err(std::io::Error::other(format!(
                        "slave reports {offset}, beyond this log's end {log_end}"
                    )));
                }
                state.ha.confirm(offset);
                if let Some(id) = slave_id {
                    state.ha.replica_reported(id, offset, log_end);
                }
                state.publish_read_fence();
                let _ = reported_tx.send(Some(offset));
            };
            if let Some(id) = slave_id {
                state.ha.replica_gone(id);
            }
            outcome
        }
    };

    let writing = async {
        let first = loop {
            if let Some(offset) = *reported.borrow_and_update() {
                break offset;
            }
            if reported.changed().await.is_err() {
                return Ok(());
            }
        };
        let (min, _, _) = state.log().positions();
        let mut next = first.max(min);
        let mut last_write = tokio::time::Instant::now();
        loop {
            let new_data = state.ha.new_data();
            let batch = state.live.get().ha_transfer_batch_size.max(1);
            let chunk = state
                .log()
                .replication_chunk(next, batch)
                .map_err(std::io::Error::other)?;
            match chunk {
                Some(bytes) => {
                    let mut frame = Vec::with_capacity(HEADER_BYTES + bytes.len());
                    frame.extend_from_slice(&transfer_header(next, bytes.len()));
                    frame.extend_from_slice(&bytes);
                    writer.write_all(&frame).await?;
                    next += bytes.len() as u64;
                    last_write = tokio::time::Instant::now();
                }
                None => {
                    if last_write.elapsed() >= heartbeat(state) {
                        writer.write_all(&transfer_header(next, 0)).await?;
                        last_write = tokio::time::Instant::now();
                    }
                    // Puts wake us; the timeout covers wake-ups lost between check and wait.
                    let _ = tokio::time::timeout(Duration::from_millis(100), new_data).await;
                }
            }
        }
    };

    tokio::select! {
        read = reading => read,
        written = writing => written,
    }
}

// --- slave --------------------------------------------------------------------------------

/// Follows the master's log until `stop`: connects to the master's HA address (configured, or
/// learned at registration), reports, applies frames, reconnects after any error.
///
/// Only while the broker is a slave: in controller mode the role changes at run time, and a
/// session ends as soon as it does.
pub async fn run_slave(state: Arc<BrokerState>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut role = state.role.subscribe();
    loop {
        if !role.borrow_and_update().is_slave() {
            tokio::select! {
                _ = &mut stop => break,
                _ = role.changed() => continue,
            }
        }
        let master = state.ha_master_addr();
        let session = async {
            match master {
                Some(addr) => {
                    if let Err(error) = follow(&state, &addr).await {
                        debug!(%addr, %error, "HA session with the master ended");
                    }
                }
                None => debug!("no master HA address yet"),
            }
            tokio::time::sleep(RECONNECT_DELAY).await;
        };
        tokio::select! {
            _ = &mut stop => break,
            _ = role.changed() => info!("role changed: HA session stopped"),
            _ = session => {}
        }
    }
}

async fn follow(state: &Arc<BrokerState>, addr: &str) -> std::io::Result<()> {
    if state.config.enable_controller_mode {
        crate::controller_mode::reconcile_with_master(state)
            .await
            .map_err(std::io::Error::other)?;
        // Whatever this broker wrote as a master and nobody confirmed is cut off by now.
        state.lift_read_fence();
    }
    let connect = async {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        match &state.security.client_tls {
            None => Ok(Stream::Plain(stream)),
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
                tls.connect(host, stream).await
            }
        }
    };
    let stream = tokio::time::timeout(Duration::from_secs(3), connect)
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    info!(%addr, tls = stream.is_tls(), "following the master's commit log");
    let (mut reader, mut writer) = stream.into_halves();
    let mut reported = state.log().positions().1;
    if let Some(id) = crate::controller_mode::own_controller_id(state) {
        let mut hello = HELLO.to_be_bytes().to_vec();
        hello.extend_from_slice(&id.to_be_bytes());
        writer.write_all(&hello).await?;
    }
    writer.write_all(&(reported as i64).to_be_bytes()).await?;
    let mut last_report = tokio::time::Instant::now();
    let mut buffer = BytesMut::with_capacity(64 * 1024);
    loop {
        let heartbeat = heartbeat(state);
        let wait = heartbeat.saturating_sub(last_report.elapsed());
        tokio::select! {
            read = tokio::time::timeout(housekeeping(state), reader.read_buf(&mut buffer)) => {
                match read {
                    Err(_) => return Err(std::io::Error::other("master silent too long")),
                    Ok(Ok(0)) => return Err(std::io::Error::other("master closed the connection")),
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return Err(error),
                }
                apply_frames(state, &mut buffer)?;
            }
            _ = tokio::time::sleep(wait) => {}
        }
        let end = state.log().positions().1;
        if end > reported || last_report.elapsed() >= heartbeat {
            writer.write_all(&(end as i64).to_be_bytes()).await?;
            reported = end;
            last_report = tokio::time::Instant::now();
        }
    }
}

/// Applies every complete frame in `buffer`.
fn apply_frames(state: &BrokerState, buffer: &mut BytesMut) -> std::io::Result<()> {
    loop {
        if buffer.len() < HEADER_BYTES {
            return Ok(());
        }
        let offset = i64::from_be_bytes(buffer[..8].try_into().unwrap_or([0; 8]));
        let size = i32::from_be_bytes(buffer[8..12].try_into().unwrap_or([0; 4]));
        let (Ok(offset), Ok(size)) = (u64::try_from(offset), usize::try_from(size)) else {
            return Err(std::io::Error::other(
                "negative offset or size in an HA frame",
            ));
        };
        if size > FRAME_BODY_MAX {
            return Err(std::io::Error::other(format!("HA frame of {size} bytes")));
        }
        let end = state.log().positions().1;
        // An empty store takes the master's position, whatever it is (Java does too).
        if end != 0 && offset != end {
            return Err(std::io::Error::other(format!(
                "the master sends offset {offset}, this log ends at {end}"
            )));
        }
        if buffer.len() < HEADER_BYTES + size {
            buffer.reserve(HEADER_BYTES + size - buffer.len());
            return Ok(());
        }
        buffer.advance(HEADER_BYTES);
        let body = buffer.split_to(size);
        if !body.is_empty() {
            state
                .log()
                .append_replicated(offset, &body)
                .map_err(std::io::Error::other)?;
            state.progress_stream.log_appended();
        }
    }
}
