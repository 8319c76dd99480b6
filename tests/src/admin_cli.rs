//! `tidemark admin` run as an operator runs it, from tests: the binary's output, and its
//! `--json` line read back.

use std::process::{Command, Output};

use tidemark_protocol::json::{self, Value};

use crate::tidemark_binary;

/// Runs `tidemark admin <command…> -n <namesrv> <args…>`.
pub async fn admin(command: &[&str], namesrv: &str, args: &[&str]) -> Output {
    let mut line: Vec<String> = vec!["admin".into()];
    line.extend(command.iter().map(|word| (*word).to_owned()));
    line.extend(["-n".to_owned(), namesrv.to_owned()]);
    line.extend(args.iter().map(|word| (*word).to_owned()));
    tokio::task::spawn_blocking(move || {
        Command::new(tidemark_binary())
            .args(&line)
            .output()
            .expect("run tidemark admin")
    })
    .await
    .expect("admin command thread")
}

/// The command's `--json` line, the command having succeeded.
pub async fn admin_json(command: &[&str], namesrv: &str, args: &[&str]) -> Value {
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let output = admin(command, namesrv, &with_json).await;
    assert!(
        output.status.success(),
        "{command:?} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    json::parse(&output.stdout).unwrap_or_else(|failure| {
        panic!(
            "{command:?} printed no JSON ({failure}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

pub fn rows(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(rows) => rows.clone(),
        other => panic!("expected rows, got {other:?}"),
    }
}

pub fn text<'a>(row: &'a Value, key: &str) -> &'a str {
    match row.get(key) {
        Some(Value::String(text)) => text,
        other => panic!("{key}: expected text, got {other:?} in {row:?}"),
    }
}

pub fn int(row: &Value, key: &str) -> i64 {
    match row.get(key) {
        Some(Value::Int(value)) => *value,
        other => panic!("{key}: expected a number, got {other:?} in {row:?}"),
    }
}
