//! Tokens of RocketMQ's selector language, read one at a time: the parser asks for the next
//! token only when it needs it, which is what decides (as in RocketMQ's generated parser) that
//! text after a complete expression is never read.

use crate::FilterError;

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    /// An integer literal's digits (an `l`/`L` suffix already dropped).
    Decimal(String),
    /// A floating-point literal as written.
    Float(String),
    /// A string literal's value (`''` already unescaped).
    Text(String),
    Identifier(String),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Open,
    Close,
    Comma,
    Plus,
    Minus,
    End,
}

#[derive(Debug)]
pub struct Lexer<'a> {
    text: &'a str,
    at: usize,
}

fn keyword(word: &str) -> Option<Token> {
    let upper = word.to_ascii_uppercase();
    Some(match upper.as_str() {
        "NOT" => Token::Not,
        "AND" => Token::And,
        "OR" => Token::Or,
        "BETWEEN" => Token::Between,
        "IN" => Token::In,
        "TRUE" => Token::True,
        "FALSE" => Token::False,
        "NULL" => Token::Null,
        "IS" => Token::Is,
        "CONTAINS" => Token::Contains,
        "STARTSWITH" => Token::StartsWith,
        "ENDSWITH" => Token::EndsWith,
        _ => return None,
    })
}

fn is_identifier_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$'
}

fn is_identifier_part(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

impl<'a> Lexer<'a> {
    pub fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek_byte(&self, ahead: usize) -> Option<u8> {
        self.bytes().get(self.at + ahead).copied()
    }

    fn error(&self, what: &str) -> FilterError {
        FilterError::Syntax(format!("{what} at position {}", self.at))
    }

    /// Skips white space and comments (`-- …` up to a line end, `/* … */`).
    fn skip_ignored(&mut self) -> Result<(), FilterError> {
        loop {
            match (self.peek_byte(0), self.peek_byte(1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0c), _) => self.at += 1,
                (Some(b'-'), Some(b'-')) => {
                    // A line comment must end with a line break (RocketMQ's grammar says so).
                    let rest = &self.bytes()[self.at..];
                    match rest.iter().position(|&c| c == b'\n' || c == b'\r') {
                        Some(end) => self.at += end + 1,
                        None => return Err(self.error("unterminated line comment")),
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    let rest = &self.text[self.at + 2..];
                    match rest.find("*/") {
                        Some(end) => self.at += 2 + end + 2,
                        None => return Err(self.error("unterminated comment")),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Token, FilterError> {
        self.skip_ignored()?;
        let Some(c) = self.peek_byte(0) else {
            return Ok(Token::End);
        };
        let single = |lexer: &mut Self, token| {
            lexer.at += 1;
            Ok(token)
        };
        match c {
            b'=' => single(self, Token::Eq),
            b'(' => single(self, Token::Open),
            b')' => single(self, Token::Close),
            b',' => single(self, Token::Comma),
            b'+' => single(self, Token::Plus),
            b'-' => single(self, Token::Minus),
            b'>' if self.peek_byte(1) == Some(b'=') => {
                self.at += 2;
                Ok(Token::Ge)
            }
            b'>' => single(self, Token::Gt),
            b'<' if self.peek_byte(1) == Some(b'=') => {
                self.at += 2;
                Ok(Token::Le)
            }
            b'<' if self.peek_byte(1) == Some(b'>') => {
                self.at += 2;
                Ok(Token::Ne)
            }
            b'<' => single(self, Token::Lt),
            b'\'' => self.text_literal(),
            b'0'..=b'9' | b'.' => self.number(),
            c if is_identifier_start(c) => {
                let start = self.at;
                while self.peek_byte(0).is_some_and(is_identifier_part) {
                    self.at += 1;
                }
                let word = &self.text[start..self.at];
                Ok(keyword(word).unwrap_or_else(|| Token::Identifier(word.to_owned())))
            }
            _ => Err(self.error("unexpected character")),
        }
    }

    fn text_literal(&mut self) -> Result<Token, FilterError> {
        let mut value = String::new();
        let mut at = self.at + 1;
        loop {
            let rest = &self.text[at..];
            let Some(quote) = rest.find('\'') else {
                return Err(self.error("unterminated string"));
            };
            value.push_str(&rest[..quote]);
            at += quote + 1;
            if self.bytes().get(at) == Some(&b'\'') {
                value.push('\'');
                at += 1;
            } else {
                self.at = at;
                return Ok(Token::Text(value));
            }
        }
    }

    fn digits_from(&self, at: usize) -> usize {
        self.bytes()[at.min(self.text.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    }

    /// Length of an exponent (`E`, optional sign, digits) starting at `at`, 0 if there is none.
    fn exponent_from(&self, at: usize) -> usize {
        if !matches!(self.bytes().get(at), Some(b'e' | b'E')) {
            return 0;
        }
        let signed = usize::from(matches!(self.bytes().get(at + 1), Some(b'+' | b'-')));
        let digits = self.digits_from(at + 1 + signed);
        if digits == 0 {
            0
        } else {
            1 + signed + digits
        }
    }

    /// The longest literal at the cursor: a float (`5.5`, `5.`, `.5`, `5E3`, with an optional
    /// exponent) or an integer (`0`, or digits without a leading zero, optional `L`).
    fn number(&mut self) -> Result<Token, FilterError> {
        let start = self.at;
        let whole = self.digits_from(start);
        if self.bytes().get(start + whole) == Some(&b'.') {
            let fraction = self.digits_from(start + whole + 1);
            if whole == 0 && fraction == 0 {
                return Err(self.error("unexpected character"));
            }
            let end = start + whole + 1 + fraction;
            let end = end + self.exponent_from(end);
            self.at = end;
            return Ok(Token::Float(self.text[start..end].to_owned()));
        }
        let exponent = self.exponent_from(start + whole);
        if exponent > 0 {
            let end = start + whole + exponent;
            self.at = end;
            return Ok(Token::Float(self.text[start..end].to_owned()));
        }
        if self.bytes()[start] == b'0' {
            self.at = start + 1;
            return Ok(Token::Decimal("0".to_owned()));
        }
        let end = start + whole;
        let digits = self.text[start..end].to_owned();
        self.at = end;
        if matches!(self.peek_byte(0), Some(b'l' | b'L')) {
            self.at += 1;
        }
        Ok(Token::Decimal(digits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Result<Vec<Token>, FilterError> {
        let mut lexer = Lexer::new(text);
        let mut out = Vec::new();
        loop {
            let token = lexer.next_token()?;
            if token == Token::End {
                return Ok(out);
            }
            out.push(token);
        }
    }

    #[test]
    fn literals_and_operators_take_the_longest_match() {
        assert_eq!(
            tokens("a>=5 AND b<>'it''s' or c <= 5.5e3").expect("lexes"),
            vec![
                Token::Identifier("a".into()),
                Token::Ge,
                Token::Decimal("5".into()),
                Token::And,
                Token::Identifier("b".into()),
                Token::Ne,
                Token::Text("it's".into()),
                Token::Or,
                Token::Identifier("c".into()),
                Token::Le,
                Token::Float("5.5e3".into()),
            ]
        );
        assert_eq!(
            tokens("007 12L 5. .5 5e 0L").expect("lexes"),
            vec![
                Token::Decimal("0".into()),
                Token::Decimal("0".into()),
                Token::Decimal("7".into()),
                Token::Decimal("12".into()),
                Token::Float("5.".into()),
                Token::Float(".5".into()),
                Token::Decimal("5".into()),
                Token::Identifier("e".into()),
                Token::Decimal("0".into()),
                Token::Identifier("L".into()),
            ]
        );
        assert_eq!(
            tokens("notx NoT /* c */ $a_1 -- line\n").expect("lexes"),
            vec![
                Token::Identifier("notx".into()),
                Token::Not,
                Token::Identifier("$a_1".into()),
            ]
        );
    }

    #[test]
    fn bad_text_is_an_error() {
        for bad in ["'open", "a != 1", "-- no newline", "/* open", ".", "é"] {
            assert!(tokens(bad).is_err(), "{bad}");
        }
    }
}
