#!/usr/bin/env python3
"""Passes `cargo test` output through and adds, to the stage record, each package's share of it.

Usage: cargo test ... 2>&1 | test-groups.py EXECUTABLES.json STAGES_FILE

EXECUTABLES.json is what `cargo test --no-run --message-format=json` printed: it maps each test
executable to its package. A test binary's time runs from its `Running` line to the next one,
so it includes the binary's start-up; the rows are written one level below the stage (see
scripts/lib/stages.sh), so the table shows them under it and leaves them out of the total.
"""
import json
import os
import re
import sys
import time

RUNNING = re.compile(r"^\s*Running .*\((?P<exe>[^)]+)\)\s*$")
DOC = re.compile(r"^\s*Doc-tests ")


def package_of_executables(path):
    owners = {}
    with open(path, encoding="utf-8") as messages:
        for line in messages:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            executable = message.get("executable") if isinstance(message, dict) else None
            if message.get("reason") == "compiler-artifact" and executable:
                owners[executable] = package_name(message.get("package_id", ""))
    return owners


def package_name(package_id):
    """The name in a package id: "path+file:///w/crates/acl#tidemark-acl@0.1.0", or, when the
    name is the directory's, "path+file:///w/crates/tidemark#0.1.0" (older cargo: "name 0.1.0 (...)")."""
    if "#" in package_id:
        location, fragment = package_id.rsplit("#", 1)
        if "@" in fragment:
            return fragment.split("@", 1)[0]
        return location.rstrip("/").rsplit("/", 1)[-1]
    return package_id.split(" ", 1)[0]




def main():
    owners = package_of_executables(sys.argv[1])
    seconds = {}
    current, started = None, None

    def close(now):
        if current is not None:
            seconds[current] = seconds.get(current, 0.0) + now - started

    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        running = RUNNING.match(line)
        if running or DOC.match(line):
            now = time.monotonic()
            close(now)
            current, started = None, now
            if running:
                exe = running.group("exe")
                current = next(
                    (pkg for path, pkg in owners.items() if path.endswith(exe) or exe.endswith(path)),
                    exe.rsplit("/", 1)[-1],
                )
    close(time.monotonic())
    # Inside a stage the depth is already one below it: the packages break that stage down.
    depth = int(os.environ.get("TIDEMARK_STAGE_DEPTH", "1"))
    with open(sys.argv[2], "a", encoding="utf-8") as stages:
        for package, spent in sorted(seconds.items(), key=lambda item: -item[1]):
            stages.write(f"row\t-\t{depth}\t{package}\t{round(spent)}\n")


if __name__ == "__main__":
    main()
