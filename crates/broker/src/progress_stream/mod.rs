//! Consumer progress replicated with the log. RocketMQ's slaves copy a master's offsets every
//! `slaveSyncIntervalMs` (10 s), so a slave elected master answers offsets up to one interval
//! old and the group consumes that much again. Here a master appends every change of its
//! progress — the records its own offset journal takes — to a system topic of its commit log,
//! batched into messages ([`publisher`]); replication carries them to the replicas in order
//! with the messages they are about, and each replica applies them to its own table as they
//! arrive ([`follower`]), by the merge rule of [`crate::offsets`] (a newer reset epoch wins,
//! otherwise the larger offset). A synchronous commit on a SYNC master is answered once the
//! replicas a SYNC send waits for have the message holding it, and a replica about to become
//! master applies everything its log holds first: the new master's offsets are never behind
//! what the old one acknowledged.
//!
//! Whenever a replica connects, the master publishes whole copies of its tables first (the
//! replica may lack what the stream carried before), and again if its outbox overflowed.
//!
//! The records and the outbox the tables fill are `progress_record`'s.

mod follower;
mod publisher;

pub(crate) use follower::{after_log_cut, drain, run as follow};
pub(crate) use publisher::run as publish;

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::ResponseCode;
use tokio::sync::Notify;

use crate::ha_progress::ReplicaWait;
use crate::message_log::{LogHandle, MessageLog};
use crate::parts::Progress;
use crate::pop::PopTable;
use crate::progress_record::ProgressOutbox;
use crate::role::RoleNow;

/// What the publisher and the follower touch: the log they append to and read, the stream's
/// outbox and signal, and the tables whose changes travel in it.
#[derive(Debug, Clone)]
pub struct ProgressReplication {
    pub log: LogHandle,
    pub stream: Arc<ProgressStream>,
    pub progress: Arc<Progress>,
    pub pop: Arc<PopTable>,
    pub timers: Arc<crate::timer::Timers>,
    /// In controller mode a master publishes from the start: replicas may connect any time.
    pub controller_mode: bool,
    /// Stamped on the progress messages.
    pub store_host: std::net::SocketAddr,
}

/// A broker's progress stream: the outbox a master publishes from, and the signal a replica's
/// follower waits on.
#[derive(Debug, Default)]
pub struct ProgressStream {
    outbox: Arc<ProgressOutbox>,
    appended: Notify,
}

impl ProgressStream {
    /// The outbox the progress tables push their changes into.
    pub fn outbox(&self) -> &Arc<ProgressOutbox> {
        &self.outbox
    }

    /// A replica's log received bytes from the master: the follower looks at once.
    pub fn log_appended(&self) {
        self.appended.notify_one();
    }

    async fn appended(&self) {
        self.appended.notified().await;
    }
}

/// Where a request's wait for the replicas ends, taken when the request begins. Once its
/// change is applied, the wait covers the stream's last record — which must be one pushed
/// after the request began. A request that recorded nothing (an acknowledgement of what is no
/// longer in flight, a commit below the stored offset) would otherwise wait for records its
/// replicas confirmed long ago, and a master deposed without knowing it yet (paused, or cut
/// off while the controllers elected another) would answer it SUCCESS at once, though the new
/// master may hold the opposite; it pushes a barrier record of its own instead, which no
/// replica of a deposed master confirms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Since(u64);

impl Since {
    pub(crate) fn now(stream: &ProgressStream) -> Since {
        Since(stream.outbox().last_pushed())
    }

    /// The record to wait for: the last one pushed, or a barrier when none was since
    /// [`Since::now`] and the change was made as a master that waits for replicas.
    pub(crate) fn through(self, stream: &ProgressStream, made_as: RoleNow) -> u64 {
        let last = stream.outbox().last_pushed();
        if last > self.0 || !made_as.waits_for_slaves() {
            return last;
        }
        stream
            .outbox()
            .push(crate::progress_record::STREAM_BARRIER, Vec::new())
    }
}

/// What a synchronous commit answers after waiting for its replicas: success, or the code a
/// SYNC send would get (the commit is stored on this broker either way). Only a change made
/// while this broker was a SYNC master waits (`made_as`: the role when the change was
/// applied); `seq` is the outbox position that holds the commit. With no replica to wait for
/// (none connected, or one too far behind, which the controllers drop from the set) it is
/// success: the change stands on this broker as a SYNC send's message does, and a consumer
/// that could not commit or read offsets while a slave is down would stop.
///
/// A change made as master by a broker that follows another master by the time it would be
/// answered is never success: the new master need not have it (a master deposed while paused
/// runs the requests queued meanwhile, and may learn of its deposition in the middle of one).
pub(crate) async fn wait_replicated(
    log: MessageLog<'_>,
    stream: &ProgressStream,
    seq: u64,
    made_as: RoleNow,
) -> ResponseCode {
    let code = wait_for_replicas(log, stream, seq, made_as).await;
    if code == ResponseCode::Success && !made_as.is_slave() && log.role.now().is_slave() {
        return ResponseCode::SlaveNotAvailable;
    }
    code
}

async fn wait_for_replicas(
    log: MessageLog<'_>,
    stream: &ProgressStream,
    seq: u64,
    made_as: RoleNow,
) -> ResponseCode {
    if !made_as.waits_for_slaves() {
        return ResponseCode::Success;
    }
    let live = log.live.get();
    let timeout = Duration::from_millis(live.slave_timeout);
    let Some(end) = stream.outbox().wait_published(seq, timeout).await else {
        return ResponseCode::FlushSlaveTimeout;
    };
    let Some(end) = end else {
        // Not published: this broker stopped being master meanwhile.
        return ResponseCode::SlaveNotAvailable;
    };
    let waited = log
        .ha
        .wait_replicated(
            end,
            log.positions().1,
            live.ha_slave_fallbehind_max,
            timeout,
        )
        .await;
    tracing::debug!(seq, end, ?waited, "progress change waited for the replicas");
    match waited {
        ReplicaWait::Replicated | ReplicaWait::SlaveNotAvailable => ResponseCode::Success,
        ReplicaWait::Timeout => ResponseCode::FlushSlaveTimeout,
        ReplicaWait::Deposed => ResponseCode::SlaveNotAvailable,
    }
}

/// Holds an answer that shows progress (an offset query, consume stats) until every change
/// made so far is on the replicas a SYNC send waits for, so nobody is shown a value a
/// failover could take back. When they do not confirm within `slave_timeout` the answer is
/// FLUSH_SLAVE_TIMEOUT instead (the reader asks again; a consumer's rebalance skips the queue
/// until the next round, as it does for any failed query).
pub(crate) async fn once_replicated(
    log: MessageLog<'_>,
    stream: &ProgressStream,
    made_as: RoleNow,
    answer: tidemark_protocol::RemotingCommand,
) -> tidemark_protocol::RemotingCommand {
    let through = stream.outbox().last_pushed();
    match wait_replicated(log, stream, through, made_as).await {
        ResponseCode::Success => answer,
        code => tidemark_protocol::RemotingCommand::response(
            code,
            Some("consumer progress not yet confirmed by the in-sync replicas".to_owned()),
        ),
    }
}
