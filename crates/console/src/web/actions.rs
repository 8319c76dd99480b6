//! The console's actions: topics created, changed and deleted; a group reset to a time,
//! moved past what accumulated, or cloned. Each is a POST checked by [`Console::refusal`],
//! validated here, and carried out by the admin client; moving a group shows what would change
//! first and acts only once confirmed.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use tidemark_protocol::body::{perm, TopicConfig, TopicFilterType};
use tidemark_protocol::message::days_from_civil;

use tidemark_client::ProgressMove;

use super::{error_page, escape, page, progress_ops, url_encode, Console};

fn bad_input(message: &str) -> Response {
    error_page(StatusCode::BAD_REQUEST, message)
}

fn failed(message: &str) -> Response {
    error_page(StatusCode::BAD_GATEWAY, message)
}

/// Where to go after an action, saying what was done.
fn done(path: &str, what: &str) -> Response {
    Redirect::to(&format!("{path}?done={}", url_encode(what))).into_response()
}

#[derive(Debug, Deserialize)]
pub struct TopicForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    read_queues: String,
    #[serde(default)]
    write_queues: String,
    #[serde(default)]
    perm: String,
    /// Where a new topic goes: `cluster` (every master of this broker's cluster) or
    /// `broker:NAME` (one broker set's master).
    #[serde(default)]
    place: String,
}

/// The queue counts and permission a topic form asks for.
fn topic_settings(form: &TopicForm) -> Result<(i32, i32, i32), String> {
    let queues = |name: &str, text: &str| match text.trim().parse::<i32>() {
        Ok(value) if (1..=1024).contains(&value) => Ok(value),
        _ => Err(format!(
            "{name} queues must be a number from 1 to 1024, not {text:?}"
        )),
    };
    let read = queues("read", &form.read_queues)?;
    let write = queues("write", &form.write_queues)?;
    let bits = match form.perm.trim() {
        "6" => perm::READ | perm::WRITE,
        "4" => perm::READ,
        "2" => perm::WRITE,
        other => return Err(format!("permission {other:?} is not 6, 4 or 2")),
    };
    Ok((read, write, bits))
}

/// Writes the topic's settings to each of `masters`.
async fn put_topic(
    console: &Console,
    topic: &str,
    form: &TopicForm,
    masters: &[String],
) -> Result<(), String> {
    let (read, write, bits) = topic_settings(form)?;
    let config = TopicConfig {
        topic_name: topic.to_owned(),
        read_queue_nums: read,
        write_queue_nums: write,
        perm: bits,
        topic_filter_type: TopicFilterType::SingleTag,
        ..TopicConfig::default()
    };
    let admin = console.admin().await?;
    for master in masters {
        admin
            .create_topic(master, &config)
            .await
            .map_err(|failure| format!("{master}: {failure}"))?;
    }
    Ok(())
}

/// The masters of the brokers that have `topic` as the name server routes it; this broker when
/// only it has the topic so far (not yet registered).
async fn masters_having(console: &Console, topic: &str) -> Result<Vec<String>, String> {
    let admin = console.admin().await?;
    let route = admin
        .topic_route(topic)
        .await
        .map_err(|failure| failure.to_string())?;
    let mut masters: Vec<String> = route
        .iter()
        .flat_map(|route| &route.broker_datas)
        .filter_map(|broker| broker.master_addr().map(str::to_owned))
        .collect();
    if let Some(state) = console
        .local
        .as_ref()
        .filter(|state| masters.is_empty() && state.metadata.topics.get(topic).is_some())
    {
        masters.push(state.config.broker_addr());
    }
    Ok(masters)
}

/// The masters a new topic goes to: every master of this broker's cluster, or one broker set's.
async fn masters_for(console: &Console, place: &str) -> Result<Vec<String>, String> {
    let admin = console.admin().await?;
    let cluster = &console.cluster;
    let masters = match place.strip_prefix("broker:") {
        Some(name) => admin
            .masters(None)
            .await
            .map_err(|failure| failure.to_string())?
            .into_iter()
            .filter(|master| master.broker_name == name)
            .map(|master| master.addr)
            .collect::<Vec<_>>(),
        None => admin
            .masters(Some(cluster))
            .await
            .map_err(|failure| failure.to_string())?
            .into_iter()
            .map(|master| master.addr)
            .collect(),
    };
    if masters.is_empty() {
        return Err(format!("no master serves {place:?}: nothing was created"));
    }
    Ok(masters)
}

pub async fn create_topic(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<TopicForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let topic = form.topic.trim().to_owned();
    if !tidemark_broker::metadata::is_valid_topic_name(&topic) {
        return bad_input(&format!(
            "{topic:?} is not a topic name: 1 to 127 letters, digits, '_', '-', '%' or '|'."
        ));
    }
    match masters_having(&console, &topic).await {
        Ok(having) if !having.is_empty() => {
            return bad_input(&format!(
                "Topic {topic} exists already; change it on its page."
            ))
        }
        Ok(_) => {}
        Err(failure) => return failed(&failure),
    }
    let outcome = match masters_for(&console, &form.place).await {
        Ok(masters) => put_topic(&console, &topic, &form, &masters).await,
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(()) => done(&format!("/topics/{}", url_encode(&topic)), "topic created"),
        Err(failure) => bad_input(&failure),
    }
}

pub async fn update_topic(
    State(console): State<Arc<Console>>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    Form(form): Form<TopicForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let masters = match masters_having(&console, &topic).await {
        Ok(masters) if masters.is_empty() => {
            return error_page(StatusCode::NOT_FOUND, &format!("No topic {topic}."))
        }
        Ok(masters) => masters,
        Err(failure) => return failed(&failure),
    };
    match put_topic(&console, &topic, &form, &masters).await {
        Ok(()) => done(&format!("/topics/{}", url_encode(&topic)), "topic updated"),
        Err(failure) => bad_input(&failure),
    }
}

#[derive(Debug, Deserialize)]
pub struct DeleteForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
}

pub async fn delete_topic(
    State(console): State<Arc<Console>>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    Form(form): Form<DeleteForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    if form.confirm.trim() != topic {
        return bad_input("The name typed is not the topic's: nothing was deleted.");
    }
    let outcome = match console.admin().await {
        Ok(admin) => admin
            .delete_topic(&console.cluster, &topic)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(_) => done("/topics", &format!("topic {topic} deleted")),
        Err(failure) => failed(&format!("Topic {topic} not deleted: {failure}")),
    }
}

/// `now`, epoch ms, a time before now (`-90s`, `-10m`, `-2h`, `-1d`), or a UTC time
/// `YYYY-MM-DD HH:MM[:SS]` (a `T` between date and time too, as browsers send it).
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    let unreadable = || {
        format!("{text:?} is not a time: use YYYY-MM-DD HH:MM[:SS] (UTC), epoch ms, now, or -10m")
    };
    if text == "now" {
        return Ok(now_ms);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let split = ago
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(unreadable)?;
        let (number, unit) = ago.split_at(split);
        let number: i64 = number.parse().map_err(|_| unreadable())?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(unreadable()),
        };
        return number
            .checked_mul(unit_ms)
            .map(|back| now_ms.saturating_sub(back))
            .ok_or_else(unreadable);
    }
    if text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text.parse().map_err(|_| unreadable());
    }
    let (date, time) = text.split_once([' ', 'T']).ok_or_else(unreadable)?;
    let numbers = |part: &str, separator: char| -> Result<Vec<i64>, String> {
        part.split(separator)
            .map(|piece| piece.parse::<i64>().map_err(|_| unreadable()))
            .collect()
    };
    let date = numbers(date, '-')?;
    let time = numbers(time, ':')?;
    let (&[year, month, day], true) = (date.as_slice(), time.len() == 2 || time.len() == 3) else {
        return Err(unreadable());
    };
    let (hour, minute, second) = (time[0], time[1], time.get(2).copied().unwrap_or(0));
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || !(0..24).contains(&hour)
        || !(0..60).contains(&minute)
        || !(0..60).contains(&second)
    {
        return Err(unreadable());
    }
    Ok(((days_from_civil(year, month, day) * 86_400) + hour * 3600 + minute * 60 + second) * 1000)
}

#[derive(Debug, Deserialize)]
pub struct MoveForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    time: String,
    #[serde(default)]
    confirm: String,
}

/// The brokers' plan of `movement` for `group`, through the operator's admin client; the error
/// page when there is none.
async fn plan_of(
    console: &Console,
    group: &str,
    movement: &ProgressMove,
) -> Result<Vec<tidemark_protocol::body::ProgressPlan>, Response> {
    let plans = match console.admin().await {
        Ok(admin) => admin
            .plan_progress_move(group, movement)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    plans.map_err(|failure| failed(&format!("No plan: {failure}")))
}

/// The confirm step of a move: the brokers' plan — each queue's committed offset, where it
/// would go, what that replays or skips — and the form that applies it.
async fn preview(
    console: &Console,
    group: &str,
    movement: ProgressMove,
    action: &str,
    fields: &[(&str, &str)],
) -> Response {
    let plans = match plan_of(console, group, &movement).await {
        Ok(plans) => plans,
        Err(refusal) => return refusal,
    };
    let back = format!("/groups/{}", url_encode(group));
    let body = format!(
        "<p>Group <b>{}</b>:</p>{}{}",
        escape(group),
        progress_ops::plan_table(&plans),
        progress_ops::confirm_form(
            console,
            &format!("/groups/{}/{action}", url_encode(group)),
            fields,
            &back
        )
    );
    page(console, "Confirm", &body).into_response()
}

async fn move_group(
    console: &Console,
    group: &str,
    form: &MoveForm,
    at_ms: i64,
    action: &str,
) -> Response {
    match masters_having(console, &form.topic).await {
        Ok(masters) if masters.is_empty() => {
            return bad_input(&format!("No topic {}.", form.topic))
        }
        Ok(_) => {}
        Err(failure) => return failed(&failure),
    }
    if form.confirm != "yes" {
        let movement = ProgressMove::Reset {
            topic: form.topic.clone(),
            timestamp_ms: at_ms,
            force: true,
        };
        let fields = [("topic", form.topic.as_str()), ("time", form.time.as_str())];
        return preview(console, group, movement, action, &fields).await;
    }
    let outcome = match console.admin().await {
        Ok(admin) => admin
            .reset_offset_by_timestamp(&form.topic, group, at_ms, true)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(moved) => done(
            &format!("/groups/{}", url_encode(group)),
            &format!("{} queues of {} moved", moved.len(), form.topic),
        ),
        Err(failure) => failed(&format!("The group was not moved: {failure}")),
    }
}

pub async fn reset_offset(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    Form(form): Form<MoveForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let at_ms = match parse_time(&form.time, tidemark_remoting::now_ms()) {
        Ok(at_ms) => at_ms,
        Err(failure) => return bad_input(&failure),
    };
    move_group(&console, &group, &form, at_ms, "reset").await
}

pub async fn skip_accumulated(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    Form(form): Form<MoveForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    // −1: the end of every queue.
    move_group(&console, &group, &form, -1, "skip").await
}

#[derive(Debug, Deserialize)]
pub struct CloneForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    dest: String,
    #[serde(default)]
    confirm: String,
}

/// RocketMQ's group name rule: 1 to 255 of letters, digits, `_`, `-`, `%`, `|`.
fn is_valid_group_name(group: &str) -> bool {
    (1..=255).contains(&group.len())
        && group
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'%' | b'|'))
}

pub async fn clone_offsets(
    State(console): State<Arc<Console>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CloneForm>,
) -> Response {
    if let Some(refusal) = console.refusal(&headers, &form.csrf) {
        return refusal;
    }
    let dest = form.dest.trim();
    if !is_valid_group_name(dest) || dest == group {
        return bad_input(&format!(
            "{dest:?} is not another group's name: 1 to 255 letters, digits, '_', '-', '%' or '|'."
        ));
    }
    let topic = Some(&form.topic)
        .filter(|topic| !topic.is_empty())
        .map(String::as_str);
    if form.confirm != "yes" {
        let movement = ProgressMove::Clone {
            src_group: group.clone(),
            topic: topic.map(str::to_owned),
            offline: true,
        };
        // The plan is the destination's: its offsets now and where the clone takes them.
        let plans = match plan_of(&console, dest, &movement).await {
            Ok(plans) => plans,
            Err(refusal) => return refusal,
        };
        let body = format!(
            "<p>Offsets of <b>{}</b> copied into <b>{}</b>:</p>{}{}",
            escape(&group),
            escape(dest),
            progress_ops::plan_table(&plans),
            progress_ops::confirm_form(
                &console,
                &format!("/groups/{}/clone", url_encode(&group)),
                &[("topic", form.topic.as_str()), ("dest", dest)],
                &format!("/groups/{}", url_encode(&group))
            )
        );
        return page(&console, "Confirm", &body).into_response();
    }
    let outcome = match console.admin().await {
        Ok(admin) => admin
            .clone_group_offset(&group, dest, topic, true)
            .await
            .map_err(|failure| failure.to_string()),
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(_) => done(
            &format!("/groups/{}", url_encode(dest)),
            &format!("offsets cloned from {group}"),
        ),
        Err(failure) => failed(&format!("Offsets not cloned: {failure}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_people_type_are_read_as_utc() {
        let now = 1_796_197_200_000;
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("2026-12-02 07:40", now), Ok(1_796_197_200_000));
        assert_eq!(
            parse_time("2026-12-02T07:40:30", now),
            Ok(1_796_197_230_000)
        );
        assert_eq!(parse_time("2000-02-29 00:00:00", now), Ok(951_782_400_000));
        assert_eq!(parse_time("-10m", now), Ok(now - 600_000));
        assert_eq!(parse_time("12345", now), Ok(12_345));
        for bad in [
            "",
            "yesterday",
            "2026-13-01 00:00",
            "2026-12-02",
            "-5",
            "<script>",
            "99999999999999999999",
        ] {
            assert!(parse_time(bad, now).is_err(), "{bad:?}");
        }
        assert!(is_valid_group_name("orders_consumer-1"));
        assert!(!is_valid_group_name("<b>"));
        assert!(!is_valid_group_name(&"g".repeat(256)));
    }
}
