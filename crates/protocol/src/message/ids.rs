//! Message ids: the broker's offset id and the client's unique id (`UNIQ_KEY`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::MessageError;
use crate::hex;

/// The offset message id: upper-case hex of store host address, port (i32) and commit-log
/// offset (i64) — 32 characters for IPv4, 56 for IPv6.
pub fn encode_offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut bytes = Vec::with_capacity(28);
    match store_host.ip() {
        IpAddr::V4(ip) => bytes.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => bytes.extend_from_slice(&ip.octets()),
    }
    bytes.extend_from_slice(&i32::from(store_host.port()).to_be_bytes());
    bytes.extend_from_slice(&commit_log_offset.to_be_bytes());
    hex::encode_upper(&bytes)
}

/// Splits an offset message id (either case) into store host and commit-log offset.
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), MessageError> {
    let invalid = |reason| MessageError::InvalidMessageId {
        id: id.to_owned(),
        reason,
    };
    let bytes = hex::decode(id).ok_or_else(|| invalid("not hex"))?;
    let address_length = match bytes.len() {
        16 => 4,
        28 => 16,
        _ => return Err(invalid("expected 32 (IPv4) or 56 (IPv6) hex characters")),
    };
    let (address, rest) = bytes.split_at(address_length);
    let ip = if address_length == 4 {
        IpAddr::V4(Ipv4Addr::new(
            address[0], address[1], address[2], address[3],
        ))
    } else {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(address);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let port = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let port = u16::try_from(port).map_err(|_| invalid("port out of range"))?;
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&rest[4..12]);
    Ok((SocketAddr::new(ip, port), i64::from_be_bytes(offset)))
}

/// Generates client unique ids (`MessageClientIDSetter`): upper-case hex of
/// `ip (4|16) | pid:i16 | instance hash:i32 | ms since start of month:i32 | counter:i16`.
///
/// Java takes the month in the JVM's time zone; Tidemark uses UTC. Peers never parse the
/// time part back, so uniqueness is all that matters.
#[derive(Debug, Clone)]
pub struct UniqueIdGenerator {
    prefix: String,
    month_start_ms: i64,
    next_month_start_ms: i64,
    counter: u16,
}

impl UniqueIdGenerator {
    /// `instance_hash` plays the part of Java's class-loader hash: anything that differs
    /// between processes on one host started in the same pid slot.
    pub fn new(ip: IpAddr, pid: u32, instance_hash: i32) -> Self {
        let mut bytes = Vec::with_capacity(22);
        match ip {
            IpAddr::V4(ip) => bytes.extend_from_slice(&ip.octets()),
            IpAddr::V6(ip) => bytes.extend_from_slice(&ip.octets()),
        }
        // Java truncates the pid to a short the same way.
        bytes.extend_from_slice(&(pid as i16).to_be_bytes());
        bytes.extend_from_slice(&instance_hash.to_be_bytes());
        Self {
            prefix: hex::encode_upper(&bytes),
            month_start_ms: 0,
            next_month_start_ms: i64::MIN,
            counter: 0,
        }
    }

    /// The next id for a clock reading of `now_ms` (ms since the Unix epoch).
    pub fn next_id(&mut self, now_ms: i64) -> String {
        if now_ms >= self.next_month_start_ms || now_ms < self.month_start_ms {
            let (start, next) = month_bounds_ms(now_ms);
            self.month_start_ms = start;
            self.next_month_start_ms = next;
        }
        let mut tail = [0u8; 6];
        tail[..4].copy_from_slice(&((now_ms - self.month_start_ms) as i32).to_be_bytes());
        tail[4..].copy_from_slice(&self.counter.to_be_bytes());
        self.counter = self.counter.wrapping_add(1);
        let mut id = String::with_capacity(self.prefix.len() + 12);
        id.push_str(&self.prefix);
        id.push_str(&hex::encode_upper(&tail));
        id
    }
}

const DAY_MS: i64 = 86_400_000;

/// Start of the UTC month containing `now_ms`, and start of the next one.
fn month_bounds_ms(now_ms: i64) -> (i64, i64) {
    let (year, month, _) = civil_from_days(now_ms.div_euclid(DAY_MS));
    let start = days_from_civil(year, month, 1) * DAY_MS;
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (start, days_from_civil(next_year, next_month, 1) * DAY_MS)
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Day count since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_round_trips_both_families() {
        let v4: SocketAddr = "10.0.0.1:10911".parse().expect("addr");
        let id = encode_offset_msg_id(v4, 567_890);
        assert_eq!(id, "0A00000100002A9F000000000008AA52");
        assert_eq!(
            decode_offset_msg_id(&id.to_ascii_lowercase()),
            Ok((v4, 567_890))
        );
        let v6: SocketAddr = "[::1]:10911".parse().expect("addr");
        let id = encode_offset_msg_id(v6, 1);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id), Ok((v6, 1)));
        assert!(decode_offset_msg_id("XYZ").is_err());
        assert!(decode_offset_msg_id("00").is_err());
    }

    #[test]
    fn month_bounds() {
        // 2023-11-14T22:13:20.123Z
        let (start, next) = month_bounds_ms(1_700_000_000_123);
        assert_eq!(start, 1_698_796_800_000); // 2023-11-01T00:00:00Z
        assert_eq!(next, 1_701_388_800_000); // 2023-12-01T00:00:00Z
        let (start, next) = month_bounds_ms(1_703_980_800_000); // 2023-12-31
        assert_eq!((start, next), (1_701_388_800_000, 1_704_067_200_000));
    }

    #[test]
    fn unique_ids_are_distinct_and_laid_out_like_java() {
        let mut generator = UniqueIdGenerator::new("127.0.0.1".parse().expect("ip"), 0x2A9F, 1);
        let first = generator.next_id(1_698_796_800_005);
        let second = generator.next_id(1_698_796_800_005);
        assert_eq!(first, "7F0000012A9F00000001000000050000");
        assert_eq!(second, "7F0000012A9F00000001000000050001");
    }
}
