//! Client address patterns (`globalWhiteRemoteAddresses`, an account's `whiteRemoteAddress`).
//!
//! The forms RocketMQ accepts: blank (matches nothing), `*` (anything), one address
//! (`192.168.0.1`, `::1`), a list (`192.168.0.1,192.168.0.2`), a last-part list
//! (`192.168.0.{1,2}`), and parts that are `*` or a range (`192.168.*.*`, `192.168.0.1-100`,
//! `fe80:0:0:0:0:0:0:*`). A range form may leave trailing parts out (`10.10.*`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A parsed address pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPattern {
    Nothing,
    Anything,
    OneOf(Vec<IpAddr>),
    V4Parts(Vec<(u16, u16)>),
    V6Parts(Vec<(u16, u16)>),
}

impl AddressPattern {
    /// Parses a pattern; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<AddressPattern, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(AddressPattern::Nothing);
        }
        if matches!(text, "*" | "*.*.*.*" | "*:*:*:*:*:*:*:*") {
            return Ok(AddressPattern::Anything);
        }
        if let Some(open) = text.find('{') {
            let Some(inner) = text[open + 1..].strip_suffix('}') else {
                return Err(format!("'{text}': a '{{' list must end the address"));
            };
            let head = &text[..open];
            if !(head.ends_with('.') || head.ends_with(':')) {
                return Err(format!("'{text}': a '{{' list must be the last part"));
            }
            let addresses = inner
                .split(',')
                .map(|last| parse_one(&format!("{head}{}", last.trim())))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AddressPattern::OneOf(addresses));
        }
        if text.contains(',') {
            let addresses = text
                .split(',')
                .map(|one| parse_one(one.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AddressPattern::OneOf(addresses));
        }
        if text.contains('*') || text.contains('-') {
            return if text.contains(':') {
                parse_parts(text, ':', 8, 0xffff, 16).map(AddressPattern::V6Parts)
            } else {
                parse_parts(text, '.', 4, 255, 10).map(AddressPattern::V4Parts)
            };
        }
        parse_one(text).map(|address| AddressPattern::OneOf(vec![address]))
    }

    pub fn matches(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        match self {
            AddressPattern::Nothing => false,
            AddressPattern::Anything => true,
            AddressPattern::OneOf(addresses) => addresses.contains(&address),
            AddressPattern::V4Parts(parts) => match address {
                IpAddr::V4(v4) => parts_match(parts, v4.octets().iter().map(|&o| u16::from(o))),
                IpAddr::V6(_) => false,
            },
            AddressPattern::V6Parts(parts) => match address {
                IpAddr::V6(v6) => parts_match(parts, v6.segments().into_iter()),
                IpAddr::V4(_) => false,
            },
        }
    }
}

/// A client connecting over IPv6 with an IPv4-mapped address is the IPv4 client.
pub fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn parse_one(text: &str) -> Result<IpAddr, String> {
    if let Ok(v4) = text.parse::<Ipv4Addr>() {
        return Ok(IpAddr::V4(v4));
    }
    text.parse::<Ipv6Addr>()
        .map(|v6| canonical(IpAddr::V6(v6)))
        .map_err(|_| format!("'{text}' is not an IP address"))
}

fn parse_parts(
    text: &str,
    separator: char,
    count: usize,
    max: u16,
    radix: u32,
) -> Result<Vec<(u16, u16)>, String> {
    let parts: Vec<&str> = text.split(separator).collect();
    if parts.len() > count || parts.iter().any(|part| part.trim().is_empty()) {
        return Err(format!("'{text}' is not an address pattern"));
    }
    let number = |digits: &str| {
        u16::from_str_radix(digits.trim(), radix)
            .ok()
            .filter(|value| *value <= max)
            .ok_or_else(|| format!("'{text}': '{digits}' is out of range"))
    };
    let mut ranges = Vec::with_capacity(count);
    for part in parts {
        let part = part.trim();
        let range = if part == "*" {
            (0, max)
        } else if let Some((low, high)) = part.split_once('-') {
            let (low, high) = (number(low)?, number(high)?);
            if low > high {
                return Err(format!("'{text}': range {part} is empty"));
            }
            (low, high)
        } else {
            let value = number(part)?;
            (value, value)
        };
        ranges.push(range);
    }
    // Parts left out match anything.
    ranges.resize(count, (0, max));
    Ok(ranges)
}

fn parts_match(ranges: &[(u16, u16)], parts: impl Iterator<Item = u16>) -> bool {
    ranges
        .iter()
        .zip(parts)
        .all(|(&(low, high), part)| (low..=high).contains(&part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn every_form_rocketmq_accepts() {
        let cases = [
            ("", "127.0.0.1", false),
            ("*", "10.1.2.3", true),
            ("*.*.*.*", "::1", true),
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
            ("::1", "::1", true),
            ("0:0:0:0:0:0:0:1", "::1", true),
            ("192.168.0.1,192.168.0.2", "192.168.0.2", true),
            ("192.168.0.{1,2}", "192.168.0.2", true),
            ("192.168.0.{1,2}", "192.168.0.3", false),
            ("10.10.103.*", "10.10.103.77", true),
            ("10.10.103.*", "10.10.104.77", false),
            ("192.168.*.*", "192.168.9.9", true),
            ("192.168.0.1-100", "192.168.0.100", true),
            ("192.168.0.1-100", "192.168.0.101", false),
            ("10.10.*", "10.10.1.1", true),
            ("fe80:0:0:0:0:0:0:*", "fe80::9", true),
            ("fe80:0:0:0:0:0:0:*", "fe81::9", false),
            ("127.0.0.1", "::ffff:127.0.0.1", true),
        ];
        for (pattern, address, expected) in cases {
            let parsed = AddressPattern::parse(pattern);
            assert!(parsed.is_ok(), "{pattern}: {parsed:?}");
            let parsed = parsed.unwrap_or(AddressPattern::Nothing);
            assert_eq!(
                parsed.matches(ip(address)),
                expected,
                "{pattern} vs {address}"
            );
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for pattern in [
            "300.1.1.1",
            "1.2.3.4.5.*",
            "1.2.3.9-1",
            "1.2.{3,4}.5",
            "host.example",
            "1..2.*",
            "1.2.3.{4,x}",
        ] {
            assert!(AddressPattern::parse(pattern).is_err(), "{pattern}");
        }
    }
}
