//! The group page's client view: what each online consumer reports about itself (mqadmin
//! `consumerStatus`, GET_CONSUMER_RUNNING_INFO relayed by the broker) — the queues it holds
//! messages of, how many, its receive and consume rates and failures. Remoting clients answer
//! for themselves; for a gRPC client the gateway answers with what it saw of it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{running_info_property as prop, ConsumerRunningInfo};
use tokio::task::JoinSet;

use super::pages::time_text;
use super::{escape, Console};

/// How long the page waits for each client's answer (they are asked all at once).
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The clients table and each client's detail, for `group`'s online `clients` (id, address).
pub async fn clients_html(console: &Console, group: &str, clients: &[(String, String)]) -> String {
    let mut body = String::from("<h2>Clients</h2>");
    if clients.is_empty() {
        body.push_str("<p>No consumer of this group is online.</p>");
        return body;
    }
    let answers = match console.admin().await {
        Ok(admin) => ask_all(admin, group, clients).await,
        Err(failure) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", escape(&failure));
            return body;
        }
    };
    body.push_str("<table id=\"clients\"><tr><th>Client</th><th>Address</th><th>Kind</th><th>Queues held</th><th>Messages held</th><th>Received/s</th><th>Consumed/s</th><th>Failed/s</th><th>Failed (1 h)</th><th>Consume time</th></tr>");
    let mut details = String::new();
    for ((client_id, address), answer) in clients.iter().zip(&answers) {
        match answer {
            Ok(info) => {
                summary_row(&mut body, client_id, address, info);
                detail(&mut details, client_id, info);
            }
            Err(failure) => {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td><td colspan=\"8\" class=\"error\">no answer: {}</td></tr>",
                    escape(client_id),
                    escape(address),
                    escape(failure)
                );
            }
        }
    }
    body.push_str("</table>");
    body.push_str(&details);
    body
}

/// Every client's answer, in the order of `clients`.
async fn ask_all(
    admin: Arc<tidemark_client::Admin>,
    group: &str,
    clients: &[(String, String)],
) -> Vec<Result<ConsumerRunningInfo, String>> {
    let mut asking = JoinSet::new();
    for (index, (client_id, _)) in clients.iter().enumerate() {
        let (admin, group, client_id) = (admin.clone(), group.to_owned(), client_id.clone());
        asking.spawn(async move {
            let answer =
                tokio::time::timeout(ASK_TIMEOUT, admin.consumer_running_info(&group, &client_id))
                    .await;
            let answer = match answer {
                Ok(Ok(info)) => Ok(info),
                Ok(Err(failure)) => Err(failure.to_string()),
                Err(_) => Err(format!("none within {} s", ASK_TIMEOUT.as_secs())),
            };
            (index, answer)
        });
    }
    let mut answers: Vec<Result<ConsumerRunningInfo, String>> =
        vec![Err("not asked".to_owned()); clients.len()];
    while let Some(joined) = asking.join_next().await {
        if let Ok((index, answer)) = joined {
            answers[index] = answer;
        }
    }
    answers
}

fn kind(info: &ConsumerRunningInfo) -> String {
    let consume_type = info
        .properties
        .get(prop::CONSUME_TYPE)
        .map_or("", String::as_str);
    match info.properties.get("clientType") {
        Some(client_type) => format!("gRPC {}", client_type.to_lowercase().replace('_', " ")),
        None if consume_type == "CONSUME_POP" => "POP".to_owned(),
        None if info
            .properties
            .get(prop::CONSUME_ORDERLY)
            .map(String::as_str)
            == Some("true") =>
        {
            "push, orderly".to_owned()
        }
        None if consume_type == "CONSUME_ACTIVELY" => "pull".to_owned(),
        None => "push".to_owned(),
    }
}

fn summary_row(body: &mut String, client_id: &str, address: &str, info: &ConsumerRunningInfo) {
    let held_queues = info.mq_table.len() + info.mq_pop_table.len();
    let held: i64 = info
        .mq_table
        .values()
        .map(|queue| i64::from(queue.cached_msg_count))
        .chain(
            info.mq_pop_table
                .values()
                .map(|queue| i64::from(queue.wait_ack_count)),
        )
        .sum();
    let statuses = info.status_table.values();
    let (received, consumed, failed_rate, failed, slowest) = statuses.fold(
        (0.0, 0.0, 0.0, 0i64, 0.0f64),
        |(received, consumed, failed_rate, failed, slowest), status| {
            (
                received + status.pull_tps,
                consumed + status.consume_ok_tps,
                failed_rate + status.consume_failed_tps,
                failed + status.consume_failed_msgs,
                slowest.max(status.consume_rt),
            )
        },
    );
    let _ = write!(
        body,
        "<tr><td><a href=\"#client-{id}\">{id}</a></td><td>{}</td><td>{}</td><td class=\"n\">{held_queues}</td><td class=\"n\">{held}</td><td class=\"n\">{received:.2}</td><td class=\"n\">{consumed:.2}</td><td class=\"n\">{failed_rate:.2}</td><td class=\"n\">{failed}</td><td class=\"n\">{slowest:.0} ms</td></tr>",
        escape(address),
        escape(&kind(info)),
        id = escape(client_id),
    );
}

/// One client's queues and per-topic rates.
fn detail(out: &mut String, client_id: &str, info: &ConsumerRunningInfo) {
    let _ = write!(
        out,
        "<details id=\"client-{id}\"><summary>{id}</summary><table class=\"client-queues\"><tr><th>Topic</th><th>Broker</th><th>Queue</th><th>Held</th><th>Offsets held</th><th>Committed</th><th>Last received</th></tr>",
        id = escape(client_id)
    );
    for (queue, held) in &info.mq_table {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            escape(&queue.topic),
            escape(&queue.broker_name),
            queue.queue_id,
            held.cached_msg_count,
            if held.cached_msg_count > 0 {
                format!("{}–{}", held.cached_msg_min_offset, held.cached_msg_max_offset)
            } else {
                "-".to_owned()
            },
            held.commit_offset,
            time_text(held.last_pull_timestamp)
        );
    }
    for (queue, held) in &info.mq_pop_table {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>in flight</td><td>-</td><td>{}</td></tr>",
            escape(&queue.topic),
            escape(&queue.broker_name),
            queue.queue_id,
            held.wait_ack_count,
            time_text(held.last_pop_timestamp)
        );
    }
    out.push_str("</table><table class=\"client-rates\"><tr><th>Topic</th><th>Received/s</th><th>Receive time</th><th>Consumed/s</th><th>Consume time</th><th>Failed/s</th><th>Failed (1 h)</th></tr>");
    for (topic, status) in &info.status_table {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.0} ms</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.0} ms</td><td class=\"n\">{:.2}</td><td class=\"n\">{}</td></tr>",
            escape(topic),
            status.pull_tps,
            status.pull_rt,
            status.consume_ok_tps,
            status.consume_rt,
            status.consume_failed_tps,
            status.consume_failed_msgs
        );
    }
    out.push_str("</table></details>");
}
