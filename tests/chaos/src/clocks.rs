//! Clock jumps: each broker runs with libfaketime preloaded, which offsets its wall clock by what
//! a file of its own says (re-read every second), while its monotonic clock stays true — a
//! stepped wall clock, as NTP or a resumed virtual machine makes one. Brokers stamp messages,
//! POP receipts and deadlines, transaction halves, reset epochs and the progress history with
//! the wall clock; timeouts, leases and replica liveness run on the monotonic one.

use std::path::{Path, PathBuf};

/// libfaketime's multi-threaded build, where Debian's `libfaketime` package puts it.
fn library() -> Option<PathBuf> {
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu/faketime/libfaketimeMT.so.1"),
        "/usr/lib/faketime/libfaketimeMT.so.1".to_owned(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|path| path.exists())
}

/// Whether clocks can be stepped here (libfaketime is installed).
pub fn available() -> bool {
    library().is_some()
}

/// The offset files of one cluster's brokers; `None` when its clocks are left alone.
#[derive(Debug, Default)]
pub struct Clocks {
    dir: Option<PathBuf>,
}

impl Clocks {
    /// Clocks that can be stepped, their files in `dir`.
    pub fn stepped_in(dir: &Path) -> Clocks {
        Clocks {
            dir: Some(dir.to_owned()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    fn file(&self, host: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{host}.clock")))
    }

    /// `program args` as they start on `host`: through `env` with libfaketime preloaded and the
    /// host's offset file (at 0) when clocks are stepped, as they are otherwise.
    pub fn wrap(
        &self,
        host: &str,
        program: PathBuf,
        args: Vec<String>,
    ) -> Result<(PathBuf, Vec<String>), String> {
        let (Some(file), Some(library)) = (self.file(host), library()) else {
            return Ok((program, args));
        };
        if !file.exists() {
            self.step(host, 0)?;
        }
        let mut line = vec![
            format!("LD_PRELOAD={}", library.display()),
            format!("FAKETIME_TIMESTAMP_FILE={}", file.display()),
            "FAKETIME_CACHE_DURATION=1".to_owned(),
            // Instant, tokio's timers and every timeout stay on the true clock.
            "DONT_FAKE_MONOTONIC=1".to_owned(),
            program.display().to_string(),
        ];
        line.extend(args);
        Ok((PathBuf::from("/usr/bin/env"), line))
    }

    /// Sets `host`'s wall clock `seconds` off the true one (0: back to true). Takes effect
    /// within about two seconds (libfaketime's cache).
    pub fn step(&self, host: &str, seconds: i64) -> Result<(), String> {
        let Some(file) = self.file(host) else {
            return Err("clocks are not stepped in this run".into());
        };
        // Whole, never half-written: libfaketime may read it at any moment.
        let staged = file.with_extension("clock.next");
        std::fs::write(&staged, format!("{seconds:+}s\n"))
            .and_then(|()| std::fs::rename(&staged, &file))
            .map_err(|error| format!("step the clock of {host}: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_written_whole_and_left_alone_clocks_start_as_they_are() {
        let dir = tempfile::tempdir().expect("temp dir");
        let clocks = Clocks::stepped_in(dir.path());
        for (seconds, text) in [(45, "+45s\n"), (-20, "-20s\n"), (0, "+0s\n")] {
            clocks.step("a1", seconds).expect("stepped");
            let written = std::fs::read_to_string(dir.path().join("a1.clock"));
            assert_eq!(written.ok().as_deref(), Some(text));
        }
        let plain = Clocks::default();
        assert!(plain.step("a1", 5).is_err());
        let (program, args) = plain
            .wrap("a1", PathBuf::from("/bin/tidemark"), vec!["broker".into()])
            .expect("wrapped");
        assert_eq!(
            (program, args),
            (PathBuf::from("/bin/tidemark"), vec!["broker".to_owned()])
        );
    }
}
