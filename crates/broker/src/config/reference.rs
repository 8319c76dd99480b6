//! The configuration reference (`docs/book/src/reference/broker-config.md`) and the complete
//! example (`broker.example.toml`), generated from `BrokerConfig`'s source: each field's doc
//! comment, serde names and type, its default from `BrokerConfig::default()`, and whether it
//! changes live. The test fails when either file differs from what the code says; run it with
//! `TIDEMARK_BLESS=1` to write them.

use std::path::{Path, PathBuf};

use quote::ToTokens;

use super::BrokerConfig;
use crate::live_keys::LIVE;

/// One key, as the struct declares it.
struct Key {
    field: String,
    aliases: Vec<String>,
    serialized: String,
    kind: &'static str,
    doc: String,
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fields of `BrokerConfig` a file can set, in declaration order.
fn keys() -> Vec<Key> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/mod.rs");
    let source = std::fs::read_to_string(&path).expect("read config/mod.rs");
    let file = syn::parse_file(&source).expect("config/mod.rs parses");
    file.items
        .iter()
        .find_map(|item| match item {
            syn::Item::Struct(item) if item.ident == "BrokerConfig" => {
                Some(item.fields.iter().filter_map(key).collect())
            }
            _ => None,
        })
        .expect("BrokerConfig is declared in config/mod.rs")
}

fn key(field: &syn::Field) -> Option<Key> {
    let name = field.ident.as_ref()?.to_string();
    let mut aliases = Vec::new();
    let mut serialized = None;
    let mut skipped = false;
    let mut doc = Vec::new();
    for attr in &field.attrs {
        if attr.path().is_ident("doc") {
            if let syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(text),
                        ..
                    }),
                ..
            }) = &attr.meta
            {
                doc.push(text.value().trim().to_owned());
            }
        } else if attr.path().is_ident("serde") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("alias") {
                    aliases.push(meta.value()?.parse::<syn::LitStr>()?.value());
                } else if meta.path.is_ident("rename") {
                    meta.parse_nested_meta(|inner| {
                        let value = inner.value()?.parse::<syn::LitStr>()?.value();
                        if inner.path.is_ident("serialize") {
                            serialized = Some(value);
                        }
                        Ok(())
                    })?;
                } else if meta.path.is_ident("skip") {
                    skipped = true;
                }
                Ok(())
            })
            .expect("serde attribute parses");
        }
    }
    if skipped {
        return None;
    }
    let ty = field.ty.to_token_stream().to_string().replace(' ', "");
    let kind = kind_of(&ty);
    Some(Key {
        serialized: serialized.unwrap_or_else(|| camel_case(&name)),
        field: name,
        aliases,
        kind,
        doc: plain_doc(&doc.join(" ")),
    })
}

fn kind_of(ty: &str) -> &'static str {
    let inner = ty
        .strip_prefix("Option<")
        .map_or(ty, |rest| rest.trim_end_matches('>'));
    match inner.rsplit("::").next().unwrap_or(inner) {
        "String" => "string",
        "SecretText" => "string (secret)",
        "PathBuf" => "path",
        "bool" => "boolean",
        "FlushDiskType" => "`ASYNC_FLUSH` or `SYNC_FLUSH`",
        "BrokerRole" => "`ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`",
        "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => "integer",
        other => panic!("no reference wording for the type {other}: add it to kind_of"),
    }
}

/// Doc comments without rustdoc's link brackets.
fn plain_doc(text: &str) -> String {
    let mut plain = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        plain.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find("`]") {
            Some(end) => {
                plain.push_str(&after[..end + 1]);
                rest = &after[end + 2..];
                // `[name](target)`: keep the name only.
                if rest.starts_with('(') {
                    rest = rest.find(')').map_or(rest, |close| &rest[close + 1..]);
                }
            }
            None => {
                plain.push('[');
                rest = after;
            }
        }
    }
    plain.push_str(rest);
    plain
}

fn camel_case(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Each key's default as TOML writes it; `None` for a key unset by default.
fn default_value(key: &Key, defaults: &toml::Table) -> Option<String> {
    let value = defaults.get(&key.serialized)?;
    Some(match value {
        toml::Value::String(text) => format!("{text:?}"),
        toml::Value::Integer(number) => number.to_string(),
        toml::Value::Boolean(flag) => flag.to_string(),
        other => panic!("{}: no TOML wording for {other:?}", key.field),
    })
}

fn defaults() -> toml::Table {
    match toml::Value::try_from(BrokerConfig::default()) {
        Ok(toml::Value::Table(table)) => table,
        other => panic!("the defaults serialize to a table: {other:?}"),
    }
}

fn is_live(key: &Key) -> bool {
    LIVE.iter().any(|live| live.field == key.field)
}

/// The RocketMQ spellings of a key: its camelCase aliases.
fn rocketmq_names(key: &Key) -> Vec<&str> {
    key.aliases
        .iter()
        .map(String::as_str)
        .filter(|alias| !alias.contains('_'))
        .collect()
}

fn wrap(text: &str, width: usize, prefix: &str) -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && prefix.len() + line.len() + 1 + word.len() > width {
            lines.push(format!("{prefix}{line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(format!("{prefix}{line}"));
    }
    lines.join("\n")
}

fn reference_page(keys: &[Key], defaults: &toml::Table) -> String {
    let mut page = String::from(
        "# Broker configuration keys\n\n\
         <!-- Generated from BrokerConfig's doc comments by the test config::reference \
         (TIDEMARK_BLESS=1 cargo test -p tidemark-broker --lib config::reference); edit those, \
         not this page. -->\n\n",
    );
    page.push_str(&wrap(
        "Every key `tidemark broker -c FILE` reads, in the order `BrokerConfig` declares them. A \
         file may spell a key in snake_case (as below) or under its RocketMQ name; a `broker.conf` \
         (Java properties) uses the RocketMQ names. Keys of Apache RocketMQ's broker that Tidemark \
         does not use are named in one warning at start and otherwise ignored; any other key is an \
         error naming the nearest known one. *Live* keys change on a running broker \
         (`tidemark admin broker-config set`, mqadmin `updateBrokerConfig`, the web console) and \
         are written back to the file; the others take effect at the next start. \
         `broker.example.toml` at the repository root holds every key with its default.",
        100,
        "",
    ));
    page.push_str("\n\n");
    page.push_str(&format!(
        "{} keys, {} of them live.\n",
        keys.len(),
        keys.iter().filter(|key| is_live(key)).count()
    ));
    for key in keys {
        page.push_str(&format!("\n## `{}`\n\n", key.field));
        let mut facts = Vec::new();
        let names = rocketmq_names(key);
        if !names.is_empty() {
            let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
            facts.push(format!("RocketMQ: {}", quoted.join(", ")));
        }
        facts.push(format!("Type: {}", key.kind));
        facts.push(match default_value(key, defaults) {
            Some(value) => format!("Default: `{value}`"),
            None => "Default: unset".to_owned(),
        });
        facts.push(if is_live(key) { "Live" } else { "Restart" }.to_owned());
        page.push_str(&facts.join(" · "));
        page.push('\n');
        if !key.doc.is_empty() {
            page.push('\n');
            page.push_str(&wrap(&key.doc, 100, ""));
            page.push('\n');
        }
    }
    page
}

fn example_file(keys: &[Key], defaults: &toml::Table) -> String {
    let mut file = String::from(
        "# Tidemark broker configuration: every key with its default (RocketMQ's where RocketMQ has\n\
         # the key). `tidemark broker -c broker.example.toml`. Keys may also be written with\n\
         # RocketMQ's broker.conf names (brokerName, listenPort, ...), and a broker.conf file (Java\n\
         # properties) is read as it is. The reference: docs/book/src/reference/broker-config.md.\n\
         # Generated by the test config::reference from BrokerConfig's doc comments.\n",
    );
    for key in keys {
        file.push('\n');
        let mut comment = key.doc.clone();
        let names = rocketmq_names(key);
        if !names.is_empty() {
            comment.push_str(&format!(" (RocketMQ: {}.)", names.join(", ")));
        }
        if is_live(key) {
            comment.push_str(" Live.");
        }
        if !comment.trim().is_empty() {
            file.push_str(&wrap(comment.trim(), 100, "# "));
            file.push('\n');
        }
        match default_value(key, defaults) {
            Some(value) => file.push_str(&format!("{} = {value}\n", key.field)),
            None => file.push_str(&format!("# {} = ... (unset by default)\n", key.field)),
        }
    }
    file
}

/// Compares `path` with `expected`; writes it instead under `TIDEMARK_BLESS=1`.
fn check_or_bless(path: &Path, expected: &str) {
    if std::env::var_os("TIDEMARK_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(path, expected).expect("write the generated file");
        return;
    }
    let actual = std::fs::read_to_string(path).unwrap_or_default();
    if actual != expected {
        let first = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(actual.lines().count().min(expected.lines().count()));
        panic!(
            "{} is not what BrokerConfig says (first difference at line {}: {:?} where the \
             code gives {:?}); regenerate it with TIDEMARK_BLESS=1 cargo test -p tidemark-broker \
             --lib config::reference",
            path.display(),
            first + 1,
            actual.lines().nth(first).unwrap_or("<end of file>"),
            expected.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn the_reference_page_and_the_example_file_say_what_the_code_does() {
    let keys = keys();
    let defaults = defaults();
    let declared: std::collections::BTreeSet<&str> =
        keys.iter().map(|key| key.field.as_str()).collect();
    for name in super::tidemark_keys() {
        let known = declared.contains(name)
            || keys
                .iter()
                .any(|key| key.aliases.iter().any(|alias| alias == name));
        assert!(known, "{name} is read but not documented");
    }
    let undocumented: Vec<&str> = keys
        .iter()
        .filter(|key| key.doc.is_empty())
        .map(|key| key.field.as_str())
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys without a doc comment: {undocumented:?}"
    );
    let root = repository_root();
    check_or_bless(
        &root.join("docs/book/src/reference/broker-config.md"),
        &reference_page(&keys, &defaults),
    );
    check_or_bless(
        &root.join("broker.example.toml"),
        &example_file(&keys, &defaults),
    );
}

#[test]
fn camel_case_and_doc_links_read_as_rocketmq_and_prose_do() {
    assert_eq!(camel_case("flush_disk_type"), "flushDiskType");
    assert_eq!(
        plain_doc("see [`super::BrokerConfig`] and [`load`](Self::load)."),
        "see `super::BrokerConfig` and `load`."
    );
}
