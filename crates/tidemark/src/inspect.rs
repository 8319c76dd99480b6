//! `tidemark inspect`: turns captured bytes into readable fields, for debugging interop.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Subcommand;
use tidemark_protocol::message::{
    decode_offset_msg_id, encode_offset_msg_id, DecodeOptions, MessageRecord,
};
use tidemark_protocol::{frame, hex, FRAME_SIZE_MAX_BYTES_DEFAULT};

#[derive(Debug, Subcommand)]
pub enum Inspect {
    /// Remoting frames, back to back (length word included).
    Frame {
        /// File with the bytes, as hex text or raw; `-` reads standard input.
        input: PathBuf,
    },
    /// Stored message records (commit-log entries or a pull response body), back to back.
    Record {
        /// File with the bytes, as hex text or raw; `-` reads standard input.
        input: PathBuf,
    },
    /// An offset message id: the store host and commit-log offset inside it.
    MessageId { id: String },
}

pub fn run(what: Inspect, out: &mut impl Write) -> anyhow::Result<()> {
    match what {
        Inspect::Frame { input } => frames(&read_input(&input)?, out),
        Inspect::Record { input } => records(read_input(&input)?, out),
        Inspect::MessageId { id } => {
            let (host, offset) = decode_offset_msg_id(&id)?;
            writeln!(out, "store host        {host}")?;
            writeln!(out, "commit-log offset {offset}")?;
            Ok(())
        }
    }
}

/// Raw bytes, or hex text if the file is nothing but hex digits and whitespace.
fn read_input(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    let mut raw = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut raw)
            .context("reading standard input")?;
    } else {
        raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    }
    let looks_hex = !raw.is_empty()
        && raw
            .iter()
            .all(|byte| byte.is_ascii_hexdigit() || byte.is_ascii_whitespace());
    if looks_hex {
        if let Some(bytes) = std::str::from_utf8(&raw).ok().and_then(hex::decode) {
            return Ok(bytes);
        }
    }
    Ok(raw)
}

fn frames(bytes: &[u8], out: &mut impl Write) -> anyhow::Result<()> {
    let mut offset = 0;
    while offset < bytes.len() {
        let Some((command, used)) =
            frame::decode_slice(&bytes[offset..], FRAME_SIZE_MAX_BYTES_DEFAULT)
                .with_context(|| format!("frame at byte {offset}"))?
        else {
            bail!(
                "frame at byte {offset} is incomplete: {} bytes left",
                bytes.len() - offset
            );
        };
        let kind = if command.is_response() {
            "response"
        } else {
            "request"
        };
        let code = if command.is_response() {
            command.response_code().to_string()
        } else {
            command.request_code().to_string()
        };
        writeln!(
            out,
            "frame at {offset} ({used} bytes, {:?} header)",
            command.serialize_type
        )?;
        writeln!(
            out,
            "  {kind} {code}{}",
            if command.is_oneway() { " oneway" } else { "" }
        )?;
        writeln!(
            out,
            "  language {} version {} opaque {} flag {}",
            command.language.name(),
            command.version,
            command.opaque,
            command.flag
        )?;
        if let Some(remark) = &command.remark {
            writeln!(out, "  remark {remark:?}")?;
        }
        for (key, value) in command.ext_fields.iter() {
            writeln!(out, "  ext {key} = {value:?}")?;
        }
        writeln!(
            out,
            "  body {} bytes{}",
            command.body.len(),
            printable(&command.body)
        )?;
        offset += used;
    }
    Ok(())
}

fn records(bytes: Vec<u8>, out: &mut impl Write) -> anyhow::Result<()> {
    let bytes = Bytes::from(bytes);
    let mut offset = 0;
    while offset < bytes.len() {
        let (record, used) = MessageRecord::decode(
            &bytes,
            offset,
            DecodeOptions {
                verify_body_crc: true,
            },
        )
        .with_context(|| format!("record at byte {offset}"))?;
        writeln!(
            out,
            "record at {offset} ({used} bytes, {:?})",
            record.version
        )?;
        writeln!(
            out,
            "  topic {} queue {} queue offset {}",
            record.topic, record.queue_id, record.queue_offset
        )?;
        writeln!(
            out,
            "  commit-log offset {} msg id {}",
            record.physical_offset,
            encode_offset_msg_id(record.store_host, record.physical_offset)
        )?;
        writeln!(
            out,
            "  born {} at {} stored {} at {}",
            record.born_host, record.born_timestamp, record.store_host, record.store_timestamp
        )?;
        writeln!(
            out,
            "  sysflag {:#x} flag {} reconsume {} body crc {}",
            record.sys_flag, record.flag, record.reconsume_times, record.body_crc
        )?;
        for (name, value) in record.properties.iter() {
            writeln!(out, "  property {name} = {value:?}")?;
        }
        writeln!(
            out,
            "  body {} bytes{}",
            record.body.len(),
            printable(&record.body)
        )?;
        offset += used;
    }
    Ok(())
}

fn printable(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) if !text.is_empty() && text.len() <= 512 => format!(": {text:?}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspects_a_java_captured_frame() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../protocol/tests/fixtures/java/pull_message_request.hex");
        let mut out = Vec::new();
        run(Inspect::Frame { input: path }, &mut out).expect("decodes");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("request PULL_MESSAGE(11)"), "{text}");
        assert!(text.contains("ext commitOffset = \"40\""), "{text}");
    }

    #[test]
    fn inspects_a_stored_record_and_reports_garbage() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../protocol/tests/fixtures/java/stored_message.hex");
        let mut out = Vec::new();
        run(Inspect::Record { input: path }, &mut out).expect("decodes");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("msg id 7F00000100002A9F000000000008AA52"),
            "{text}"
        );
        assert!(records(vec![0, 0, 0, 9, 1, 2, 3], &mut Vec::new()).is_err());
    }
}
