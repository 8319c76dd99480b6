//! The pages: overview, topics, one topic, consumer groups, one group, message lookup. They
//! read the broker's state directly; message lookups go through the admin client.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tidemark_broker::BrokerState;
use tidemark_client::MessageExt;
use tidemark_protocol::body::{perm, QueueProgressView};

use super::{error_page, escape, page, url_encode, Console};
use crate::trends::{svg, Series};

pub(super) const FIVE_MINUTES: Duration = Duration::from_secs(300);
const ONE_HOUR: Duration = Duration::from_secs(3600);

pub(super) fn now_ms() -> i64 {
    tidemark_remoting::now_ms()
}

/// `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 07 min`.
pub fn duration_text(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// Epoch ms as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn time_text(ms: i64) -> String {
    if ms <= 0 {
        return "-".to_owned();
    }
    let seconds = ms.div_euclid(1000);
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = tidemark_protocol::message::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

pub(super) fn perm_text(bits: i32) -> &'static str {
    match (perm::is_readable(bits), perm::is_writeable(bits)) {
        (true, true) => "read-write",
        (true, false) => "read-only",
        (false, true) => "write-only",
        (false, false) => "no access",
    }
}

pub(super) fn topic_kind(topic: &str) -> &'static str {
    if topic.starts_with("%RETRY%") {
        "retry"
    } else if topic.starts_with("%DLQ%") {
        "dead letters"
    } else if topic.starts_with("rmq_sys_")
        || topic == "SCHEDULE_TOPIC_XXXX"
        || topic == "TBW102"
        || topic == "RMQ_SYS_TRACE_TOPIC"
        || topic.starts_with("RMQ_SYS_")
    {
        "system"
    } else {
        "normal"
    }
}

pub(super) fn trend_pair(console: &Console, series: &Series, unit: &str) -> String {
    let now = now_ms();
    format!(
        "<div><span class=\"muted\">5 minutes</span> {}</div><div><span class=\"muted\">1 hour</span> {}</div>",
        svg(&console.trends.points(series, now, FIVE_MINUTES), now, FIVE_MINUTES, unit),
        svg(&console.trends.points(series, now, ONE_HOUR), now, ONE_HOUR, unit)
    )
}

pub async fn overview(State(console): State<Arc<Console>>) -> Response {
    let mut body = match &console.local {
        Some(state) => local_broker_html(state),
        None => String::new(),
    };
    body.push_str(&super::cluster::cluster_html(&console).await);
    page(&console, "Overview", &body).into_response()
}

/// The broker serving the console: its role, rates, topics, groups, connections and disk.
fn local_broker_html(state: &BrokerState) -> String {
    let config = &state.config;
    let (put_tps, get_tps) = state
        .stats
        .with_throughput(|throughput| (throughput.put_tps(), throughput.get_tps()));
    let disk = state.log().disk_usage();
    let (log_min, log_written, _) = state.log().positions();
    let topics = state.metadata.topics.names();
    let groups = local_groups(state);
    let connections = state.clients.group_connections();
    let mut body = String::from("<table id=\"broker\">");
    for (name, value) in [
        ("Cluster", config.broker_cluster_name.clone()),
        (
            "Broker",
            format!("{} (id {})", config.broker_name, state.role.now().broker_id),
        ),
        ("Address", config.broker_addr()),
        ("Role", state.role.now().java_name().to_owned()),
        ("Version", format!("Tidemark {}", env!("CARGO_PKG_VERSION"))),
        ("Up since", time_text(state.boot_timestamp_ms)),
        ("Put TPS (10 s, 1 min, 10 min)", put_tps),
        ("Get TPS (10 s, 1 min, 10 min)", get_tps),
        ("Topics", topics.len().to_string()),
        ("Consumer groups with progress", groups.len().to_string()),
        (
            "Client connections",
            connections
                .iter()
                .map(|(_, _, n)| n)
                .sum::<usize>()
                .to_string(),
        ),
        (
            "Commit log held",
            format!("{} bytes", log_written.saturating_sub(log_min)),
        ),
        (
            "Disk used",
            format!(
                "{:.1} %{}",
                disk.usage_ratio * 100.0,
                if disk.writes_refused {
                    " — writes refused: disk too full"
                } else {
                    ""
                }
            ),
        ),
    ] {
        let _ = write!(
            body,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    body.push_str("</table>");
    body
}

/// Every group with committed progress on this broker, sorted.
fn local_groups(state: &BrokerState) -> Vec<String> {
    let mut groups: Vec<String> = state
        .metadata
        .topics
        .names()
        .iter()
        .flat_map(|topic| state.progress.offsets.groups_of_topic(topic))
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

/// Every group with committed progress on this broker, and every group a master of the
/// cluster has a subscription group for (RocketMQ's own left out), sorted.
async fn all_groups(console: &Console) -> Vec<String> {
    let mut groups = console
        .local
        .as_deref()
        .map(local_groups)
        .unwrap_or_default();
    if let Ok(admin) = console.admin().await {
        groups.extend(crate::cluster_names::configured_groups(&admin).await);
    }
    groups.sort();
    groups.dedup();
    groups
}

#[derive(Debug, Deserialize)]
pub struct Notice {
    done: Option<String>,
}

pub(super) fn notice_html(notice: &Notice) -> String {
    notice
        .done
        .as_deref()
        .map(|done| format!("<p class=\"notice\" id=\"notice\">{}</p>", escape(done)))
        .unwrap_or_default()
}

/// A group's queues on every broker that knows it (by broker name), with the figures the group
/// pages show.
struct GroupFigures {
    queues: Vec<(String, QueueProgressView)>,
    lag: i64,
    time_lag_ms: i64,
    stuck: usize,
    in_flight: i64,
}

/// Asked of every broker of the group's retry topic (Tidemark's consumer progress); where no
/// broker can be asked (no retry topic yet, the name server away), this broker's own figures.
async fn group_figures(console: &Console, group: &str) -> GroupFigures {
    let across = match console.admin().await {
        Ok(admin) => admin.consumer_progress(group, None).await.ok(),
        Err(_) => None,
    };
    let queues: Vec<(String, QueueProgressView)> = match across {
        Some(found) if !found.is_empty() => found
            .into_iter()
            .map(|(queue, view)| (queue.broker_name, view))
            .collect(),
        _ => match &console.local {
            Some(state) => tidemark_broker::progress::group_progress(state, group, None, now_ms())
                .into_iter()
                .map(|view| (state.config.broker_name.clone(), view))
                .collect(),
            None => Vec::new(),
        },
    };
    let views = || queues.iter().map(|(_, view)| view);
    GroupFigures {
        lag: views()
            .map(|queue| (queue.broker_offset - queue.consumer_offset).max(0))
            .sum(),
        time_lag_ms: views().map(|queue| queue.time_lag_ms).max().unwrap_or(0),
        stuck: views().filter(|queue| queue.stuck_offset >= 0).count(),
        in_flight: views().filter_map(|queue| queue.pop_in_flight).sum(),
        queues,
    }
}

/// The group's online consumers as a broker of its retry topic knows them (any broker of the
/// cluster), else as this one does.
async fn members_of(
    console: &Console,
    group: &str,
) -> Option<tidemark_protocol::body::ConsumerConnection> {
    if let Ok(admin) = console.admin().await {
        if let Ok(connection) = admin.consumer_connection(group).await {
            return Some(connection);
        }
    }
    console
        .local
        .as_ref()
        .and_then(|state| state.clients.consumer_connection(group))
}

async fn online_consumers(console: &Console, group: &str) -> usize {
    members_of(console, group)
        .await
        .map_or(0, |connection| connection.connection_set.len())
}

fn stuck_marker(count: usize) -> String {
    if count == 0 {
        "<span class=\"ok\">none</span>".to_owned()
    } else {
        format!(
            "<span class=\"stuck\" title=\"a message holds the group back\">⚠ {count} stuck</span>"
        )
    }
}

pub async fn groups(State(console): State<Arc<Console>>) -> Response {
    let mut body = String::from("<table id=\"groups\"><tr><th>Group</th><th>Online consumers</th><th>Lag (messages)</th><th>Time lag</th><th>Stuck</th><th>POP in flight</th><th>Lag, 5 minutes</th></tr>");
    let now = now_ms();
    for group in all_groups(&console).await {
        let figures = group_figures(&console, &group).await;
        let online = online_consumers(&console, &group).await;
        let _ = write!(
            body,
            "<tr><td><a href=\"/groups/{}\">{}</a></td><td class=\"n\">{online}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            url_encode(&group),
            escape(&group),
            figures.lag,
            duration_text(figures.time_lag_ms),
            stuck_marker(figures.stuck),
            figures.in_flight,
            svg(
                &console.trends.points(&Series::GroupLag(group.clone()), now, FIVE_MINUTES),
                now,
                FIVE_MINUTES,
                "messages"
            )
        );
    }
    body.push_str("</table>");
    page(&console, "Consumer groups", &body).into_response()
}

pub async fn group(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let figures = group_figures(&console, &group).await;
    let members = members_of(&console, &group).await;
    if figures.queues.is_empty() && members.is_none() {
        return error_page(
            StatusCode::NOT_FOUND,
            &format!("No broker knows progress or a consumer of group {group}."),
        );
    }
    let now = now_ms();
    let mut body = notice_html(&notice);
    let _ = write!(
        body,
        "<p>Lag {} messages, time lag {}, stuck queues: {}, POP in flight {}.</p>",
        figures.lag,
        duration_text(figures.time_lag_ms),
        stuck_marker(figures.stuck),
        figures.in_flight
    );
    body.push_str("<h2>Members</h2><table id=\"members\"><tr><th>Client</th><th>Address</th><th>Language</th><th>Version</th></tr>");
    let members = members
        .map(|connection| connection.connection_set)
        .unwrap_or_default();
    for member in &members {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            escape(&member.client_id),
            escape(&member.client_addr),
            escape(&member.language),
            member.version
        );
    }
    body.push_str("</table>");
    let clients: Vec<(String, String)> = members
        .iter()
        .map(|member| (member.client_id.clone(), member.client_addr.clone()))
        .collect();
    body.push_str(&super::clients::clients_html(&console, &group, &clients).await);
    body.push_str("<h2>Queues</h2><table id=\"queues\"><tr><th>Topic</th><th>Broker</th><th>Queue</th><th>Broker offset</th><th>Committed</th><th>Lag</th><th>Time lag</th><th>Stuck</th><th>Acknowledged above</th><th>POP in flight</th></tr>");
    let mut by_queue: BTreeMap<(&str, &str, i32), &QueueProgressView> = BTreeMap::new();
    for (broker, queue) in &figures.queues {
        by_queue.insert((&queue.topic, broker, queue.queue_id), queue);
    }
    for ((_, broker, _), queue) in &by_queue {
        let stuck = if queue.stuck_offset >= 0 {
            format!(
                "<span class=\"stuck\">⚠ offset {} for {}</span>",
                queue.stuck_offset,
                duration_text(now - queue.stuck_since_ms)
            )
        } else {
            "-".to_owned()
        };
        let _ = write!(
            body,
            "<tr><td><a href=\"/topics/{}\">{}</a></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{stuck}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            url_encode(&queue.topic),
            escape(&queue.topic),
            escape(broker),
            queue.queue_id,
            queue.broker_offset,
            queue.consumer_offset,
            (queue.broker_offset - queue.consumer_offset).max(0),
            duration_text(queue.time_lag_ms),
            queue.acked_above,
            queue
                .pop_in_flight
                .map_or_else(|| "-".to_owned(), |n| n.to_string())
        );
    }
    let _ = write!(
        body,
        "</table><h2>Lag</h2>{}<h2>Consume rate</h2>{}",
        trend_pair(&console, &Series::GroupLag(group.clone()), "messages"),
        trend_pair(&console, &Series::GroupConsumeRate(group.clone()), "msg/s")
    );
    let _ = write!(
        body,
        "<p><a href=\"/groups/{}/dead-letters\" id=\"dead-letters-link\">Dead letters</a></p>",
        url_encode(&group)
    );
    body.push_str(&super::progress_ops::history_html(&console, &group).await);
    if !console.read_only {
        let target = url_encode(&group);
        let mut topics: Vec<&str> = figures
            .queues
            .iter()
            .map(|(_, queue)| queue.topic.as_str())
            .filter(|topic| !topic.starts_with("%RETRY%"))
            .collect();
        topics.sort_unstable();
        topics.dedup();
        let options: String = topics
            .iter()
            .map(|topic| format!("<option>{}</option>", escape(topic)))
            .collect();
        let _ = write!(
            body,
            "<h2>Move the group</h2>\
<fieldset><legend>Reset to a time</legend><form method=\"post\" action=\"/groups/{target}/reset\" id=\"reset-offset\">{csrf}\
<label>Topic <select name=\"topic\">{options}</select></label> \
<label>Time (UTC, <code>YYYY-MM-DD HH:MM[:SS]</code>, epoch ms, <code>now</code> or <code>-10m</code>) <input name=\"time\" required></label> \
<button type=\"submit\">Preview</button></form></fieldset>\
<fieldset><legend>Skip what has accumulated</legend><form method=\"post\" action=\"/groups/{target}/skip\" id=\"skip\">{csrf}\
<label>Topic <select name=\"topic\">{options}</select></label> <button type=\"submit\">Preview</button></form></fieldset>\
<fieldset><legend>Clone the offsets to another group</legend><form method=\"post\" action=\"/groups/{target}/clone\" id=\"clone\">{csrf}\
<label>Topic <select name=\"topic\">{options}</select></label> <label>Into group <input name=\"dest\" required maxlength=\"255\"></label> \
<button type=\"submit\">Preview</button></form></fieldset>",
            csrf = console.csrf_field()
        );
    }
    page(&console, &format!("Consumer group {group}"), &body).into_response()
}

#[derive(Debug, Deserialize)]
pub struct Lookup {
    id: Option<String>,
    topic: Option<String>,
    key: Option<String>,
    broker: Option<String>,
    queue: Option<String>,
    offset: Option<String>,
}

fn message_html(message: &MessageExt, history: &[MessageExt]) -> String {
    let mut out = String::from("<table class=\"message\">");
    for (name, value) in [
        ("Topic", message.topic.clone()),
        ("Message id", message.msg_id.clone()),
        ("Offset id", message.offset_msg_id.clone()),
        ("Broker", message.queue.broker_name.clone()),
        ("Queue", message.queue.queue_id.to_string()),
        ("Queue offset", message.queue_offset.to_string()),
        ("Born", time_text(message.born_timestamp)),
        ("Stored", time_text(message.store_timestamp)),
        ("Reconsumed", message.reconsume_times.to_string()),
        ("Body", format!("{} bytes", message.body.len())),
    ] {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    for (name, value) in message.properties.iter() {
        let _ = write!(
            out,
            "<tr><th class=\"muted\">{}</th><td>{}</td></tr>",
            escape(name),
            escape(value)
        );
    }
    let preview: String = String::from_utf8_lossy(&message.body)
        .chars()
        .take(2_000)
        .collect();
    let _ = write!(
        out,
        "</table><pre class=\"body\">{}</pre>",
        escape(&preview)
    );
    if !history.is_empty() {
        out.push_str("<h3>Retry history</h3><table class=\"history\"><tr><th>Stored</th><th>Topic</th><th>Reconsume times</th><th>Offset id</th></tr>");
        for retry in history {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                time_text(retry.store_timestamp),
                escape(&retry.topic),
                retry.reconsume_times,
                escape(&retry.offset_msg_id)
            );
        }
        out.push_str("</table>");
    }
    out
}

fn field(value: &Option<String>) -> Option<&str> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
}

pub async fn messages(
    State(console): State<Arc<Console>>,
    Query(lookup): Query<Lookup>,
) -> Response {
    let mut body = String::from(
        "<form method=\"get\" action=\"/messages\" id=\"by-id\"><label>Offset message id <input name=\"id\" size=\"40\"></label> <button type=\"submit\">Find</button></form>\
<form method=\"get\" action=\"/messages\" id=\"by-key\"><label>Topic <input name=\"topic\"></label> <label>Key or message id <input name=\"key\"></label> <button type=\"submit\">Find</button></form>\
<form method=\"get\" action=\"/messages\" id=\"by-offset\"><label>Topic <input name=\"topic\"></label> <label>Broker <input name=\"broker\"></label> <label>Queue <input name=\"queue\" size=\"4\"></label> <label>Offset <input name=\"offset\" size=\"10\"></label> <button type=\"submit\">Find</button></form>",
    );
    let wanted = field(&lookup.id).is_some()
        || field(&lookup.key).is_some()
        || field(&lookup.offset).is_some();
    if wanted {
        match find_messages(&console, &lookup).await {
            Ok(found) if found.is_empty() => {
                body.push_str("<p class=\"error\" id=\"error\">No such message.</p>")
            }
            Ok(found) => {
                for (message, history) in &found {
                    body.push_str(&message_html(message, history));
                }
            }
            Err(failure) => {
                let _ = write!(
                    body,
                    "<p class=\"error\" id=\"error\">{}</p>",
                    escape(&failure)
                );
            }
        }
    }
    page(&console, "Messages", &body).into_response()
}

async fn find_messages(
    console: &Console,
    lookup: &Lookup,
) -> Result<Vec<(MessageExt, Vec<MessageExt>)>, String> {
    let admin = console.admin().await?;
    let found: Vec<MessageExt> = if let Some(id) = field(&lookup.id) {
        vec![admin
            .view_message(id)
            .await
            .map_err(|failure| failure.to_string())?]
    } else if let (Some(topic), Some(key)) = (field(&lookup.topic), field(&lookup.key)) {
        let mut found = admin
            .query_messages_by_key(topic, key, false, 32, (0, i64::MAX))
            .await
            .map_err(|failure| failure.to_string())?;
        if found.is_empty() {
            found = admin
                .query_messages_by_key(topic, key, true, 32, (0, i64::MAX))
                .await
                .map_err(|failure| failure.to_string())?;
        }
        found
    } else if let (Some(topic), Some(broker), Some(queue), Some(offset)) = (
        field(&lookup.topic),
        field(&lookup.broker),
        field(&lookup.queue),
        field(&lookup.offset),
    ) {
        let queue: i32 = queue
            .parse()
            .map_err(|_| format!("queue {queue:?} is not a number"))?;
        let offset: i64 = offset
            .parse()
            .map_err(|_| format!("offset {offset:?} is not a number"))?;
        admin
            .message_at(topic, broker, queue, offset)
            .await
            .map_err(|failure| failure.to_string())?
            .into_iter()
            .collect()
    } else {
        return Err("a lookup by key needs the topic and the key; by queue offset, the topic, broker, queue and offset".to_owned());
    };
    let mut with_history = Vec::new();
    for message in found {
        let history = retry_history(console, &admin, &message).await;
        with_history.push((message, history));
    }
    Ok(with_history)
}

/// The message's retry copies: what its consumer groups sent back, found in their retry and
/// dead-letter topics by its client message id.
async fn retry_history(
    console: &Console,
    admin: &tidemark_client::Admin,
    message: &MessageExt,
) -> Vec<MessageExt> {
    let groups = match admin.groups_consuming(&message.topic).await {
        Ok(groups) => groups,
        // No broker could be asked: this broker's groups of the topic.
        Err(_) => console
            .local
            .as_ref()
            .map(|state| state.progress.offsets.groups_of_topic(&message.topic))
            .unwrap_or_default(),
    };
    let mut history = Vec::new();
    for group in groups {
        for topic in [format!("%RETRY%{group}"), format!("%DLQ%{group}")] {
            // Topics that do not exist answer with an error: nothing to add.
            if let Ok(found) = admin
                .query_messages_by_key(&topic, &message.msg_id, true, 32, (0, i64::MAX))
                .await
            {
                history.extend(found);
            }
        }
    }
    history.sort_by_key(|retry| retry.store_timestamp);
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_people_write_them() {
        assert_eq!(time_text(0), "-");
        assert_eq!(time_text(1_796_197_200_000), "2026-12-02 07:40:00 UTC");
        assert_eq!(time_text(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(duration_text(61_000), "1 min 01 s");
        assert_eq!(duration_text(-5), "0 ms");
    }
}
