//! ARCHITECTURE.md's lock-order table against the code: every `Mutex` and `RwLock` field in the
//! crates' sources must be named there (in a nesting or among the leaves), and every name there
//! must still be a lock field. A new lock cannot land without its place in the order.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::rust_files;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The type of a field declaration such as `pub(crate) name: Mutex<…>,`, if it is a lock.
fn lock_field(line: &str) -> Option<&str> {
    let mut rest = line.trim();
    for visibility in ["pub(crate) ", "pub(super) ", "pub "] {
        rest = rest.strip_prefix(visibility).unwrap_or(rest);
    }
    let (name, ty) = rest.split_once(':')?;
    let name = name.trim();
    // A lock behind an `Arc` or an `Option` is a lock of this struct too.
    let mut ty = ty.trim_start();
    for wrapper in ["Arc<", "Option<"] {
        ty = ty.strip_prefix(wrapper).unwrap_or(ty);
    }
    let is_name = !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let lock = ["Mutex<", "RwLock<"]
        .iter()
        .any(|kind| ty.starts_with(kind) || ty.contains(&format!("::{kind}")));
    (is_name && lock && ty.split('<').next().is_some_and(|head| !head.contains(' ')))
        .then_some(name)
}

/// `Type.field` for every lock field of a struct in `source`, test modules left out.
fn locks_in(source: &str) -> Vec<String> {
    let source = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(source);
    let mut found = Vec::new();
    let mut current: Option<(String, usize)> = None;
    for line in source.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        let declared = [
            "pub(crate) struct ",
            "pub(super) struct ",
            "pub struct ",
            "struct ",
        ]
        .iter()
        .find_map(|prefix| trimmed.strip_prefix(prefix));
        if let Some(rest) = declared {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            current = rest.trim_end().ends_with('{').then_some((name, indent));
            continue;
        }
        if let Some((name, struct_indent)) = &current {
            if trimmed.starts_with('}') && indent == *struct_indent {
                current = None;
            } else if let Some(field) = lock_field(line) {
                found.push(format!("{name}.{field}"));
            }
        }
    }
    found
}

/// Every `Type.field` the lock-order section of ARCHITECTURE.md names.
fn documented() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = text
        .split("\n## Lock order\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"Lock order\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| {
            quoted.split_once('.').is_some_and(|(ty, field)| {
                ty.starts_with(|c: char| c.is_ascii_uppercase())
                    && ty.chars().all(|c| c.is_alphanumeric())
                    && !field.is_empty()
                    && field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_lock_has_its_place_in_the_documented_order() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    let mut in_code = BTreeSet::new();
    for file in files {
        let path = file.to_string_lossy();
        let test_file =
            path.contains("/tests/") || path.ends_with("/tests.rs") || path.ends_with("_tests.rs");
        if test_file || !path.contains("/src/") {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("source file");
        in_code.extend(locks_in(&source));
    }
    assert!(
        in_code.len() > 50,
        "the scan found only {} locks: it no longer reads the sources",
        in_code.len()
    );
    let documented = documented();
    let missing: Vec<_> = in_code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        missing.is_empty(),
        "locks with no place in ARCHITECTURE.md's lock order: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md's lock order names what is no longer a lock field: {stale:?}"
    );
}

#[test]
fn the_scan_reads_lock_fields_and_nothing_else() {
    let source = "pub struct Table {\n    inner: Mutex<u8>,\n    pub(crate) slots: std::sync::RwLock<u8>,\n    updating: tokio::sync::Mutex<()>,\n    count: u64,\n    guard: Option<Mutex<u8>>,\n}\n\
                  fn f() { let held: Mutex<u8> = Mutex::new(0); }\n\
                  #[cfg(test)]\nmod tests {\n    struct Fake {\n        inner: Mutex<u8>,\n    }\n}\n";
    assert_eq!(
        locks_in(source),
        [
            "Table.inner",
            "Table.slots",
            "Table.updating",
            "Table.guard"
        ]
    );
}
