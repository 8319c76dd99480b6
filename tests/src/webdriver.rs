//! Just enough of the W3C WebDriver protocol to drive headless Chromium through Debian's
//! `chromedriver` in tests: open pages, find elements, type, click, read the page, save
//! screenshots. Plain HTTP/1.1 on a loopback port, JSON through the protocol crate.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tidemark_protocol::json::{self, Object, Value, WriteOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The key W3C WebDriver names element references by.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

fn object(entries: Vec<(&str, Value)>) -> Value {
    let mut object = Object::new();
    for (key, value) in entries {
        object.push(s(key), value);
    }
    Value::Object(object)
}

/// How long one WebDriver call may take (a page load included).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One HTTP/1.1 response: its status and body, read by its `Content-Length` (chromedriver
/// keeps the connection open after answering).
pub async fn read_response(stream: &mut TcpStream) -> std::io::Result<(u16, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before the headers ended",
            ));
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    });
    let mut body = buffer.split_off(head_end);
    match length {
        Some(length) => {
            while body.len() < length {
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..read]);
            }
            body.truncate(length);
        }
        // Without a length the body ends with the connection, in chunks if so marked (Go's
        // servers chunk larger answers).
        None => {
            stream.read_to_end(&mut body).await?;
            let chunked = head.lines().any(|line| {
                line.split_once(':').is_some_and(|(name, value)| {
                    name.trim().eq_ignore_ascii_case("transfer-encoding")
                        && value.trim().eq_ignore_ascii_case("chunked")
                })
            });
            if chunked {
                body = dechunked(&body)?;
            }
        }
    }
    Ok((status, body))
}

/// A chunked body's content: each chunk is its size in hex, CRLF, the bytes, CRLF; size 0 ends.
fn dechunked(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut body = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|window| window == b"\r\n")
            .ok_or_else(|| bad("chunk size line unterminated"))?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| bad("chunk size is not hex"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if raw.len() < size + 2 {
            return Err(bad("chunk shorter than its size"));
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// A `chromedriver` process on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// Starts `chromedriver` (from `PATH`); panics with what to install when it is missing.
    pub async fn start() -> Driver {
        let port = crate::free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|failure| {
                panic!("chromedriver did not start ({failure}); install Debian's chromium and chromium-driver (scripts/install-deps does)")
            });
        let driver = Driver { child, port };
        for _ in 0..100 {
            if let Ok((200, _)) = driver.call("GET", "/status", None).await {
                return driver;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver not ready within 10 s");
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> std::io::Result<(u16, Value)> {
        let body = body
            .map(|value| json::write(value, WriteOptions::STANDARD))
            .unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let (status, payload) = tokio::time::timeout(CALL_TIMEOUT, read_response(&mut stream))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{method} {path}: no answer within {CALL_TIMEOUT:?}"),
                )
            })??;
        let value = json::parse(&payload).unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// A headless Chromium session.
    pub async fn session(&self) -> Session<'_> {
        let args = Value::Array(
            [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
            ]
            .iter()
            .map(|arg| s(arg))
            .collect(),
        );
        let capabilities = object(vec![(
            "capabilities",
            object(vec![(
                "alwaysMatch",
                object(vec![
                    ("browserName", s("chrome")),
                    ("goog:chromeOptions", object(vec![("args", args)])),
                ]),
            )]),
        )]);
        let (status, value) = self
            .call("POST", "/session", Some(&capabilities))
            .await
            .expect("new session");
        let id = match value.get("value").and_then(|value| value.get("sessionId")) {
            Some(Value::String(id)) => id.clone(),
            _ => panic!("no WebDriver session ({status}): {value:?}"),
        };
        Session { driver: self, id }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser session.
#[derive(Debug)]
pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Session<'_> {
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let full = format!("/session/{}{path}", self.id);
        let (status, value) = self
            .driver
            .call(method, &full, body.as_ref())
            .await
            .expect("WebDriver call");
        assert_eq!(status, 200, "{method} {path}: {value:?}");
        value.get("value").cloned().unwrap_or(Value::Null)
    }

    pub async fn open(&self, url: &str) {
        self.command("POST", "/url", Some(object(vec![("url", s(url))])))
            .await;
    }

    /// Waits (up to 15 s) for a page whose title starts with `prefix` — a click that submits a
    /// form returns before the next page is there.
    pub async fn wait_for_title(&self, prefix: &str) -> String {
        let mut title = String::new();
        for _ in 0..150 {
            title = self.title().await;
            if title.starts_with(prefix) {
                return title;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no page titled {prefix:?} within 15 s (last: {title:?})\n{}",
            self.source().await
        );
    }

    pub async fn title(&self) -> String {
        match self.command("GET", "/title", None).await {
            Value::String(title) => title,
            other => panic!("title: {other:?}"),
        }
    }

    pub async fn source(&self) -> String {
        match self.command("GET", "/source", None).await {
            Value::String(source) => source,
            other => panic!("source: {other:?}"),
        }
    }

    /// The first element matching the CSS `selector`.
    pub async fn find(&self, selector: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                Some(object(vec![
                    ("using", s("css selector")),
                    ("value", s(selector)),
                ])),
            )
            .await;
        match found.get(ELEMENT_KEY) {
            Some(Value::String(id)) => id.clone(),
            _ => panic!("no element {selector}: {found:?}"),
        }
    }

    pub async fn clear_and_type(&self, selector: &str, text: &str) {
        let element = self.find(selector).await;
        self.command(
            "POST",
            &format!("/element/{element}/clear"),
            Some(object(vec![])),
        )
        .await;
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(object(vec![("text", s(text))])),
        )
        .await;
    }

    pub async fn click(&self, selector: &str) {
        let element = self.find(selector).await;
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(object(vec![])),
        )
        .await;
    }

    /// Runs `script` (a function body; `return` gives the result) in the page and returns
    /// what it returned.
    pub async fn execute(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(object(vec![
                ("script", s(script)),
                ("args", Value::Array(Vec::new())),
            ])),
        )
        .await
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let Value::String(encoded) = self.command("GET", "/screenshot", None).await else {
            panic!("no screenshot");
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot directory");
        }
        std::fs::write(path, base64_decode(&encoded)).expect("write the screenshot");
    }

    pub async fn close(self) {
        let _ = self
            .driver
            .call("DELETE", &format!("/session/{}", self.id), None)
            .await;
    }
}

/// Standard base64 (what WebDriver screenshots are sent in).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for digit in text.bytes().filter_map(value) {
        bits = (bits << 6) | u32::from(digit);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

/// One HTTP/1.1 request to a server on 127.0.0.1 (the console, `/metrics`); (status, body).
pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("send");
    let (status, body) = tokio::time::timeout(Duration::from_secs(30), read_response(&mut stream))
        .await
        .expect("an answer within 30 s")
        .expect("read the answer");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The console's form token in `page`.
pub fn csrf_token(page: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = page.find(marker).expect("a form with a token") + marker.len();
    page[start..].split('"').next().expect("token").to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        assert_eq!(super::base64_decode("aGVsbG8="), b"hello");
        assert_eq!(super::base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
    }
}
