#!/usr/bin/env python3
"""Fails on a broken link in the docs book, README.md or ARCHITECTURE.md.

Checks every relative link and image of docs/book/src/**/*.md: the file must exist inside the
book (a link leaving it would break in the built HTML), and a `#fragment` must name a heading of
the target page, with the ids mdBook gives headings. Also: every page is listed in SUMMARY.md,
and the relative links of README.md and ARCHITECTURE.md point at files of the repository (and
headings, for `.md` targets). Standard library only; run from anywhere.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BOOK = os.path.join(ROOT, "docs", "book", "src")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(path):
    """(line number, text) of lines outside fenced code, code spans blanked."""
    fenced = False
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced and not line.startswith("    "):
                yield number, line


def heading_ids(path):
    """The ids mdBook gives the page's headings (lower case, spaces to '-', other signs dropped,
    repeats numbered)."""
    ids, seen = set(), {}
    for _, line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        text = CODE_SPAN.sub(lambda m: m.group(2), match.group(2))
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
        base = "".join(
            c.lower() if (c.isalnum() or c in "_-") else "-" if c.isspace() else "" for c in text
        )
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(path):
    for number, line in prose_lines(path):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def check_file(path, inside_book):
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        file_part, _, fragment = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
        if inside_book and not resolved.startswith(BOOK + os.sep):
            problems.append(f"{where}: leaves the book (docs/book/src)")
        elif not os.path.exists(resolved):
            problems.append(f"{where}: no such file")
        elif fragment and resolved.endswith(".md") and fragment not in heading_ids(resolved):
            problems.append(f"{where}: no heading #{fragment} in {os.path.relpath(resolved, ROOT)}")
    return problems


def main():
    problems = []
    pages = []
    for directory, _, names in os.walk(BOOK):
        pages += [os.path.join(directory, name) for name in names if name.endswith(".md")]
    for page in sorted(pages):
        problems += check_file(page, inside_book=True)
    summary = os.path.join(BOOK, "SUMMARY.md")
    listed = {os.path.normpath(os.path.join(BOOK, target.partition("#")[0])) for _, target in links(summary)}
    for page in sorted(pages):
        if page != summary and page not in listed:
            problems.append(f"{os.path.relpath(page, ROOT)}: not listed in docs/book/src/SUMMARY.md")
    for name in ("README.md", "ARCHITECTURE.md"):
        problems += check_file(os.path.join(ROOT, name), inside_book=False)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"book links: {len(pages)} pages checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
