//! The docs book as a reader sees it, in headless Chromium: every page of `docs/book` that shows
//! pictures (the console's screenshots) is built with mdBook, opened from disk, and each of its
//! images must have loaded and be drawn at a readable size, with nothing pushing the page wider
//! than the window. The link check (`scripts/lib/check-book-links.py`) covers the text; this
//! covers what only a browser can tell. The pages are saved as screenshots in
//! `target/book-screenshots/` to look at.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tidemark_protocol::json::Value;
use tidemark_tests::webdriver::Driver;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Builds the book into `dest` with the `mdbook` scripts/install-deps installs.
fn build_book(dest: &Path) {
    let root = workspace_root();
    let mdbook = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cargo/bin/mdbook"))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("mdbook"));
    let output = Command::new(&mdbook)
        .arg("build")
        .arg(root.join("docs/book"))
        .arg("--dest-dir")
        .arg(dest)
        .output()
        .unwrap_or_else(|failure| {
            panic!("mdbook did not run ({failure}); scripts/install-deps installs it")
        });
    assert!(
        output.status.success(),
        "mdbook build failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every HTML page under `dir` that has an `<img`, relative to `dir`, sorted.
fn pages_with_pictures(dir: &Path, base: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read the built book");
    for entry in entries {
        let path = entry.expect("book entry").path();
        if path.is_dir() {
            pages_with_pictures(&path, base, found);
        } else if path.extension().is_some_and(|ext| ext == "html") {
            let text = std::fs::read_to_string(&path).expect("read a page");
            if text.contains("<img") {
                let relative = path.strip_prefix(base).expect("under the book");
                found.push(relative.to_path_buf());
            }
        }
    }
    found.sort();
}

/// What the page shows of each of its images once all have finished loading (or failed):
/// `src`, whether it decoded, and the width it is drawn at; then the page's overflow.
const MEASURE: &str = r#"
const images = Array.from(document.images);
if (!images.every(image => image.complete)) { return null; }
const lines = images.map(image =>
  image.getAttribute('src') + ' ' + (image.naturalWidth > 0 ? 'loaded' : 'broken') + ' ' +
  Math.round(image.getBoundingClientRect().width));
const overflow = document.documentElement.scrollWidth - window.innerWidth;
lines.push('overflow ' + overflow);
return lines.join('\n');
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_pages_show_their_pictures() {
    let built = tempfile::tempdir().expect("temp dir");
    build_book(built.path());
    let mut pages = Vec::new();
    pages_with_pictures(built.path(), built.path(), &mut pages);
    assert!(
        pages
            .iter()
            .any(|page| page.ends_with("guides/console.html")),
        "the console guide shows the console: {pages:?}"
    );
    let shots = workspace_root().join("target").join("book-screenshots");

    let driver = Driver::start().await;
    let browser = driver.session().await;
    let mut problems = Vec::new();
    for page in &pages {
        let url = format!("file://{}", built.path().join(page).display());
        browser.open(&url).await;
        let mut report = None;
        for _ in 0..100 {
            if let Value::String(text) = browser.execute(MEASURE).await {
                report = Some(text);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Some(report) = report else {
            problems.push(format!(
                "{}: images still loading after 10 s",
                page.display()
            ));
            continue;
        };
        for line in report.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["overflow", pixels] if pixels.parse::<i64>().unwrap_or(1) > 0 => problems.push(
                    format!("{}: wider than the window by {pixels} px", page.display()),
                ),
                [src, "broken", _] => {
                    problems.push(format!("{}: {src} does not load", page.display()))
                }
                [src, "loaded", width] if width.parse::<u32>().unwrap_or(0) < 200 => {
                    problems.push(format!("{}: {src} drawn {width} px wide", page.display()))
                }
                _ => {}
            }
        }
        let name = page.to_string_lossy().replace(['/', '\\'], "-");
        browser
            .screenshot(&shots.join(name.replace(".html", ".png")))
            .await;
    }
    browser.close().await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
