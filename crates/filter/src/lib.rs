//! `tidemark-filter`: RocketMQ's SQL92 message filter (`MessageSelector.bySql`,
//! `expressionType = SQL92`). An expression is compiled once ([`Sql92Filter::compile`]) and
//! evaluated on each message's properties ([`Sql92Filter::matches`]).
//!
//! The language and its semantics are RocketMQ's, including its quirks, so a subscription
//! selects the same messages here as on Apache's broker: properties are strings, compared with
//! a number by parsing them as that number's type; `<`, `>`, `<=`, `>=` compare numbers only
//! (two strings are parsed as numbers); a missing property makes a condition unknown, and
//! unknown never matches (`NOT` of unknown is unknown); an evaluation error — a property that
//! does not parse as the number it is compared with — means no match for the whole expression;
//! `IN`, `CONTAINS`, `STARTSWITH`, `ENDSWITH` take string literals; float literals must be
//! positive and finite (`-` is an operator); text after a complete expression is not read.

mod eval;
mod lex;
mod parse;
mod value;

use thiserror::Error;

/// Why an expression is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FilterError {
    #[error("invalid SQL92 selector: {0}")]
    Syntax(String),
    #[error("invalid SQL92 selector: {0}")]
    Invalid(String),
}

/// Why one evaluation gave no answer (the message then does not match).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    #[error("{0:?} is not a number of the type it is compared with")]
    NotANumber(String),
    #[error("a boolean cannot be compared with a string")]
    Incomparable,
    #[error("a value was used as a condition")]
    NotACondition,
}

/// A compiled SQL92 selector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sql92Filter {
    expression: parse::Expr,
}

impl Sql92Filter {
    /// Compiles a selector, or says why it is refused (as RocketMQ refuses it).
    pub fn compile(text: &str) -> Result<Self, FilterError> {
        let expression = parse::Parser::new(text).selector()?;
        Ok(Self { expression })
    }

    /// The condition's value on a message whose properties `property` looks up: `Ok(Some(_))`
    /// true or false, `Ok(None)` unknown.
    pub fn evaluate<'a, F>(&'a self, property: F) -> Result<Option<bool>, EvalError>
    where
        F: Fn(&str) -> Option<&'a str>,
    {
        match eval::evaluate(&self.expression, &property)? {
            value::Value::Bool(value) => Ok(Some(value)),
            value::Value::Null => Ok(None),
            _ => Err(EvalError::NotACondition),
        }
    }

    /// Whether a message with these properties is delivered: only a true condition is.
    pub fn matches<'a, F>(&'a self, property: F) -> bool
    where
        F: Fn(&str) -> Option<&'a str>,
    {
        matches!(self.evaluate(property), Ok(Some(true)))
    }
}
