#!/usr/bin/env python3
"""Prints the property names Apache RocketMQ's broker reads from broker.conf, for
crates/broker/src/config/apache_keys.txt.

Apache's broker sets every broker.conf key through a setter of one of its config classes, so
the names are those classes' private instance fields. Reads a git checkout of apache/rocketmq
(the argument) at the revisions given after it (default: 4.9.7, 5.3.3 and HEAD).
"""
import re
import subprocess
import sys

CLASSES = {"BrokerConfig", "BrokerIdentity", "MessageStoreConfig", "NettyServerConfig",
           "NettyClientConfig", "AuthConfig"}
FIELD = re.compile(r"^\s*private\s+(?!static\b)(?:(?:volatile|transient)\s+)*[\w<>\[\], .]+?\s+(\w+)\s*[=;]", re.M)


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: apache-config-keys.py <apache/rocketmq checkout> [revision...]")
    repo = sys.argv[1]
    revisions = sys.argv[2:] or ["rocketmq-all-4.9.7", "rocketmq-all-5.3.3", "HEAD"]
    names = set()
    for revision in revisions:
        for path in git(repo, "ls-tree", "-r", "--name-only", revision).split():
            stem = path.rsplit("/", 1)[-1].removesuffix(".java")
            if path.endswith(".java") and stem in CLASSES and "/src/main/" in path:
                names.update(FIELD.findall(git(repo, "show", f"{revision}:{path}")))
    print("\n".join(sorted(names)))


if __name__ == "__main__":
    main()
