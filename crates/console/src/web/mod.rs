//! The web console: server-rendered HTML pages over the broker's own state, and forms whose
//! actions go through the same admin requests `tidemark admin` and mqadmin send (over the
//! name server, so a topic deleted here is gone from the routes too).
//!
//! Why server-rendered: one binary with nothing to build or fetch — no JavaScript toolchain, no
//! CDN — and pages any browser (or `curl`) shows; charts are inline SVG drawn on the server.
//! Every value shown is HTML-escaped; every state-changing action is a POST carrying the
//! console's CSRF token (and, when the browser sends one, a same-origin `Origin`), refused in
//! read-only mode.

mod actions;
mod clients;
mod cluster;
mod dead_letters;
mod operator;
mod pages;
mod progress_ops;
mod topics;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tidemark_acl::AccessControl;
use tidemark_broker::BrokerState;
use tidemark_client::{Admin, ClientConfig};

use crate::trends::Trends;

/// An operator account's access key and secret (a changed secret gets its own client).
type AccountKey = (String, String);

/// A console that runs on its own (`tidemark console`): what it needs to see the cluster.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The admin clients' settings: name servers, TLS, and the account the console's own
    /// requests (its charts' sampling) sign with; an operator's requests sign as the operator.
    pub client: ClientConfig,
    /// The cluster new topics go to unless one broker set is chosen.
    pub cluster: String,
    /// The controllers' addresses, for the overview (controller mode).
    pub controllers: Vec<String>,
    /// Operators sign in with accounts of this ACL file (the cluster's); none: no sign-in.
    pub acl: Option<Arc<AccessControl>>,
    pub read_only: bool,
}

/// What every page and action needs.
pub struct Console {
    /// The broker serving the console, for its own figures; `None` for a console on its own,
    /// which sees the cluster through admin requests only.
    pub local: Option<Arc<BrokerState>>,
    pub trends: Arc<Trends>,
    /// Hidden in every form, checked on every POST.
    csrf_token: String,
    read_only: bool,
    /// The admin clients requests go through, connected on first use: one per operator
    /// account when the broker checks ACL (their requests are signed as that account), one
    /// unsigned otherwise.
    admins: tokio::sync::Mutex<HashMap<Option<AccountKey>, Arc<Admin>>>,
    /// The controllers' addresses (controller mode), for the overview.
    controllers: Vec<String>,
    /// What admin clients are made from (the operator's credentials added).
    client: ClientConfig,
    /// The cluster new topics go to by default.
    cluster: String,
    acl: Option<Arc<AccessControl>>,
    /// What the navigation names: the broker, or the cluster.
    name: String,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// 128 random bits as hex, from the standard library's per-process random hash keys.
fn random_token() -> String {
    let mut token = String::new();
    for round in 0..2u64 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(round);
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos()),
        );
        let _ = write!(token, "{:016x}", hasher.finish());
    }
    token
}

impl Console {
    /// The console a broker serves.
    pub fn new(state: Arc<BrokerState>, trends: Arc<Trends>) -> Self {
        let controllers = if state.config.enable_controller_mode {
            split_addresses(&state.config.controller_addr)
        } else {
            Vec::new()
        };
        Self {
            read_only: state.config.console_read_only,
            client: ClientConfig::new(&state.config.namesrv_addr),
            cluster: state.config.broker_cluster_name.clone(),
            acl: state.security.acl.clone(),
            name: state.config.broker_name.clone(),
            local: Some(state),
            trends,
            csrf_token: random_token(),
            admins: tokio::sync::Mutex::default(),
            controllers,
        }
    }

    /// A console on its own, over the cluster `settings` name.
    pub fn standalone(settings: ClusterSettings, trends: Arc<Trends>) -> Self {
        Self {
            local: None,
            trends,
            csrf_token: random_token(),
            read_only: settings.read_only,
            admins: tokio::sync::Mutex::default(),
            controllers: settings.controllers,
            client: settings.client,
            name: format!("cluster {}", settings.cluster),
            cluster: settings.cluster,
            acl: settings.acl,
        }
    }

    /// The admin client of the request's operator.
    async fn admin(&self) -> Result<Arc<Admin>, String> {
        let credentials = operator::current();
        let key = credentials
            .as_ref()
            .map(|c| (c.access_key.clone(), c.secret_key.clone()));
        let mut admins = self.admins.lock().await;
        if let Some(admin) = admins.get(&key) {
            return Ok(admin.clone());
        }
        let mut config = self.client.clone();
        // Signed as the operator, never as the console's own account.
        config.credentials = credentials;
        let admin = Arc::new(
            Admin::connect(config)
                .await
                .map_err(|failure| format!("no admin connection to the name server: {failure}"))?,
        );
        admins.insert(key, admin.clone());
        Ok(admin)
    }

    /// The hidden field every form carries.
    fn csrf_field(&self) -> String {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            self.csrf_token
        )
    }

    /// Why a POST may not act, if it may not: read-only mode, a missing or wrong token, or a
    /// browser saying the form came from another origin.
    fn refusal(&self, headers: &HeaderMap, token: &str) -> Option<Response> {
        if self.read_only {
            return Some(error_page(
                StatusCode::FORBIDDEN,
                "The console is read-only: nothing was changed.",
            ));
        }
        if token != self.csrf_token {
            return Some(error_page(
                StatusCode::FORBIDDEN,
                "The form's token is missing or stale (reload the page): nothing was changed.",
            ));
        }
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|value| value.to_str().ok());
        if let (Some(origin), Some(host)) = (
            headers
                .get(axum::http::header::ORIGIN)
                .and_then(|value| value.to_str().ok()),
            host,
        ) {
            let origin_host = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .unwrap_or(origin);
            if origin_host != host {
                return Some(error_page(
                    StatusCode::FORBIDDEN,
                    "The form was sent from another site: nothing was changed.",
                ));
            }
        }
        None
    }
}

/// `a;b,c` as addresses.
pub fn split_addresses(text: &str) -> Vec<String> {
    text.split([';', ','])
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `text` safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one path segment or query value.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => {
                let _ = write!(out, "%{other:02X}");
            }
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1f2328}\
nav{background:#24292f;padding:.6em 1em}nav a{color:#fff;margin-right:1.2em;text-decoration:none}\
main{padding:1em 1.5em}table{border-collapse:collapse;margin:.5em 0 1.5em}\
th,td{border-bottom:1px solid #d0d7de;padding:.3em .7em;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
.stuck{color:#cf222e;font-weight:bold}.ok{color:#1a7f37}.muted{color:#656d76}\
form.inline{display:inline-block;margin-right:1.5em}fieldset{margin:.7em 0;border:1px solid #d0d7de}\
.error{background:#ffebe9;border:1px solid #cf222e;padding:.7em}.notice{background:#dafbe1;padding:.7em}\
.trend-figures{margin-left:.6em;color:#656d76;font-size:.9em}\
.trend text{fill:#656d76}.trend rect.hover:hover{fill:rgba(9,105,218,.15)}";

/// A whole page: navigation, `title`, `body`.
pub fn page(console: &Console, title: &str, body: &str) -> Html<String> {
    let mode = if console.read_only {
        " <span class=\"muted\">(read-only)</span>"
    } else {
        ""
    };
    // A console on its own has no broker metrics to link to.
    let metrics = if console.local.is_some() {
        "<a href=\"/metrics\">Metrics</a>"
    } else {
        ""
    };
    Html(format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · Tidemark</title>\
<style>{STYLE}</style></head><body><nav><a href=\"/\">Tidemark {}</a><a href=\"/topics\">Topics</a>\
<a href=\"/groups\">Consumer groups</a><a href=\"/messages\">Messages</a>{metrics}</nav>\
<main><h1>{}{mode}</h1>{body}</main></body></html>",
        escape(title),
        escape(&console.name),
        escape(title)
    ))
}

/// A page saying what went wrong, with `status`.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    (
        status,
        Html(format!(
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error · Tidemark</title>\
<style>{STYLE}</style></head><body><nav><a href=\"/\">Tidemark</a></nav><main><h1>{}</h1>\
<p class=\"error\" id=\"error\">{}</p></main></body></html>",
            status.as_u16(),
            escape(message)
        )),
    )
        .into_response()
}

/// The console's routes (the metrics endpoint is added by the caller).
pub fn routes(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/topics", get(topics::topics).post(actions::create_topic))
        .route("/topics/{topic}", get(topics::topic))
        .route("/topics/{topic}/update", post(actions::update_topic))
        .route("/topics/{topic}/delete", post(actions::delete_topic))
        .route("/groups", get(pages::groups))
        .route("/groups/{group}", get(pages::group))
        .route("/groups/{group}/reset", post(actions::reset_offset))
        .route("/groups/{group}/skip", post(actions::skip_accumulated))
        .route("/groups/{group}/clone", post(actions::clone_offsets))
        .route("/groups/{group}/undo", post(progress_ops::undo))
        .route("/groups/{group}/dead-letters", get(dead_letters::list))
        .route(
            "/groups/{group}/dead-letters/resend",
            post(dead_letters::resend),
        )
        .route("/messages", get(pages::messages))
        .route_layer(axum::middleware::from_fn_with_state(
            console.clone(),
            operator::authenticate,
        ))
        .with_state(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_urls_are_escaped() {
        assert_eq!(
            escape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        assert_eq!(url_encode("%RETRY%g 1/x"), "%25RETRY%25g%201%2Fx");
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 32);
    }
}
