#!/usr/bin/env python3
"""Checks that every WARN and ERROR log line of the product code is explained on the operator's
troubleshooting page, docs/book/src/operating/troubleshooting.md.

Usage, from the repository root:

    python3 scripts/lib/check-log-lines.py [--page PATH] [--list]

The product code is every `crates/*/src/**/*.rs` except test code: files named `tests.rs` or
`*_tests.rs`, and items marked `#[cfg(test)]` (an inline `mod tests { ... }`, a test-only
function). `crates/*/tests/` is never read. A log site is a `warn!`, `error!`, `tracing::warn!`
or `tracing::error!` call, on one line or over many; comments and string literals are skipped.

A site's message is its format string: the first argument that is a lone string literal, after
any structured fields (`name = value`, `%name`, `?name`, `name`). The fragment checked is the
message's literal text before its first placeholder, trimmed; when that is shorter than 12
characters, the longest literal run between placeholders is used instead. The page matches a
fragment when it contains it, runs of white space counting as one space; a fragment taken from
the start of a message must also start a code span or a bold lead-in (follow a backtick or an
asterisk), so that `accept failed` is not found inside `HA accept failed`.

Prints every site whose fragment the page lacks as `path:line: fragment` and exits 1 if there is
one, 0 otherwise (2 when the page cannot be read). A site with no format string is printed the
same way, with `<no message>`.
`--list` prints every site found (`path:line: LEVEL message`) and its count instead.
"""
import argparse
import glob
import os
import re
import sys

PAGE = "docs/book/src/operating/troubleshooting.md"
MIN_PREFIX = 12
MACROS = {"warn": "WARN", "error": "ERROR"}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STRING_START = re.compile(r'(?:b|c)?r(#*)"|(?:b|c)?"')


def tokenize(text):
    """Rust tokens as (kind, value, offset): kind is 'ident', 'str' (value decoded), 'punct' or
    'other'. Comments and white space are dropped."""
    tokens = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := STRING_START.match(text, i)) and (m.group(0).endswith('"')):
            if m.group(1) is not None:  # raw string: no escapes, ends at "###
                close = '"' + m.group(1)
                end = text.find(close, m.end())
                end = n if end < 0 else end
                tokens.append(("str", text[m.end():end], i))
                i = end + len(close)
            else:
                value, i = read_string(text, m.end())
                tokens.append(("str", value, m.start()))
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime / label ('a).
            m = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'").match(text, i)
            if m:
                tokens.append(("other", m.group(0), i))
                i = m.end()
            else:
                m = IDENT.match(text, i + 1)
                i = m.end() if m else i + 1
        elif (m := IDENT.match(text, i)):
            tokens.append(("ident", m.group(0), i))
            i = m.end()
        elif c.isdigit():
            m = re.compile(r"[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?").match(text, i)
            tokens.append(("other", m.group(0), i))
            i = m.end()
        elif text.startswith("::", i):
            tokens.append(("punct", "::", i))
            i += 2
        elif text.startswith("=>", i) or text.startswith("==", i):
            tokens.append(("punct", text[i:i + 2], i))
            i += 2
        else:
            tokens.append(("punct", c, i))
            i += 1
    return tokens


ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}


def read_string(text, i):
    """Decodes a "..." literal whose body starts at i; returns (value, offset after the quote)."""
    out = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\" and i + 1 < n:
            e = text[i + 1]
            if e == "\n":  # line continuation: the newline and the next line's indent vanish
                i += 2
                while i < n and text[i] in " \t\r\n":
                    i += 1
                continue
            if e == "u" and (m := re.compile(r"u\{([0-9a-fA-F_]+)\}").match(text, i + 1)):
                out.append(chr(int(m.group(1).replace("_", ""), 16)))
                i = m.end()
                continue
            if e == "x":
                out.append(chr(int(text[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(ESCAPES.get(e, e))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out), n


OPEN = {"(": ")", "[": "]", "{": "}"}


def skip_group(tokens, k):
    """tokens[k] opens a group; returns the index after its closing token."""
    depth = 0
    while k < len(tokens):
        kind, value, _ = tokens[k]
        if kind == "punct" and value in OPEN:
            depth += 1
        elif kind == "punct" and value in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return k


def test_spans(tokens):
    """Offset ranges of items under #[cfg(test)] (an inline module, a function, ...)."""
    spans = []
    k = 0
    while k + 6 < len(tokens):
        window = [t[1] for t in tokens[k:k + 7]]
        if window == ["#", "[", "cfg", "(", "test", ")", "]"]:
            start = tokens[k][2]
            j = k + 7
            # The item runs to its first top-level ';' or to the end of its first brace group.
            while j < len(tokens):
                kind, value, _ = tokens[j]
                if kind == "punct" and value == ";":
                    j += 1
                    break
                if kind == "punct" and value == "{":
                    j = skip_group(tokens, j)
                    break
                if kind == "punct" and value in ("(", "["):
                    j = skip_group(tokens, j)
                    continue
                j += 1
            end = tokens[j - 1][2] + 1 if j - 1 < len(tokens) else float("inf")
            spans.append((start, end))
            k = j
        else:
            k += 1
    return spans


def split_arguments(tokens, k):
    """tokens[k] opens the macro's argument group; returns its top-level arguments as token
    lists."""
    end = skip_group(tokens, k)
    arguments, current, depth = [], [], 0
    for token in tokens[k + 1:end - 1]:
        kind, value, _ = token
        if kind == "punct" and value in OPEN:
            depth += 1
        elif kind == "punct" and value in (")", "]", "}"):
            depth -= 1
        if depth == 0 and kind == "punct" and value == ",":
            arguments.append(current)
            current = []
        else:
            current.append(token)
    if current:
        arguments.append(current)
    return arguments


def format_string(arguments):
    """The first argument that is a lone string literal, or None. Structured fields (`a = b`,
    `%a`, `?a`, `a.b`, `a`) and `target:`/`parent:`/`name:` settings are passed over."""
    for argument in arguments:
        if len(argument) == 1 and argument[0][0] == "str":
            return argument[0][1]
    return None


def sites(root="."):
    """Every WARN/ERROR log site of the product code: (path, line, level, message or None)."""
    found = []
    for path in sorted(glob.glob(os.path.join(root, "crates/*/src/**/*.rs"), recursive=True)):
        name = os.path.basename(path)
        if name == "tests.rs" or name.endswith("_tests.rs"):
            continue
        with open(path, encoding="utf-8") as source:
            text = source.read()
        tokens = tokenize(text)
        excluded = test_spans(tokens)
        for k, (kind, value, offset) in enumerate(tokens):
            if kind != "ident" or value not in MACROS:
                continue
            if k + 2 >= len(tokens) or tokens[k + 1][1] != "!" or tokens[k + 2][1] not in OPEN:
                continue
            # `warn!` or `tracing::warn!` (also `::tracing::warn!`); any other path is not ours.
            if k >= 1 and tokens[k - 1][1] == "::":
                if k < 2 or tokens[k - 2][1] != "tracing":
                    continue
                start = tokens[k - 2][2]
            else:
                start = offset
            if any(a <= start < b for a, b in excluded):
                continue
            line = text.count("\n", 0, start) + 1
            message = format_string(split_arguments(tokens, k + 2))
            found.append((os.path.relpath(path, root), line, MACROS[value], message))
    return found


def literal_runs(message):
    """The literal text between placeholders ('{{' and '}}' read as braces)."""
    runs, current, i = [], [], 0
    while i < len(message):
        if message.startswith("{{", i) or message.startswith("}}", i):
            current.append(message[i])
            i += 2
        elif message[i] == "{":
            runs.append("".join(current))
            current = []
            end = message.find("}", i)
            i = len(message) if end < 0 else end + 1
        else:
            current.append(message[i])
            i += 1
    runs.append("".join(current))
    return runs


def fragment(message):
    runs = literal_runs(message)
    prefix = runs[0].strip()
    if len(prefix) >= MIN_PREFIX:
        return prefix
    return max((run.strip() for run in runs), key=len)


def squeeze(text):
    return re.sub(r"\s+", " ", text)


def documented(page, message):
    """Whether `page` (squeezed) holds `message`'s fragment; see the module documentation."""
    runs = literal_runs(message)
    piece = squeeze(fragment(message))
    if piece != squeeze(runs[0].strip()):
        return piece in page
    return re.search(r"(?:^|[`*])" + re.escape(piece), page) is not None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", default=PAGE, help=f"the page to check (default {PAGE})")
    parser.add_argument("--list", action="store_true", help="print every site found and stop")
    options = parser.parse_args()
    found = sites()
    if options.list:
        for path, line, level, message in found:
            print(f"{path}:{line}: {level} {message if message is not None else '<no message>'}")
        print(f"{len(found)} sites in {len({site[0] for site in found})} files")
        return 0
    try:
        with open(options.page, encoding="utf-8") as page:
            text = squeeze(page.read())
    except OSError as error:
        print(f"cannot read {options.page}: {error}", file=sys.stderr)
        return 2
    missing = 0
    for path, line, _, message in found:
        piece = "<no message>" if message is None else squeeze(fragment(message))
        if message is None or not documented(text, message):
            print(f"{path}:{line}: {piece}")
            missing += 1
    if missing:
        print(f"{missing} of {len(found)} log lines are not on {options.page}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
