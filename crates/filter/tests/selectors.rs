//! Selectors against property maps, with the outcomes RocketMQ's evaluator gives; refused
//! selectors; and, by proptest, a reference model of the common subset and a parser that never
//! panics.

use std::collections::HashMap;

use proptest::prelude::*;
use tidemark_filter::Sql92Filter;

fn outcome(selector: &str, properties: &[(&str, &str)]) -> Option<bool> {
    let map: HashMap<&str, &str> = properties.iter().copied().collect();
    let filter = Sql92Filter::compile(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
    filter
        .evaluate(|name| map.get(name).copied())
        .ok()
        .flatten()
}

fn matches(selector: &str, properties: &[(&str, &str)]) -> bool {
    outcome(selector, properties) == Some(true)
}

#[test]
fn numbers_strings_and_missing_properties() {
    let m = [
        ("a", "10"),
        ("color", "red"),
        ("price", "15.5"),
        ("flag", "TRUE"),
    ];
    assert!(matches("a > 5", &m));
    assert!(matches("a = 10", &m));
    assert!(matches("a >= 10 AND a <= 10", &m));
    assert!(matches("a BETWEEN 10 AND 12", &m));
    assert!(!matches("a NOT BETWEEN 5 AND 12", &m));
    assert!(matches("a > -5", &m));
    assert!(!matches("price > 15", &m), "15.5 is not an int: no match");
    assert!(matches("price > 15.0", &m));
    assert!(matches("color = 'red'", &m));
    assert!(matches("color <> 'blue'", &m));
    assert!(matches("color IN ('blue', 'red')", &m));
    assert!(matches("color NOT IN ('blue')", &m));
    assert!(matches(
        "color CONTAINS 'e' AND color STARTSWITH 'r' AND color ENDSWITH 'd'",
        &m
    ));
    assert!(matches("color NOT CONTAINS 'x'", &m));
    assert!(matches("flag = TRUE", &m));
    assert!(matches("region IS NULL AND a IS NOT NULL", &m));
    assert!(matches("TRUE", &m));
    assert!(!matches("FALSE OR NULL", &m));
    // Unknown stays unknown through NOT and <>.
    assert_eq!(outcome("region = 'eu'", &m), None);
    assert_eq!(outcome("NOT (region = 'eu')", &m), None);
    assert_eq!(outcome("region <> 'eu'", &m), None);
    assert_eq!(outcome("region > 3", &m), None);
    assert_eq!(outcome("region IN ('eu')", &m), None);
    assert_eq!(outcome("region CONTAINS 'eu'", &m), Some(false));
    assert_eq!(outcome("region NOT CONTAINS 'eu'", &m), Some(false));
    // Three-valued AND / OR.
    assert_eq!(outcome("region = 'eu' AND a = 10", &m), None);
    assert_eq!(outcome("region = 'eu' AND a = 11", &m), Some(false));
    assert_eq!(outcome("region = 'eu' OR a = 10", &m), Some(true));
    assert_eq!(outcome("region = 'eu' OR a = 11", &m), None);
    // A property that does not parse as the number it meets: no answer at all, even where
    // another branch would be true; but a decided left side never looks right.
    assert_eq!(outcome("color > 3 OR a = 10", &m), None);
    assert_eq!(outcome("a = 10 OR color > 3", &m), Some(true));
    assert_eq!(outcome("color = 3", &m), None);
    // Two strings under <, > are compared as numbers.
    assert!(matches("a > price", &[("a", "20"), ("price", "15.5")]));
    assert_eq!(outcome("a > color", &m), None);
    // A property alone is a condition that is never true for a string.
    assert_eq!(outcome("flag", &m), Some(false));
    assert_eq!(outcome("NOT flag", &m), Some(true));
    assert_eq!(outcome("missing", &m), None);
    // Beyond int: the literal is a long, the property is parsed as one.
    assert!(matches("big > 3000000000", &[("big", "3000000001")]));
    assert_eq!(outcome("big > 5", &[("big", "3000000001")]), None);
    // System properties are properties too.
    assert!(matches("TAGS = 'TagA'", &[("TAGS", "TagA")]));
    // Keywords in any case, comments, and a trailing text never read.
    assert!(matches(
        "a between 1 and 20 /* c */ and color in ('red') -- end\n",
        &m
    ));
    assert!(matches("a = 10 ignored", &m));
}

#[test]
fn refused_selectors() {
    for bad in [
        "",
        "a >",
        "a = 'x' AND",
        "a = NULL",
        "a > 'x'",
        "a > TRUE",
        "(a = 1) > 2",
        "5",
        "'text'",
        "-a",
        "NOT 5",
        "a BETWEEN 9 AND 1",
        "a BETWEEN 'x' AND 'y'",
        "5 IN ('a')",
        "a IN (1, 2)",
        "a IN ()",
        "a != 1",
        "a > 0.0",
        "a > 1e400",
        "a = 99999999999999999999",
        "TRUE = 5",
        "a IS 5",
        "(a = 1",
        "a = 'open",
        "a = 1 -- no newline",
        "a CONTAINS b",
    ] {
        assert!(
            Sql92Filter::compile(bad).is_err(),
            "{bad:?} should be refused"
        );
    }
    let deep = format!("{}a = 1{}", "(".repeat(200), ")".repeat(200));
    assert!(Sql92Filter::compile(&deep).is_err(), "nesting is bounded");
    let not_chain = format!("{}a = 1", "NOT ".repeat(200));
    assert!(
        Sql92Filter::compile(&not_chain).is_err(),
        "nesting is bounded"
    );
}

/// The common subset, generated as a tree and rendered to text; the model says what RocketMQ
/// gives for it.
#[derive(Debug, Clone)]
enum Model {
    IntCompare(&'static str, &'static str, i32),
    TextEqual(&'static str, String),
    In(&'static str, Vec<String>, bool),
    IsNull(&'static str, bool),
    Not(Box<Model>),
    And(Box<Model>, Box<Model>),
    Or(Box<Model>, Box<Model>),
}

const NAMES: [&str; 3] = ["a", "b", "c"];

fn model() -> impl Strategy<Value = Model> {
    let name = prop::sample::select(NAMES.to_vec());
    let word = prop::sample::select(vec!["x", "y", "z", "1", "12"]).prop_map(str::to_owned);
    let op = prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]);
    let leaf = prop_oneof![
        (name.clone(), op, -20i32..20).prop_map(|(n, o, v)| Model::IntCompare(n, o, v)),
        (name.clone(), word.clone()).prop_map(|(n, w)| Model::TextEqual(n, w)),
        (
            name.clone(),
            prop::collection::vec(word, 1..3),
            any::<bool>()
        )
            .prop_map(|(n, ws, neg)| Model::In(n, ws, neg)),
        (name, any::<bool>()).prop_map(|(n, neg)| Model::IsNull(n, neg)),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|m| Model::Not(Box::new(m))),
            (inner.clone(), inner.clone()).prop_map(|(l, r)| Model::And(Box::new(l), Box::new(r))),
            (inner.clone(), inner).prop_map(|(l, r)| Model::Or(Box::new(l), Box::new(r))),
        ]
    })
}

fn render(m: &Model) -> String {
    match m {
        Model::IntCompare(n, o, v) => format!("{n} {o} {v}"),
        Model::TextEqual(n, w) => format!("{n} = '{w}'"),
        Model::In(n, ws, neg) => format!(
            "{n} {}IN ({})",
            if *neg { "NOT " } else { "" },
            ws.iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Model::IsNull(n, neg) => format!("{n} IS {}NULL", if *neg { "NOT " } else { "" }),
        Model::Not(inner) => format!("NOT ({})", render(inner)),
        Model::And(l, r) => format!("({}) AND ({})", render(l), render(r)),
        Model::Or(l, r) => format!("({}) OR ({})", render(l), render(r)),
    }
}

/// `Err(())`: the evaluation fails (a property that is not an int met an int).
fn expect(m: &Model, props: &HashMap<&str, String>) -> Result<Option<bool>, ()> {
    Ok(match m {
        Model::IntCompare(n, o, v) => match props.get(n) {
            None => None,
            Some(text) => {
                let value: i32 = text.parse().map_err(|_| ())?;
                Some(match *o {
                    "=" => value == *v,
                    "<>" => value != *v,
                    "<" => value < *v,
                    "<=" => value <= *v,
                    ">" => value > *v,
                    _ => value >= *v,
                })
            }
        },
        Model::TextEqual(n, w) => props.get(n).map(|text| text == w),
        Model::In(n, ws, neg) => props.get(n).map(|text| ws.contains(text) != *neg),
        Model::IsNull(n, neg) => Some(props.contains_key(n) == *neg),
        Model::Not(inner) => expect(inner, props)?.map(|b| !b),
        Model::And(l, r) => {
            let l = expect(l, props)?;
            if l == Some(false) {
                return Ok(Some(false));
            }
            let r = expect(r, props)?;
            if r == Some(false) {
                Some(false)
            } else if l.is_none() || r.is_none() {
                None
            } else {
                Some(true)
            }
        }
        Model::Or(l, r) => {
            let l = expect(l, props)?;
            if l == Some(true) {
                return Ok(Some(true));
            }
            let r = expect(r, props)?;
            if r == Some(true) {
                Some(true)
            } else if l.is_none() || r.is_none() {
                None
            } else {
                Some(false)
            }
        }
    })
}

fn properties() -> impl Strategy<Value = HashMap<&'static str, String>> {
    let value = prop_oneof![
        (-25i32..25).prop_map(|v| v.to_string()),
        prop::sample::select(vec!["x", "y", "1", "12", "1.5", ""]).prop_map(str::to_owned),
    ];
    prop::collection::hash_map(prop::sample::select(NAMES.to_vec()), value, 0..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_model(m in model(), props in properties()) {
        let text = render(&m);
        let filter = Sql92Filter::compile(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let got = filter.evaluate(|name| props.get(name).map(String::as_str)).map_err(|_| ());
        prop_assert_eq!(got, expect(&m, &props), "{} on {:?}", text, props);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_any_text(text in "[ -~]{0,40}|(\\(|NOT |a|=|'|1|AND |OR |IN|BETWEEN |\\)|,|-| ){0,30}") {
        if let Ok(filter) = Sql92Filter::compile(&text) {
            let _ = filter.matches(|name| (name == "a").then_some("1"));
        }
    }
}
