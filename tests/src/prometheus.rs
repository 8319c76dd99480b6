//! Debian's `prometheus` as a test's scraper: started on a free loopback port with a
//! configuration naming the targets (scraped and rules evaluated every second), asked PromQL
//! through its HTTP API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tidemark_protocol::json::{self, Value};

use crate::replica_set::field;
use crate::webdriver::http;
use crate::{free_port, ServerProcess};

/// One series of a query's answer: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

/// A `prometheus` process with its data in a temporary directory, stopped when dropped.
#[derive(Debug)]
pub struct Prometheus {
    _process: ServerProcess,
    port: u16,
    _dir: tempfile::TempDir,
}

/// The rules file this repository ships (`deploy/prometheus/tidemark-rules.yml`).
pub fn shipped_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("deploy/prometheus/tidemark-rules.yml"))
        .expect("workspace root")
}

impl Prometheus {
    /// Starts Prometheus scraping each job's targets (`host:port`, path `/metrics`) and
    /// evaluating `rules`; panics with what to install when it is missing.
    pub fn start(name: &str, jobs: &[(&str, Vec<String>)], rules: &[PathBuf]) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("tidemark-prometheus-")
            .tempdir()
            .expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, configuration(jobs, rules)).expect("write prometheus.yml");
        let binary = which("prometheus").unwrap_or_else(|| {
            panic!("prometheus is not installed: Debian's prometheus package (scripts/install-deps installs it)")
        });
        let data = dir.path().join("data");
        let (process, port) = ServerProcess::start_on_free_ports(
            name,
            binary,
            free_port,
            |port| {
                vec![
                    format!("--config.file={}", config.display()),
                    format!("--storage.tsdb.path={}", data.display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    "--log.level=info".to_owned(),
                ]
            },
            "Server is ready to receive web requests",
        );
        Prometheus {
            _process: process,
            port,
            _dir: dir,
        }
    }

    /// The answer to an instant query: every series with its value.
    pub async fn query(&self, promql: &str) -> Vec<Sample> {
        let (status, body) = http(
            self.port,
            "GET",
            &format!("/api/v1/query?query={}", url_encoded(promql)),
            &[],
            "",
        )
        .await;
        assert_eq!(status, 200, "{promql}: {body}");
        let answer = json::parse(body.as_bytes()).unwrap_or_else(|failure| {
            panic!("{promql}: not JSON ({failure}): {body}");
        });
        let result = field(&answer, "data").and_then(|data| field(data, "result"));
        let Some(Value::Array(series)) = result else {
            panic!("{promql}: no result in {body}");
        };
        series.iter().map(sample).collect()
    }

    /// Asks `promql` every half second until `accept` takes the answer or `timeout` passes;
    /// the last answer, and whether it was accepted.
    pub async fn query_until(
        &self,
        promql: &str,
        timeout: Duration,
        accept: impl Fn(&[Sample]) -> bool,
    ) -> (Vec<Sample>, bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self.query(promql).await;
            if accept(&answer) {
                return (answer, true);
            }
            if Instant::now() >= deadline {
                return (answer, false);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Each loaded rule's name with its health (`ok`, `err`, `unknown`) and last error.
    pub async fn rules(&self) -> Vec<(String, String, String)> {
        let (status, body) = http(self.port, "GET", "/api/v1/rules", &[], "").await;
        assert_eq!(status, 200, "{body}");
        let answer = json::parse(body.as_bytes()).expect("rules JSON");
        let Some(Value::Array(groups)) = field(&answer, "data").and_then(|d| field(d, "groups"))
        else {
            panic!("no rule groups in {body}");
        };
        let mut rules = Vec::new();
        for group in groups {
            let Some(Value::Array(in_group)) = field(group, "rules") else {
                continue;
            };
            for rule in in_group {
                let text = |key| match field(rule, key) {
                    Some(Value::String(text)) => text.clone(),
                    _ => String::new(),
                };
                rules.push((text("name"), text("health"), text("lastError")));
            }
        }
        rules
    }
}

fn configuration(jobs: &[(&str, Vec<String>)], rules: &[PathBuf]) -> String {
    let mut text = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    if !rules.is_empty() {
        text.push_str("rule_files:\n");
        for rule in rules {
            text.push_str(&format!("  - '{}'\n", rule.display()));
        }
    }
    text.push_str("scrape_configs:\n");
    for (job, targets) in jobs {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        text.push_str(&format!(
            "  - job_name: '{job}'\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ));
    }
    text
}

fn sample(series: &Value) -> Sample {
    let mut labels = BTreeMap::new();
    if let Some(Value::Object(metric)) = field(series, "metric") {
        for (name, value) in metric.entries() {
            if let (Value::String(name), Value::String(value)) = (name, value) {
                labels.insert(name.clone(), value.clone());
            }
        }
    }
    // An instant vector's value is [time, "number"].
    let value = match field(series, "value") {
        Some(Value::Array(pair)) => match pair.get(1) {
            Some(Value::String(number)) => number.parse().unwrap_or(f64::NAN),
            _ => f64::NAN,
        },
        _ => f64::NAN,
    };
    (labels, value)
}

/// `text` for a URL's query string: everything but unreserved characters percent-encoded.
fn url_encoded(text: &str) -> String {
    let mut encoded = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}
