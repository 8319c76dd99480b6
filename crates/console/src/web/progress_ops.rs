//! What the console shows of a group's progress operations and acts on: the plan every move
//! shows before it is confirmed (worked out by the brokers, as the CLI's), the group's progress
//! history as a timeline with an Undo behind the same plan-then-confirm step, and the undo
//! itself. All through the operator's admin client, so ACL sees (and the history records) who.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use tidemark_client::RestoreRequest;
use tidemark_protocol::body::ProgressPlan;

use super::pages::time_text;
use super::{error_page, escape, page, url_encode, Console};

/// The plan table (`id="preview"`): per queue, now → target and what that does.
pub fn plan_table(plans: &[ProgressPlan]) -> String {
    let mut html = String::new();
    if plans.iter().any(|plan| plan.broadcasting == Some(true)) {
        html.push_str(
            "<p class=\"note\">The group's online consumers broadcast: each keeps its own \
             offsets, which this does not move (only the broker's copy).</p>",
        );
    }
    html.push_str("<table id=\"preview\"><tr><th>Broker</th><th>Topic</th><th>Queue</th><th>Committed now</th><th>Would become</th><th>Change</th></tr>");
    for plan in plans {
        for line in &plan.queues {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                escape(&plan.broker_name),
                escape(&line.topic),
                line.queue_id,
                if line.current < 0 { "-".to_owned() } else { line.current.to_string() },
                line.target,
                escape(&line.effect())
            );
        }
    }
    html.push_str("</table>");
    html
}

/// The confirm form: the same POST again with `confirm=yes` and `fields` as hidden inputs.
pub fn confirm_form(
    console: &Console,
    action: &str,
    fields: &[(&str, &str)],
    back: &str,
) -> String {
    let mut html = format!(
        "<form method=\"post\" action=\"{}\" id=\"confirm\">{}",
        escape(action),
        console.csrf_field()
    );
    for (name, value) in fields {
        let _ = write!(
            html,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(value)
        );
    }
    let _ = write!(
        html,
        "<input type=\"hidden\" name=\"confirm\" value=\"yes\"><button type=\"submit\">Confirm</button> <a href=\"{}\">Cancel</a></form>",
        escape(back)
    );
    html
}

/// The group page's history section: who moved the group, when, how; an Undo on each change.
pub async fn history_html(console: &Console, group: &str) -> String {
    let history = match console.admin().await {
        Ok(admin) => admin
            .progress_history(group, None, false)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    let brokers = match history {
        Ok(brokers) => brokers,
        Err(failure) => {
            return format!("<h2>History</h2><p>Not available: {}</p>", escape(&failure))
        }
    };
    let mut html = String::from("<h2>History</h2><table id=\"history\"><tr><th>When (UTC)</th><th>Broker</th><th>Entry</th><th>What</th><th>Who</th><th>From</th><th>Queues</th><th></th></tr>");
    let target = url_encode(group);
    let mut rows = 0;
    for broker in &brokers {
        for entry in broker.entries.iter().rev() {
            rows += 1;
            let mut queues = String::new();
            for (index, queue) in entry.queues.iter().enumerate() {
                if index == 4 {
                    let _ = write!(queues, " and {} more", entry.queues.len() - 4);
                    break;
                }
                let offset = |value: i64| {
                    if value < 0 {
                        "-".to_owned()
                    } else {
                        value.to_string()
                    }
                };
                let _ = write!(
                    queues,
                    "{}{}:{} {} → {}",
                    if index == 0 { "" } else { "; " },
                    escape(&queue.topic),
                    queue.queue_id,
                    offset(queue.before),
                    offset(queue.after)
                );
            }
            if let Some(detail) = &entry.detail {
                queues.push_str(&escape(detail));
            }
            let undo = if console.read_only || entry.queues.is_empty() {
                String::new()
            } else {
                format!(
                    "<form method=\"post\" action=\"/groups/{target}/undo\" class=\"undo\">{}\
<input type=\"hidden\" name=\"broker\" value=\"{}\"><input type=\"hidden\" name=\"entry\" value=\"{}\">\
<button type=\"submit\">Undo</button></form>",
                    console.csrf_field(),
                    escape(&broker.broker_name),
                    entry.id
                )
            };
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{queues}</td><td>{undo}</td></tr>",
                time_text(entry.time_ms),
                escape(&broker.broker_name),
                entry.id,
                escape(&entry.kind),
                escape(&entry.account),
                escape(&entry.address),
            );
        }
    }
    if rows == 0 {
        html.push_str("<tr><td colspan=\"8\">No operator has moved this group.</td></tr>");
    }
    html.push_str("</table>");
    html
}

#[derive(Debug, Deserialize)]
pub struct UndoForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    broker: String,
    #[serde(default)]
    entry: String,
    #[serde(default)]
    confirm: String,
}

/// Puts the group back where it stood before a history entry: the plan first, then the
/// restore once confirmed (a history entry itself).
pub async fn undo(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    Form(form): Form<UndoForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let Ok(entry) = form.entry.parse::<i64>() else {
        return error_page(StatusCode::BAD_REQUEST, "No history entry named.");
    };
    let admin = match console.admin().await {
        Ok(admin) => admin,
        Err(failure) => return error_page(StatusCode::BAD_GATEWAY, &failure),
    };
    let confirmed = form.confirm == "yes";
    let request = RestoreRequest {
        group: group.clone(),
        topic: None,
        at_ms: None,
        undo_entry: Some(entry),
        dry_run: !confirmed,
    };
    let plans = match admin.restore_progress(&request, Some(&form.broker)).await {
        Ok(plans) => plans,
        Err(failure) => {
            return error_page(
                StatusCode::BAD_GATEWAY,
                &format!("The group was not put back: {failure}"),
            )
        }
    };
    let back = format!("/groups/{}", url_encode(&group));
    if confirmed {
        let moved: usize = plans.iter().map(|plan| plan.queues.len()).sum();
        let what = format!("entry {entry} undone: {moved} queues put back");
        return Redirect::to(&format!("{back}?done={}", url_encode(&what))).into_response();
    }
    let body = format!(
        "<p>Undo entry {entry} of group <b>{}</b> on {}: every queue back where it stood before it.</p>{}{}",
        escape(&group),
        escape(&form.broker),
        plan_table(&plans),
        confirm_form(
            &console,
            &format!("/groups/{}/undo", url_encode(&group)),
            &[("broker", &form.broker), ("entry", &form.entry)],
            &back
        )
    );
    page(&console, "Confirm", &body).into_response()
}
