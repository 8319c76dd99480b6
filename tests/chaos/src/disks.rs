//! Each broker's store on a file system of its own — a small tmpfs — so that a fault can fill
//! one broker's disk without touching the machine's: a file takes all but a few pages of it,
//! and is deleted when the fault heals.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The source name of every mount made here, so `cleanup` finds what a killed run left.
pub const DISK_SOURCE: &str = "tidemark-chaos-disk";
/// Room for a run's store (commit-log segments are 64 MiB in the chaos cluster).
const DISK_SIZE: &str = "size=768m";
/// What a full disk keeps free: less than one step of the writer's pages faulted in ahead.
const LEFT_FREE: u64 = 64 * 1024;
const FILLER: &str = "chaos-disk-filler";

/// The mounts of one cluster; unmounted on drop (after its processes are gone).
#[derive(Debug, Default)]
pub struct Disks {
    mounted: Vec<PathBuf>,
}

impl Disks {
    /// Mounts a fresh tmpfs at `dir` (created if need be).
    pub fn mount(&mut self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", DISK_SIZE, DISK_SOURCE])
            .arg(dir))?;
        self.mounted.push(dir.to_owned());
        Ok(())
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        for dir in &self.mounted {
            if let Err(failure) = run(Command::new("umount").arg("-l").arg(dir)) {
                eprintln!("chaos: {failure}");
            }
        }
    }
}

/// Fills the file system `dir` is on, all but [`LEFT_FREE`] bytes. The broker writes
/// meanwhile, so what was free a moment ago may not be: a fill that does not fit is tried
/// again, a little smaller, a few times.
pub fn fill(dir: &Path) -> Result<(), String> {
    const ATTEMPTS: u64 = 5;
    const SHRINK: u64 = 4 << 20;
    let free = available(dir)?;
    let mut failure = String::new();
    for attempt in 0..ATTEMPTS {
        let length = free.saturating_sub(LEFT_FREE + attempt * SHRINK);
        if length == 0 {
            return Ok(());
        }
        match run(Command::new("fallocate")
            .args(["-l", &length.to_string()])
            .arg(dir.join(FILLER)))
        {
            Ok(()) => return Ok(()),
            Err(error) => failure = error,
        }
    }
    Err(failure)
}

/// Gives back what [`fill`] took.
pub fn free(dir: &Path) -> Result<(), String> {
    match std::fs::remove_file(dir.join(FILLER)) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(format!("remove the filler in {}: {error}", dir.display())),
    }
}

/// Bytes an unprivileged writer may still take on `dir`'s file system.
fn available(dir: &Path) -> Result<u64, String> {
    let output = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .map_err(|error| format!("df: {error}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| format!("df {}: no free space read", dir.display()))
}

/// Unmounts every disk a run stopped by a signal left mounted; returns where they were.
pub fn unmount_orphans() -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next()? == DISK_SOURCE).then(|| fields.next().map(str::to_owned))?
        })
        .filter(|dir| run(Command::new("umount").arg("-l").arg(dir)).is_ok())
        .collect()
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|error| format!("{command:?}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
