//! The selector grammar (RocketMQ's, itself ActiveMQ's JMS selector without arithmetic), by
//! recursive descent, with RocketMQ's compile-time checks: what may be compared with what, what
//! counts as a condition, `BETWEEN` bounds in order, number literals in range.

use crate::lex::{Lexer, Token};
use crate::value::Value;
use crate::FilterError;

/// Deeper nesting than this is refused (the parser recurses; network input must not overflow
/// its stack).
const NESTING_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextTest {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Constant(Value<'static>),
    Property(String),
    Negate(Box<Expr>),
    Not(Box<Expr>),
    /// A property read as a condition: true only if it holds a boolean true (never, for the
    /// string properties messages carry), unknown when absent.
    AsCondition(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    /// `=` (and `IS NULL`, which is `= NULL` without the check against comparing with NULL).
    Equal(Box<Expr>, Box<Expr>),
    Compare(Ordering, Box<Expr>, Box<Expr>),
    In {
        property: String,
        values: Vec<String>,
        negated: bool,
    },
    Text {
        test: TextTest,
        negated: bool,
        operand: Box<Expr>,
        search: String,
    },
}

impl Expr {
    /// What RocketMQ calls a boolean expression: one whose value is a condition.
    fn is_condition(&self) -> bool {
        match self {
            Expr::Constant(value) => matches!(value, Value::Bool(_) | Value::Null),
            Expr::Property(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }

    fn constant(&self) -> Option<&Value<'static>> {
        match self {
            Expr::Constant(value) => Some(value),
            _ => None,
        }
    }
}

fn refuse(why: impl Into<String>) -> FilterError {
    FilterError::Invalid(why.into())
}

/// A condition from `expr`: itself, or a property read as one; anything else is refused.
fn condition(expr: Expr) -> Result<Expr, FilterError> {
    if expr.is_condition() {
        Ok(expr)
    } else if matches!(expr, Expr::Property(_)) {
        Ok(Expr::AsCondition(Box::new(expr)))
    } else {
        Err(refuse("the expression does not give a condition"))
    }
}

/// `<`, `>`, `<=`, `>=` compare numbers (or properties): not strings, booleans, NULL, or
/// conditions.
fn check_ordered_operand(expr: &Expr) -> Result<(), FilterError> {
    match expr.constant() {
        Some(Value::Int(_) | Value::Long(_) | Value::Double(_)) => Ok(()),
        Some(_) => Err(refuse("only numbers can be compared with <, >, <=, >=")),
        None if expr.is_condition() => Err(refuse("a condition cannot be compared")),
        None => Ok(()),
    }
}

fn check_equal_operands(left: &Expr, right: &Expr) -> Result<(), FilterError> {
    if left.constant() == Some(&Value::Null) || right.constant() == Some(&Value::Null) {
        return Err(refuse("NULL cannot be compared with =; use IS NULL"));
    }
    if let (Some(Value::Bool(_)), Some(other)) = (left.constant(), right.constant()) {
        if !matches!(other, Value::Bool(_)) {
            return Err(refuse("a boolean cannot be compared with a non-boolean"));
        }
    }
    Ok(())
}

fn ordered(ordering: Ordering, left: Expr, right: Expr) -> Result<Expr, FilterError> {
    check_ordered_operand(&left)?;
    check_ordered_operand(&right)?;
    Ok(Expr::Compare(ordering, Box::new(left), Box::new(right)))
}

fn not(expr: Expr) -> Expr {
    Expr::Not(Box::new(expr))
}

#[derive(Debug)]
pub struct Parser<'a> {
    lexer: Lexer<'a>,
    peeked: Option<Token>,
    /// The token after `peeked`, read only for the two-token decisions (`IS NULL`, `NOT IN`).
    second: Option<Token>,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a str) -> Self {
        Self {
            lexer: Lexer::new(text),
            peeked: None,
            second: None,
            depth: 0,
        }
    }

    fn peek(&mut self) -> Result<&Token, FilterError> {
        if self.peeked.is_none() {
            let token = match self.second.take() {
                Some(token) => token,
                None => self.lexer.next_token()?,
            };
            self.peeked = Some(token);
        }
        Ok(self.peeked.as_ref().unwrap_or(&Token::End))
    }

    fn peek_second(&mut self) -> Result<&Token, FilterError> {
        self.peek()?;
        if self.second.is_none() {
            self.second = Some(self.lexer.next_token()?);
        }
        Ok(self.second.as_ref().unwrap_or(&Token::End))
    }

    fn take(&mut self) -> Result<Token, FilterError> {
        self.peek()?;
        Ok(self.peeked.take().unwrap_or(Token::End))
    }

    fn expect(&mut self, wanted: &Token, what: &str) -> Result<(), FilterError> {
        let token = self.take()?;
        if &token == wanted {
            Ok(())
        } else {
            Err(FilterError::Syntax(format!(
                "expected {what}, found {token:?}"
            )))
        }
    }

    fn text(&mut self) -> Result<String, FilterError> {
        match self.take()? {
            Token::Text(value) => Ok(value),
            other => Err(FilterError::Syntax(format!(
                "expected a string literal, found {other:?}"
            ))),
        }
    }

    /// The whole selector: a condition. As RocketMQ's parser, it stops once the expression is
    /// complete; what follows is looked at only as far as deciding that.
    pub fn selector(&mut self) -> Result<Expr, FilterError> {
        let expr = self.or()?;
        condition(expr)
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.and()?;
        while *self.peek()? == Token::Or {
            self.take()?;
            let right = self.and()?;
            left = Expr::Or(Box::new(condition(left)?), Box::new(condition(right)?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.equality()?;
        while *self.peek()? == Token::And {
            self.take()?;
            let right = self.equality()?;
            left = Expr::And(Box::new(condition(left)?), Box::new(condition(right)?));
        }
        Ok(left)
    }

    fn equality(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.comparison()?;
        loop {
            match self.peek()? {
                Token::Eq => {
                    self.take()?;
                    let right = self.comparison()?;
                    check_equal_operands(&left, &right)?;
                    left = Expr::Equal(Box::new(left), Box::new(right));
                }
                Token::Ne => {
                    self.take()?;
                    let right = self.comparison()?;
                    check_equal_operands(&left, &right)?;
                    left = not(Expr::Equal(Box::new(left), Box::new(right)));
                }
                Token::Is => match self.peek_second()? {
                    Token::Null => {
                        self.take()?;
                        self.take()?;
                        left = Expr::Equal(Box::new(left), Box::new(Expr::Constant(Value::Null)));
                    }
                    _ => {
                        self.take()?;
                        self.expect(&Token::Not, "NOT or NULL after IS")?;
                        self.expect(&Token::Null, "NULL after IS NOT")?;
                        left = not(Expr::Equal(
                            Box::new(left),
                            Box::new(Expr::Constant(Value::Null)),
                        ));
                    }
                },
                _ => return Ok(left),
            }
        }
    }

    fn comparison(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.unary()?;
        loop {
            let negated = match self.peek()? {
                Token::Not => match self.peek_second()? {
                    Token::Contains
                    | Token::StartsWith
                    | Token::EndsWith
                    | Token::Between
                    | Token::In => {
                        self.take()?;
                        true
                    }
                    _ => return Ok(left),
                },
                _ => false,
            };
            left = match self.peek()?.clone() {
                Token::Gt | Token::Ge | Token::Lt | Token::Le if !negated => {
                    let ordering = match self.take()? {
                        Token::Gt => Ordering::Greater,
                        Token::Ge => Ordering::GreaterOrEqual,
                        Token::Lt => Ordering::Less,
                        _ => Ordering::LessOrEqual,
                    };
                    let right = self.unary()?;
                    ordered(ordering, left, right)?
                }
                Token::Contains | Token::StartsWith | Token::EndsWith => {
                    let test = match self.take()? {
                        Token::Contains => TextTest::Contains,
                        Token::StartsWith => TextTest::StartsWith,
                        _ => TextTest::EndsWith,
                    };
                    let search = self.text()?;
                    Expr::Text {
                        test,
                        negated,
                        operand: Box::new(left),
                        search,
                    }
                }
                Token::Between => {
                    self.take()?;
                    let low = self.unary()?;
                    self.expect(&Token::And, "AND in BETWEEN")?;
                    let high = self.unary()?;
                    self.between(left, low, high, negated)?
                }
                Token::In => {
                    self.take()?;
                    let Expr::Property(property) = left else {
                        return Err(refuse("IN applies to a property"));
                    };
                    self.expect(&Token::Open, "( after IN")?;
                    let mut values = vec![self.text()?];
                    while *self.peek()? == Token::Comma {
                        self.take()?;
                        values.push(self.text()?);
                    }
                    self.expect(&Token::Close, ") closing IN")?;
                    Expr::In {
                        property,
                        values,
                        negated,
                    }
                }
                _ => return Ok(left),
            };
        }
    }

    fn between(
        &mut self,
        value: Expr,
        low: Expr,
        high: Expr,
        negated: bool,
    ) -> Result<Expr, FilterError> {
        if negated {
            return Ok(Expr::Or(
                Box::new(ordered(Ordering::Less, value.clone(), low)?),
                Box::new(ordered(Ordering::Greater, value, high)?),
            ));
        }
        if let (Some(low_value), Some(high_value)) = (low.constant(), high.constant()) {
            if *low_value == Value::Null || *high_value == Value::Null {
                return Err(refuse("BETWEEN bounds cannot be NULL"));
            }
            let order = crate::value::compare(high_value, low_value)
                .map_err(|failure| refuse(format!("BETWEEN bounds: {failure}")))?;
            if order == std::cmp::Ordering::Less {
                return Err(refuse("BETWEEN's low bound is above its high bound"));
            }
        }
        Ok(Expr::And(
            Box::new(ordered(Ordering::GreaterOrEqual, value.clone(), low)?),
            Box::new(ordered(Ordering::LessOrEqual, value, high)?),
        ))
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(refuse("the expression is nested too deeply"));
        }
        let expr = match self.peek()? {
            Token::Plus => {
                self.take()?;
                self.unary()
            }
            Token::Minus => {
                self.take()?;
                self.unary().map(|inner| Expr::Negate(Box::new(inner)))
            }
            Token::Not => {
                self.take()?;
                self.unary().and_then(condition).map(not)
            }
            _ => self.primary(),
        };
        self.depth -= 1;
        expr
    }

    fn primary(&mut self) -> Result<Expr, FilterError> {
        Ok(match self.take()? {
            Token::Text(value) => Expr::Constant(Value::Text(value.into())),
            Token::Decimal(digits) => {
                let value: i64 = digits
                    .parse()
                    .map_err(|_| refuse(format!("{digits} is out of the long range")))?;
                Expr::Constant(match i32::try_from(value) {
                    Ok(small) => Value::Int(small),
                    Err(_) => Value::Long(value),
                })
            }
            Token::Float(text) => {
                let value: f64 = text
                    .parse()
                    .map_err(|_| refuse(format!("{text} is not a number")))?;
                // RocketMQ refuses literals outside (Double.MIN_VALUE, Double.MAX_VALUE]:
                // infinities, and zero or anything that rounds to it.
                if !value.is_finite() || value < f64::from_bits(1) {
                    return Err(refuse(format!("{text} is out of range")));
                }
                Expr::Constant(Value::Double(value))
            }
            Token::True => Expr::Constant(Value::Bool(true)),
            Token::False => Expr::Constant(Value::Bool(false)),
            Token::Null => Expr::Constant(Value::Null),
            Token::Identifier(name) => Expr::Property(name),
            Token::Open => {
                self.depth += 1;
                if self.depth > NESTING_MAX {
                    return Err(refuse("the expression is nested too deeply"));
                }
                let inner = self.or();
                self.depth -= 1;
                let inner = inner?;
                self.expect(&Token::Close, ")")?;
                inner
            }
            other => {
                return Err(FilterError::Syntax(format!(
                    "expected a value, found {other:?}"
                )))
            }
        })
    }
}
