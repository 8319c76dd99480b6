//! Tag hash codes and subscription expressions (TAG type).

/// The subscription expression meaning "every tag".
pub const SUB_ALL: &str = "*";

/// Java's `String.hashCode`: `h = 31*h + c` over UTF-16 code units with 32-bit wrap-around.
pub fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The consume-queue `tagsCode` of a message: its tag's hash sign-extended to 64 bits, 0 when
/// the message has no tag.
pub fn tags_code(tags: Option<&str>) -> i64 {
    tags.filter(|tag| !tag.is_empty())
        .map_or(0, |tag| i64::from(java_string_hash(tag)))
}

/// A parsed TAG subscription: `*` (or empty) for all, else tags joined by `||`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionExpression {
    /// The expression as given (`subString` on the wire).
    pub expression: String,
    /// Trimmed, non-empty tags in order of appearance; empty for "all".
    pub tags: Vec<String>,
    /// Java hash codes of `tags` (`codeSet`), what the broker filters by.
    pub codes: Vec<i32>,
}

impl SubscriptionExpression {
    /// Parses as `FilterAPI.buildSubscriptionData` does.
    pub fn parse(expression: &str) -> Self {
        let trimmed = expression.trim();
        let mut tags: Vec<String> = Vec::new();
        if !(trimmed.is_empty() || trimmed == SUB_ALL) {
            for tag in trimmed
                .split("||")
                .map(str::trim)
                .filter(|tag| !tag.is_empty())
            {
                if !tags.iter().any(|known| known == tag) {
                    tags.push(tag.to_owned());
                }
            }
        }
        let codes = tags.iter().map(|tag| java_string_hash(tag)).collect();
        let expression = if tags.is_empty() {
            SUB_ALL.to_owned()
        } else {
            expression.to_owned()
        };
        Self {
            expression,
            tags,
            codes,
        }
    }

    /// Whether every tag matches.
    pub fn is_all(&self) -> bool {
        self.tags.is_empty()
    }

    /// The broker-side test: a consume-queue tagsCode is in the code set.
    pub fn matches_code(&self, tags_code: i64) -> bool {
        self.is_all() || self.codes.contains(&(tags_code as i32))
    }

    /// The client-side test: the message's tag string is in the tag set.
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        self.is_all() || tag.is_some_and(|tag| self.tags.iter().any(|known| known == tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_java_string_hash_code() {
        // Values computed with java.lang.String#hashCode.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Non-BMP characters hash as two UTF-16 units.
        assert_eq!(java_string_hash("😀"), 1_772_899);
        assert_eq!(tags_code(Some("TagA")), 2_598_919);
        assert_eq!(tags_code(Some("polygenelubricants")), -2_147_483_648);
        assert_eq!(tags_code(None), 0);
    }

    #[test]
    fn subscription_expressions() {
        let all = SubscriptionExpression::parse(" * ");
        assert!(all.is_all() && all.matches_tag(None) && all.matches_code(42));
        let some = SubscriptionExpression::parse("TagA || TagB ||  || TagA");
        assert_eq!(some.tags, vec!["TagA", "TagB"]);
        assert!(some.matches_code(tags_code(Some("TagB"))));
        assert!(!some.matches_code(tags_code(Some("TagC"))));
        assert!(some.matches_tag(Some("TagA")) && !some.matches_tag(None));
    }
}
