#!/usr/bin/env python3
"""Non-test, non-comment, non-blank lines of Rust code in the agent and the executor at a git revision.

    python3 scripts/loc.py [REV ...]        # default: HEAD; prints one line per revision

Counted: every `*.rs` file under `services/agent/src` and `services/executor/src` as stored at REV
(`git show REV:path`, so the work tree does not matter), less
- files named `tests.rs`, and files and directories named `testing` (`testing.rs`, `testing/`);
- files of modules declared under `#[cfg(test)]` (`#[cfg(test)] mod x;` → `x.rs` / `x/mod.rs`);
- every item under a `#[cfg(test)]` attribute (a `mod tests { … }`, a test-only `fn`, `use` or `impl`);
- blank lines and lines holding only comments (`//`, `///`, `//!`, `/* … */`).
A line with code and a trailing comment counts once. Strings, raw strings and char literals are read
as such, so braces or `//` inside them change nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys

ROOTS = ("services/agent/src", "services/executor/src")
CFG_TEST = re.compile(r"#\[cfg\(\s*test\s*\)\]")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def code_lines(text: str) -> list[str]:
    """Each line with comments removed and the contents of string and char literals blanked (`""`)."""
    out: list[str] = []
    line: list[str] = []
    i, n = 0, len(text)
    depth = 0  # nesting of /* */ comments
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "\n":
            out.append("".join(line))
            line = []
            i += 1
            continue
        if depth:
            if c == "*" and nxt == "/":
                depth -= 1
                i += 2
            elif c == "/" and nxt == "*":
                depth += 1
                i += 2
            else:
                i += 1
            continue
        if c == "/" and nxt == "/":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "/" and nxt == "*":
            depth = 1
            i += 2
            continue
        raw = re.match(r'b?r(#*)"', text[i:i + 130]) if c in "br" else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + raw.group(1)
            j = text.find(end, i + raw.end())
            j = n if j < 0 else j + len(end)
            line.append('""')
            for _ in range(text.count("\n", i, j)):
                out.append("".join(line))
                line = ['""']  # a line inside a string literal is code
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            line.append('""')
            for _ in range(text.count("\n", i, j)):
                out.append("".join(line))
                line = ['""']  # a line inside a string literal is code
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:i + 12])
            if m:
                line.append("' '")
                i += m.end()
                continue
        line.append(c)
        i += 1
    out.append("".join(line))
    return out


def count(lines: list[str]) -> tuple[int, list[str]]:
    """Lines of code outside `#[cfg(test)]` items, and the modules declared as test-only files."""
    total = 0
    test_mods: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not CFG_TEST.search(line):
            total += bool(line.strip())
            i += 1
            continue
        # Skip the attribute, any further attributes, then the item: to its `;` or its closing brace.
        rest = CFG_TEST.split(line, maxsplit=1)[1]
        j = i
        while not rest.strip() or rest.strip().startswith("#["):
            if rest.strip().startswith("#[") and "]" in rest:
                rest = rest[rest.index("]") + 1:]
                continue
            j += 1
            if j >= len(lines):
                break
            rest = lines[j]
        m = MOD_DECL.match(rest)
        if m:
            test_mods.append(m.group(1))
        balance, opened = 0, False
        while j < len(lines):
            for ch in rest:
                if ch == "{":
                    balance += 1
                    opened = True
                elif ch == "}":
                    balance -= 1
                elif ch == ";" and not opened and balance == 0:
                    break
            else:
                if not opened or balance > 0:
                    j += 1
                    rest = lines[j] if j < len(lines) else ""
                    continue
            break
        i = j + 1
    return total, test_mods


def excluded_by_name(path: str) -> bool:
    parts = path.split("/")
    return parts[-1] in ("tests.rs", "testing.rs") or "testing" in parts[:-1]


def measure(rev: str) -> dict[str, int]:
    files = [
        p
        for p in git("ls-tree", "-r", "--name-only", rev, "--", *ROOTS).split("\n")
        if p.endswith(".rs") and not excluded_by_name(p)
    ]
    counted: dict[str, int] = {}
    test_files: set[str] = set()
    for path in files:
        n, mods = count(code_lines(git("show", f"{rev}:{path}")))
        counted[path] = n
        base = path.rsplit("/", 1)[0]
        stem = path.rsplit("/", 1)[1][:-3]
        here = base if stem in ("mod", "lib", "main") else f"{base}/{stem}"
        for m in mods:
            test_files.update({f"{here}/{m}.rs", f"{here}/{m}/mod.rs"})
            test_files.update(p for p in files if p.startswith(f"{here}/{m}/"))
    totals = {root: 0 for root in ROOTS}
    for path, n in counted.items():
        if path in test_files:
            continue
        for root in ROOTS:
            if path.startswith(root + "/"):
                totals[root] += n
    return totals


def main() -> None:
    revs = sys.argv[1:] or ["HEAD"]
    for rev in revs:
        totals = measure(rev)
        short = git("rev-parse", "--short", rev).strip()
        parts = "  ".join(f"{root.split('/')[1]} {n}" for root, n in totals.items())
        print(f"{rev} ({short}): {parts}  total {sum(totals.values())}")


if __name__ == "__main__":
    main()
