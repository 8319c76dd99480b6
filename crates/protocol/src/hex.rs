//! Hex text as RocketMQ writes ids (`UtilAll.bytes2string`: upper case) and as fixtures store
//! frames (lower case, any whitespace ignored on read).

/// Upper-case hex, as Java message ids are written.
pub fn encode_upper(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xF)] as char);
    }
    out
}

/// Lower-case hex, as fixtures are stored.
pub fn encode_lower(bytes: &[u8]) -> String {
    encode_upper(bytes).to_ascii_lowercase()
}

/// Decodes hex in either case, skipping ASCII whitespace; `None` on any other character or an
/// odd number of digits.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|byte| !byte.is_ascii_whitespace())
        .collect();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let high = (pair[0] as char).to_digit(16)?;
            let low = (pair[1] as char).to_digit(16)?;
            Some((high * 16 + low) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        assert_eq!(super::encode_upper(&[0x0a, 0xff]), "0AFF");
        assert_eq!(super::decode("0a ff\n"), Some(vec![0x0a, 0xff]));
        assert_eq!(super::decode("0AF"), None);
        assert_eq!(super::decode("zz"), None);
    }
}
