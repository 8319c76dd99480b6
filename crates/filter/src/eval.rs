//! Evaluation on one message, in RocketMQ's three-valued logic: a condition is true, false or
//! unknown (a missing property); AND and OR look at their right side only when the left does
//! not decide; an evaluation error (a property that does not parse as the number it is compared
//! with) ends the evaluation, and the message does not match.

use std::borrow::Cow;
use std::cmp::Ordering as Order;

use crate::parse::{Expr, Ordering, TextTest};
use crate::value::{compare, java_double, Value};
use crate::EvalError;

/// A condition's outcome: `Some(true)`, `Some(false)`, or `None` (unknown).
type Truth = Option<bool>;

fn truth(value: Value<'_>) -> Result<Truth, EvalError> {
    match value {
        Value::Null => Ok(None),
        Value::Bool(value) => Ok(Some(value)),
        _ => Err(EvalError::NotACondition),
    }
}

fn from_truth(truth: Truth) -> Value<'static> {
    truth.map_or(Value::Null, Value::Bool)
}

pub fn evaluate<'e, F>(expr: &'e Expr, property: &F) -> Result<Value<'e>, EvalError>
where
    F: Fn(&str) -> Option<&'e str>,
{
    Ok(match expr {
        Expr::Constant(value) => value.borrowed(),
        Expr::Property(name) => {
            property(name).map_or(Value::Null, |text| Value::Text(Cow::Borrowed(text)))
        }
        Expr::Negate(inner) => match evaluate(inner, property)? {
            Value::Int(value) => Value::Int(value.wrapping_neg()),
            Value::Long(value) => Value::Long(value.wrapping_neg()),
            Value::Double(value) => Value::Double(-value),
            _ => Value::Null,
        },
        Expr::Not(inner) => from_truth(truth(evaluate(inner, property)?)?.map(|value| !value)),
        Expr::AsCondition(inner) => match evaluate(inner, property)? {
            Value::Null => Value::Null,
            Value::Bool(value) => Value::Bool(value),
            _ => Value::Bool(false),
        },
        Expr::And(left, right) => {
            let left = truth(evaluate(left, property)?)?;
            if left == Some(false) {
                return Ok(Value::Bool(false));
            }
            let right = truth(evaluate(right, property)?)?;
            if right == Some(false) {
                return Ok(Value::Bool(false));
            }
            from_truth(left.zip(right).map(|_| true))
        }
        Expr::Or(left, right) => {
            let left = truth(evaluate(left, property)?)?;
            if left == Some(true) {
                return Ok(Value::Bool(true));
            }
            let right = truth(evaluate(right, property)?)?;
            if right == Some(true) {
                return Ok(Value::Bool(true));
            }
            from_truth(left.zip(right).map(|_| false))
        }
        Expr::Equal(left, right) => {
            let left = evaluate(left, property)?;
            let right = evaluate(right, property)?;
            match (&left, &right) {
                (Value::Null, Value::Null) => Value::Bool(true),
                (Value::Null, _) => Value::Null,
                (_, Value::Null) => Value::Bool(false),
                _ if left.same(&right) => Value::Bool(true),
                _ => Value::Bool(compare(&left, &right)? == Order::Equal),
            }
        }
        Expr::Compare(ordering, left, right) => {
            let left = evaluate(left, property)?;
            if left == Value::Null {
                return Ok(Value::Null);
            }
            let right = evaluate(right, property)?;
            if right == Value::Null {
                return Ok(Value::Null);
            }
            let order = match (&left, &right) {
                // Two strings are compared as numbers (RocketMQ never orders text).
                (Value::Text(a), Value::Text(b)) => java_double(a)?.total_cmp(&java_double(b)?),
                _ => compare(&left, &right)?,
            };
            Value::Bool(match ordering {
                Ordering::Greater => order == Order::Greater,
                Ordering::GreaterOrEqual => order != Order::Less,
                Ordering::Less => order == Order::Less,
                Ordering::LessOrEqual => order != Order::Greater,
            })
        }
        Expr::In {
            property: name,
            values,
            negated,
        } => match property(name) {
            None => Value::Null,
            Some(text) => Value::Bool(values.iter().any(|value| value == text) != *negated),
        },
        Expr::Text {
            test,
            negated,
            operand,
            search,
        } => {
            if search.is_empty() {
                return Ok(Value::Bool(false));
            }
            match evaluate(operand, property)? {
                Value::Text(text) => {
                    let found = match test {
                        TextTest::Contains => text.contains(search.as_str()),
                        TextTest::StartsWith => text.starts_with(search.as_str()),
                        TextTest::EndsWith => text.ends_with(search.as_str()),
                    };
                    Value::Bool(found != *negated)
                }
                _ => Value::Bool(false),
            }
        }
    })
}
