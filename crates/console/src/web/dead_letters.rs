//! A group's dead letters in the console: the list (original topic, keys, retries, born and
//! died) and resending one or all, back to the group with a fresh retry count or to their
//! original topics — what would be sent shown first, sent once confirmed, recorded in the
//! group's history. Through the operator's admin client, as every action.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use tidemark_client::ResendRequest;
use tidemark_protocol::body::ResentMessages;

use super::pages::{notice_html, time_text, Notice};
use super::progress_ops::confirm_form;
use super::{error_page, escape, page, url_encode, Console};

/// Dead letters listed per broker on the page.
const PAGE_SIZE: i32 = 100;

pub async fn list(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let found = match console.admin().await {
        Ok(admin) => admin
            .dead_letters(&group, None, None, None, Some(PAGE_SIZE))
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    let brokers = match found {
        Ok(brokers) => brokers,
        Err(failure) => {
            return error_page(
                StatusCode::BAD_GATEWAY,
                &format!("Dead letters not available: {failure}"),
            )
        }
    };
    let target = url_encode(&group);
    let mut body = notice_html(&notice);
    let _ = write!(
        body,
        "<p><a href=\"/groups/{target}\">Group {}</a></p><table id=\"dead-letters\"><tr><th>Broker</th><th>Offset</th><th>Topic</th><th>Keys</th><th>Tags</th><th>Retried</th><th>Born</th><th>Died</th><th>Size</th><th></th></tr>",
        escape(&group)
    );
    let mut count = 0;
    for broker in &brokers {
        for letter in &broker.messages {
            count += 1;
            let resend = if console.read_only {
                String::new()
            } else {
                resend_form(
                    &console,
                    &target,
                    &broker.broker_name,
                    &letter.queue_offset.to_string(),
                    "Resend to group",
                    "retry",
                )
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{resend}</td></tr>",
                escape(&broker.broker_name),
                letter.queue_offset,
                escape(&letter.original_topic),
                escape(&letter.keys),
                escape(&letter.tags),
                letter.reconsume_times,
                time_text(letter.born_timestamp),
                time_text(letter.died_timestamp),
                letter.body_size,
            );
        }
        if broker.next_offset < broker.max_offset {
            let _ = write!(
                body,
                "<tr><td colspan=\"10\">{}: {} more (tidemark admin dead-letters --from {})</td></tr>",
                escape(&broker.broker_name),
                broker.max_offset - broker.next_offset,
                broker.next_offset
            );
        }
    }
    if count == 0 {
        body.push_str("<tr><td colspan=\"10\">No dead letters.</td></tr>");
    }
    body.push_str("</table>");
    if count > 0 && !console.read_only {
        let _ = write!(
            body,
            "<h2>Resend every dead letter</h2>{}{}",
            resend_form(&console, &target, "", "", "Back to the group", "retry"),
            resend_form(
                &console,
                &target,
                "",
                "",
                "To their original topics",
                "origin"
            )
        );
    }
    page(&console, &format!("Dead letters of {group}"), &body).into_response()
}

fn resend_form(
    console: &Console,
    target: &str,
    broker: &str,
    offsets: &str,
    label: &str,
    to: &str,
) -> String {
    format!(
        "<form method=\"post\" action=\"/groups/{target}/dead-letters/resend\" class=\"resend\">{}\
<input type=\"hidden\" name=\"broker\" value=\"{}\"><input type=\"hidden\" name=\"offsets\" value=\"{}\">\
<input type=\"hidden\" name=\"to\" value=\"{to}\"><button type=\"submit\">{}</button></form>",
        console.csrf_field(),
        escape(broker),
        escape(offsets),
        escape(label)
    )
}

#[derive(Debug, Deserialize)]
pub struct ResendForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    broker: String,
    #[serde(default)]
    offsets: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    confirm: String,
}

pub async fn resend(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ResendForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let offsets = match form
        .offsets
        .split(',')
        .filter(|piece| !piece.trim().is_empty())
        .map(|piece| piece.trim().parse::<i64>())
        .collect::<Result<Vec<i64>, _>>()
    {
        Ok(offsets) => (!offsets.is_empty()).then_some(offsets),
        Err(_) => return error_page(StatusCode::BAD_REQUEST, "Offsets are numbers."),
    };
    let to_origin = match form.to.as_str() {
        "retry" => false,
        "origin" => true,
        _ => return error_page(StatusCode::BAD_REQUEST, "Resend to `retry` or `origin`."),
    };
    let confirmed = form.confirm == "yes";
    let request = ResendRequest {
        group: group.clone(),
        offsets,
        topic: None,
        to_origin,
        dry_run: !confirmed,
    };
    let broker = Some(form.broker.as_str()).filter(|name| !name.is_empty());
    let outcome = match console.admin().await {
        Ok(admin) => admin
            .resend_dead_letters(&request, broker)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    let sent = match outcome {
        Ok(sent) => sent,
        Err(failure) => {
            return error_page(
                StatusCode::BAD_GATEWAY,
                &format!("Nothing was resent: {failure}"),
            )
        }
    };
    let back = format!("/groups/{}/dead-letters", url_encode(&group));
    let count: usize = sent.iter().map(|broker| broker.messages.len()).sum();
    if confirmed {
        let what = format!("{count} dead letters resent");
        return Redirect::to(&format!("{back}?done={}", url_encode(&what))).into_response();
    }
    let note = if to_origin {
        "<p class=\"note\">Every group subscribed to the original topics gets these messages.</p>"
    } else {
        ""
    };
    let body = format!(
        "{note}{}{}",
        sent_table(&sent),
        confirm_form(
            &console,
            &format!("/groups/{}/dead-letters/resend", url_encode(&group)),
            &[
                ("broker", &form.broker),
                ("offsets", &form.offsets),
                ("to", &form.to)
            ],
            &back
        )
    );
    page(&console, "Confirm", &body).into_response()
}

/// What would be sent: per message, where it sits and where it would go.
fn sent_table(brokers: &[ResentMessages]) -> String {
    let mut html = String::from(
        "<table id=\"preview\"><tr><th>Broker</th><th>Offset</th><th>Message id</th><th>To</th></tr>",
    );
    for broker in brokers {
        for message in &broker.messages {
            let _ = write!(
                html,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&broker.broker_name),
                message.source_offset,
                escape(&message.msg_id),
                escape(&message.topic)
            );
        }
    }
    html.push_str("</table>");
    html
}
