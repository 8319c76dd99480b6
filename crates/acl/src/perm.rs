//! What an account may do with a topic or a group.

use std::fmt;

/// A permission as written in `plain_acl.yml` (`DENY`, `PUB`, `SUB`, `PUB|SUB`). RocketMQ keeps
/// it as bits; so does this type, so "needs PUB" and "owns PUB|SUB" compare the same way.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm(u8);

impl Perm {
    pub const DENY: Perm = Perm(1);
    /// Needed by requests satisfied by either PUB or SUB.
    pub const ANY: Perm = Perm(1 << 1);
    pub const PUB: Perm = Perm(1 << 2);
    pub const SUB: Perm = Perm(1 << 3);
    pub const PUB_SUB: Perm = Perm((1 << 2) | (1 << 3));

    /// Parses the file's spelling; `None` for anything else (the file is then refused).
    pub fn parse(text: &str) -> Option<Perm> {
        match text.trim() {
            "DENY" => Some(Perm::DENY),
            "PUB" => Some(Perm::PUB),
            "SUB" => Some(Perm::SUB),
            "PUB|SUB" | "SUB|PUB" => Some(Perm::PUB_SUB),
            _ => None,
        }
    }

    /// Whether an account owning `self` may do what needs `needed`. DENY wins over anything.
    pub fn allows(self, needed: Perm) -> bool {
        if self.0 & Perm::DENY.0 != 0 {
            return false;
        }
        if needed.0 & Perm::ANY.0 != 0 {
            return self.0 & (Perm::PUB.0 | Perm::SUB.0) != 0;
        }
        needed.0 & self.0 != 0
    }
}

impl fmt::Display for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match *self {
            Perm::DENY => "DENY",
            Perm::PUB => "PUB",
            Perm::SUB => "SUB",
            Perm::PUB_SUB => "PUB|SUB",
            Perm::ANY => "ANY",
            _ => "DENY",
        };
        f.write_str(text)
    }
}

impl fmt::Debug for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_beats_everything_and_pub_sub_covers_both() {
        assert!(!Perm::DENY.allows(Perm::SUB));
        assert!(Perm::PUB_SUB.allows(Perm::PUB));
        assert!(Perm::PUB_SUB.allows(Perm::SUB));
        assert!(!Perm::SUB.allows(Perm::PUB));
        assert!(!Perm::PUB.allows(Perm::SUB));
        assert!(Perm::SUB.allows(Perm::ANY));
        assert!(!Perm::DENY.allows(Perm::ANY));
        assert_eq!(Perm::parse(" SUB|PUB "), Some(Perm::PUB_SUB));
        assert_eq!(Perm::parse("pub"), None);
    }
}
