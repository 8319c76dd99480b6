//! The topic pages: every topic (this broker's with their figures, the others' named), and one
//! topic across the cluster — where its queues are, their offsets on every broker, its groups.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use tidemark_broker::BrokerState;

use super::pages::{notice_html, now_ms, perm_text, topic_kind, trend_pair, Notice, FIVE_MINUTES};
use super::{error_page, escape, page, url_encode, Console};
use crate::trends::{svg, Series};

pub async fn topics(State(console): State<Arc<Console>>, Query(notice): Query<Notice>) -> Response {
    let mut body = notice_html(&notice);
    body.push_str("<table id=\"topics\"><tr><th>Topic</th><th>Kind</th><th>Queues (read / write)</th><th>Permission</th><th>Messages held</th><th>Stored since start</th><th>Put rate, 5 minutes</th></tr>");
    let names = match &console.local {
        Some(state) => local_rows(&console, state, &mut body),
        None => Vec::new(),
    };
    // Topics the serving broker does not have (all of them for a console on its own): their
    // figures are on their own page.
    if let Ok(admin) = console.admin().await {
        let now = now_ms();
        for topic in admin.topic_list().await.unwrap_or_default() {
            if names.contains(&topic) {
                continue;
            }
            let _ = write!(
                body,
                "<tr><td><a href=\"/topics/{}\">{}</a></td><td>{}</td><td colspan=\"4\" class=\"muted\">on its page</td><td>{}</td></tr>",
                url_encode(&topic),
                escape(&topic),
                topic_kind(&topic),
                svg(
                    &console.trends.points(&Series::TopicPutRate(topic.clone()), now, FIVE_MINUTES),
                    now,
                    FIVE_MINUTES,
                    "msg/s"
                )
            );
        }
    }
    body.push_str("</table>");
    if !console.read_only {
        let _ = write!(
            body,
            "<h2>Create a topic</h2><form method=\"post\" action=\"/topics\" id=\"create-topic\">{}\
<label>Name <input name=\"topic\" required maxlength=\"127\"></label> \
<label>Read queues <input name=\"read_queues\" type=\"number\" min=\"1\" max=\"1024\" value=\"8\"></label> \
<label>Write queues <input name=\"write_queues\" type=\"number\" min=\"1\" max=\"1024\" value=\"8\"></label> \
<label>Permission <select name=\"perm\"><option value=\"6\">read-write</option><option value=\"4\">read-only</option><option value=\"2\">write-only</option></select></label> \
<label>On <select name=\"place\">{}</select></label> \
<button type=\"submit\">Create</button></form>",
            console.csrf_field(),
            place_options(&console).await
        );
    }
    page(&console, "Topics", &body).into_response()
}

/// The serving broker's topics, one row each with its figures; their names, sorted.
fn local_rows(console: &Console, state: &BrokerState, body: &mut String) -> Vec<String> {
    let traffic = state.stats.traffic.snapshot();
    let mut names = state.metadata.topics.names();
    names.sort();
    let now = now_ms();
    for topic in &names {
        let Some(config) = state.metadata.topics.get(topic) else {
            continue;
        };
        let held: i64 = (0..config.read_queue_nums.max(config.write_queue_nums))
            .map(|queue| {
                state.log().max_offset(topic, queue) - state.log().min_offset(topic, queue)
            })
            .sum();
        let stored = traffic.stored.get(topic).map_or(0, |flow| flow.messages);
        let _ = write!(
            body,
            "<tr><td><a href=\"/topics/{}\">{}</a></td><td>{}</td><td class=\"n\">{} / {}</td><td>{}</td><td class=\"n\">{held}</td><td class=\"n\">{stored}</td><td>{}</td></tr>",
            url_encode(topic),
            escape(topic),
            topic_kind(topic),
            config.read_queue_nums,
            config.write_queue_nums,
            perm_text(config.perm),
            svg(
                &console.trends.points(&Series::TopicPutRate(topic.clone()), now, FIVE_MINUTES),
                now,
                FIVE_MINUTES,
                "msg/s"
            )
        );
    }
    names
}

pub async fn topic(
    State(console): State<Arc<Console>>,
    Path(topic): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let local = console
        .local
        .as_ref()
        .and_then(|state| state.metadata.topics.get(&topic));
    let admin = console.admin().await.ok();
    let route = match &admin {
        Some(admin) => admin.topic_route(&topic).await.ok().flatten(),
        None => None,
    };
    let (read_queues, write_queues, perm) = match (&local, &route) {
        (Some(config), _) => (config.read_queue_nums, config.write_queue_nums, config.perm),
        (None, Some(route)) if !route.queue_datas.is_empty() => {
            let first = &route.queue_datas[0];
            (first.read_queue_nums, first.write_queue_nums, first.perm)
        }
        _ => {
            return error_page(
                StatusCode::NOT_FOUND,
                &format!("No broker of the cluster has a topic {topic}."),
            )
        }
    };
    let mut body = notice_html(&notice);
    let placement: Vec<String> = route
        .iter()
        .flat_map(|route| &route.queue_datas)
        .map(|queue| {
            format!(
                "{}: {} read / {} write, {}",
                escape(&queue.broker_name),
                queue.read_queue_nums,
                queue.write_queue_nums,
                perm_text(queue.perm)
            )
        })
        .collect();
    let _ = write!(
        body,
        "<p>{}, {}.</p><h2>Put rate (this broker)</h2>{}",
        topic_kind(&topic),
        if placement.is_empty() {
            format!(
                "{read_queues} read / {write_queues} write queues, {}",
                perm_text(perm)
            )
        } else {
            placement.join("; ")
        },
        trend_pair(&console, &Series::TopicPutRate(topic.clone()), "msg/s")
    );
    body.push_str("<h2>Queues</h2><table id=\"queues\"><tr><th>Broker</th><th>Queue</th><th>Min offset</th><th>Max offset</th></tr>");
    let stats = match &admin {
        Some(admin) => admin.topic_stats(&topic).await.ok(),
        None => None,
    };
    match stats.filter(|stats| !stats.offset_table.is_empty()) {
        Some(stats) => {
            for (queue, offsets) in &stats.offset_table {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    escape(&queue.broker_name),
                    queue.queue_id,
                    offsets.min_offset,
                    offsets.max_offset
                );
            }
        }
        // No broker could be asked: the serving broker's own queues.
        None => {
            let Some(state) = &console.local else {
                return error_page(
                    StatusCode::BAD_GATEWAY,
                    &format!("No broker answered about topic {topic}."),
                );
            };
            for queue in 0..read_queues.max(write_queues) {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td class=\"n\">{queue}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    escape(&state.config.broker_name),
                    state.log().min_offset(&topic, queue),
                    state.log().max_offset(&topic, queue)
                );
            }
        }
    }
    body.push_str("</table><h2>Consumer groups</h2><ul>");
    let groups = match &admin {
        Some(admin) => admin.groups_consuming(&topic).await.ok(),
        None => None,
    }
    .or_else(|| {
        console
            .local
            .as_ref()
            .map(|state| state.progress.offsets.groups_of_topic(&topic))
    })
    .unwrap_or_default();
    for group in groups {
        let _ = write!(
            body,
            "<li><a href=\"/groups/{}\">{}</a></li>",
            url_encode(&group),
            escape(&group)
        );
    }
    body.push_str("</ul>");
    if !console.read_only {
        let target = url_encode(&topic);
        let _ = write!(
            body,
            "<h2>Change</h2><form method=\"post\" action=\"/topics/{target}/update\" id=\"update-topic\">{csrf}\
<label>Read queues <input name=\"read_queues\" type=\"number\" min=\"1\" max=\"1024\" value=\"{}\"></label> \
<label>Write queues <input name=\"write_queues\" type=\"number\" min=\"1\" max=\"1024\" value=\"{}\"></label> \
<label>Permission <select name=\"perm\"><option value=\"6\">read-write</option><option value=\"4\">read-only</option><option value=\"2\">write-only</option></select></label> \
<button type=\"submit\">Update</button></form>\
<form method=\"post\" action=\"/topics/{target}/delete\" id=\"delete-topic\">{csrf}\
<label>Type the topic's name to delete it and its messages <input name=\"confirm\" required></label> <button type=\"submit\">Delete</button></form>",
            read_queues,
            write_queues,
            csrf = console.csrf_field()
        );
    }
    page(&console, &format!("Topic {topic}"), &body).into_response()
}

/// Where a new topic may go: every master of this broker's cluster (the default), or one broker
/// set's master.
async fn place_options(console: &Console) -> String {
    let cluster = &console.cluster;
    let mut options = format!(
        "<option value=\"cluster\">every broker set of {}</option>",
        escape(cluster)
    );
    if let Ok(admin) = console.admin().await {
        for master in admin.masters(None).await.unwrap_or_default() {
            let _ = write!(
                options,
                "<option value=\"broker:{name}\">{name} only</option>",
                name = escape(&master.broker_name)
            );
        }
    }
    options
}
