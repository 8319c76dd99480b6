//! ARCHITECTURE.md's rule that modules import one way: in every crate of the workspace, the
//! top-level modules (a file or a folder under `src/`) and the `crate::` paths between them form
//! no circle but the one named there on purpose, `config` ↔ `live_keys` in the broker. Test
//! modules (inline, and files declared `#[cfg(test)] mod …;`) and comments are left out: a test
//! may reach anywhere, and a doc link is no import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::rust_files;

/// The circles ARCHITECTURE.md names, each as its sorted modules, per crate.
const DELIBERATE: &[(&str, &[&str])] = &[("broker", &["config", "live_keys"])];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The modules a source file names through `crate::`, its test module and comments left out.
fn crate_paths(source: &str) -> BTreeSet<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or(source);
    let mut named = BTreeSet::new();
    for line in code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
    {
        for (at, _) in line.match_indices("crate::") {
            let before = line[..at].chars().last();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = line[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() {
                named.insert(name);
            }
        }
    }
    named
}

/// Files that are test modules as a whole: declared `#[cfg(test)] mod name;` in their parent
/// (`dir/name.rs` or `dir/name/`, where `dir` is the parent's module directory).
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut test_only = Vec::new();
    for file in files {
        let Ok(source) = std::fs::read_to_string(file) else {
            continue;
        };
        let stem = file
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or_default();
        let parent = file.parent().unwrap_or(Path::new(""));
        let module_dir = if matches!(stem, "mod" | "lib" | "main") {
            parent.to_path_buf()
        } else {
            parent.join(stem)
        };
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .strip_prefix("pub(crate) ")
                .unwrap_or(pair[1])
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0] == "#[cfg(test)]", declared) {
                test_only.push(module_dir.join(format!("{name}.rs")));
                test_only.push(module_dir.join(name));
            }
        }
    }
    test_only
}

/// Top-level module → the top-level modules it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let test_only = test_only_files(&files);
    files.retain(|file| !test_only.iter().any(|skipped| file.starts_with(skipped)));
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative
            .components()
            .next()
            .and_then(|part| part.as_os_str().to_str())
            .unwrap_or_default();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("readable source");
        let entry = edges.entry(module.clone()).or_default();
        entry.extend(
            crate_paths(&source)
                .into_iter()
                .filter(|name| *name != module),
        );
    }
    edges
}

/// Strongly connected groups of more than one module (Tarjan's algorithm), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, module: &'a str) {
            let at = self.index.len();
            self.index.insert(module, at);
            self.low.insert(module, at);
            self.stack.push(module);
            self.on_stack.insert(module);
            let edges = self.edges;
            for next in edges[module]
                .iter()
                .filter(|next| edges.contains_key(*next))
            {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[module].min(self.low[next]);
                    self.low.insert(module, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[module].min(self.index[next]);
                    self.low.insert(module, low);
                }
            }
            if self.low[module] == self.index[module] {
                let mut group = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    group.push(member.to_owned());
                    if member == module {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in edges.keys() {
        if !walk.index.contains_key(module.as_str()) {
            walk.visit(module);
        }
    }
    walk.found
}

#[test]
fn modules_import_one_way_but_for_the_named_circle() {
    let mut unexpected = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(crates_dir())
        .expect("crates dir")
        .flatten()
    {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let name = entry.file_name().to_string_lossy().into_owned();
        for circle in circles(&graph(&src)) {
            let named = DELIBERATE
                .iter()
                .any(|(krate, modules)| *krate == name && circle == *modules);
            if !named {
                unexpected.push(format!("{name}: {}", circle.join(" ↔ ")));
            }
        }
    }
    assert!(
        crates >= 10,
        "found {crates} crates under {:?}",
        crates_dir()
    );
    assert!(
        unexpected.is_empty(),
        "modules importing each other in a circle (ARCHITECTURE.md: modules import one way): {unexpected:?}"
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let link = |from: &str, to: &[&str]| {
        (
            from.to_owned(),
            to.iter().map(|name| (*name).to_owned()).collect(),
        )
    };
    edges.extend([
        link("a", &["b"]),
        link("b", &["c"]),
        link("c", &["a", "d"]),
        link("d", &[]),
    ]);
    assert_eq!(circles(&edges), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        crate_paths("use crate::state::X;\n// crate::doc\nfn f() { my_crate::no(); }\n#[cfg(test)]\nuse crate::tests;"),
        BTreeSet::from(["state".to_owned()])
    );
}
