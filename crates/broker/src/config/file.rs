//! Reading `broker.conf` (Java properties) into the table serde reads a config from, and
//! naming keys as the file spelled them.

/// The spelling of `key` (snake_case) the file used: `mappedFileSizeCommitLog` when it wrote
/// that, `mapped_file_size_commit_log` otherwise.
pub(crate) fn spelled_as_written(key: &str, written: &[String]) -> String {
    let folded = |name: &str| -> String {
        name.chars()
            .filter(|c| *c != '_')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = folded(key);
    written
        .iter()
        .find(|name| folded(name) == wanted)
        .cloned()
        .unwrap_or_else(|| key.to_owned())
}

/// `key=value` lines (Java properties, as `broker.conf` is) as a TOML table, with numbers and
/// booleans typed so serde can read them.
pub(crate) fn properties_to_table(text: &str) -> toml::Table {
    let mut table = toml::Table::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        // "04" (deleteWhen) is text in RocketMQ; a leading zero keeps it so.
        let leading_zero = value.len() > 1 && value.starts_with('0');
        let typed = if let Some(number) = value.parse::<i64>().ok().filter(|_| !leading_zero) {
            toml::Value::Integer(number)
        } else if value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false") {
            toml::Value::Boolean(value.eq_ignore_ascii_case("true"))
        } else {
            toml::Value::String(value.to_owned())
        };
        table.insert(key.to_owned(), typed);
    }
    table
}
