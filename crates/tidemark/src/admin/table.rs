//! How the admin commands print what they found: an aligned table with `#`-headed columns (as
//! mqadmin prints), or with `--json` one JSON line an operator's script can read.

use std::io::Write;

use clap::Args;
use tidemark_protocol::json::{self, Object, Value, WriteOptions};

/// The output switch every listing command takes.
#[derive(Debug, Args, Clone, Copy)]
pub struct Format {
    /// One JSON line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One value of a row.
#[derive(Debug, Clone)]
pub enum Cell {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Text(text) => text.clone(),
            Cell::Int(value) => value.to_string(),
            Cell::Float(value) => format!("{value:.2}"),
            Cell::Bool(value) => value.to_string(),
        }
    }

    fn is_number(&self) -> bool {
        matches!(self, Cell::Int(_) | Cell::Float(_))
    }

    fn json(&self) -> Value {
        match self {
            Cell::Text(text) => Value::String(text.clone()),
            Cell::Int(value) => Value::Int(*value),
            Cell::Float(value) => Value::Float(*value),
            Cell::Bool(value) => Value::Bool(*value),
        }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell::Text(text.to_owned())
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell::Text(text)
    }
}

impl From<&String> for Cell {
    fn from(text: &String) -> Self {
        Cell::Text(text.clone())
    }
}

impl From<i64> for Cell {
    fn from(value: i64) -> Self {
        Cell::Int(value)
    }
}

impl From<i32> for Cell {
    fn from(value: i32) -> Self {
        Cell::Int(i64::from(value))
    }
}

impl From<usize> for Cell {
    fn from(value: usize) -> Self {
        Cell::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Cell {
    fn from(value: f64) -> Self {
        Cell::Float(value)
    }
}

impl From<bool> for Cell {
    fn from(value: bool) -> Self {
        Cell::Bool(value)
    }
}

/// Rows under named columns: each column has a table header and a JSON key.
#[derive(Debug)]
pub struct Table {
    columns: Vec<(&'static str, &'static str)>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// `columns`: (table header without its `#`, JSON key).
    pub fn new(columns: &[(&'static str, &'static str)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it has one cell per column.
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "one cell per column");
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows as JSON objects keyed by the columns' JSON keys.
    pub fn json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|row| {
                    let mut object = Object::new();
                    for ((_, key), cell) in self.columns.iter().zip(row) {
                        object.push(Value::String((*key).to_owned()), cell.json());
                    }
                    Value::Object(object)
                })
                .collect(),
        )
    }

    /// The aligned table: text left-aligned, numbers right-aligned, two spaces between columns.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let texts: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(Cell::text).collect())
            .collect();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(index, (header, _))| {
                texts
                    .iter()
                    .map(|row| row[index].chars().count())
                    .chain(std::iter::once(header.chars().count() + 1))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|index| {
                !self.rows.is_empty() && self.rows.iter().all(|row| row[index].is_number())
            })
            .collect();
        let line = |cells: Vec<String>| {
            let mut line = String::new();
            for (index, cell) in cells.iter().enumerate() {
                if index > 0 {
                    line.push_str("  ");
                }
                let pad = widths[index].saturating_sub(cell.chars().count());
                let last = index + 1 == cells.len();
                if numeric[index] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            line
        };
        writeln!(
            out,
            "{}",
            line(
                self.columns
                    .iter()
                    .map(|(header, _)| format!("#{header}"))
                    .collect()
            )
        )?;
        for row in texts {
            writeln!(out, "{}", line(row))?;
        }
        Ok(())
    }

    /// Prints the table in the chosen format.
    pub fn print(&self, format: Format) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        if format.json {
            writeln!(out, "{}", json::write(&self.json(), WriteOptions::STANDARD))?;
        } else {
            self.write_text(&mut out)?;
        }
        out.flush()?;
        Ok(())
    }
}

/// Prints an action's outcome: `text` for people, `object` with `--json`.
pub fn print_outcome(format: Format, text: &str, object: Object) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if format.json {
        super::write_json(&mut out, object)?;
    } else {
        writeln!(out, "{text}")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_columns_align_and_json_keys_follow_the_columns() {
        let mut table = Table::new(&[("Topic", "topic"), ("Queues", "queues")]);
        table.row(vec!["orders".into(), 16.into()]);
        table.row(vec!["a".into(), 4.into()]);
        let mut text = Vec::new();
        table.write_text(&mut text).expect("write");
        assert_eq!(
            String::from_utf8(text).expect("utf-8"),
            "#Topic  #Queues\norders       16\na             4\n"
        );
        assert_eq!(
            json::write(&table.json(), WriteOptions::STANDARD),
            r#"[{"topic":"orders","queues":16},{"topic":"a","queues":4}]"#
        );
    }
}
