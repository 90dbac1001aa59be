#!/usr/bin/env python3
"""Markdown man pages (doc/toolsrv.1.md, doc/toolsrv.4.md) to roff (man(7)).

    python3 doc/mdroff.py doc/toolsrv.1.md > toolsrv/man/toolsrv.1

Only what those pages use: `# NAME(N)` (the .TH line), `##`/`###` sections, paragraphs,
fenced code blocks, `-` lists, tables (a row becomes a tagged paragraph: the first cell is
the tag), inline `code`, **bold**, *italic* and [links](...) (their text).  Stdlib only,
so `make man` and the test that checks the shipped pages (tests/test_man.py) need
nothing.  Why our own: the converters that exist (pandoc, ronn, go-md2man) are not
Python packages, and these pages need little.
"""
from __future__ import annotations

import re
import sys

DATE = "2026"


def inline(text: str) -> str:
    """One line of Markdown text as roff: escapes first, then the marks."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) >= 2:
            out.append("\\fB" + p[1:-1].replace("-", "\\-") + "\\fR")
            continue
        p = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", p)
        p = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\\fI\1\\fR", p)
        out.append(p)
    return "".join(out)


def balanced(ln: str, tick: bool) -> tuple[str, bool]:
    """A line of a paragraph or list item whose `code` span may run on to the next line
    (`tick`: one is open at its start): the span closed at the line's end and opened again
    at the next one's, so each line's marks are whole (no stray backticks in the page)."""
    ln = "`" + ln if tick else ln
    return (ln + "`", True) if ln.count("`") % 2 else (ln, False)


def line_start(s: str) -> str:
    """A roff text line may not start with . or ' (a request): guard it."""
    return "\\&" + s if s[:1] in (".", "'") else s


def convert(md: str) -> str:
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    para = tick = False
    while i < len(lines):
        ln = lines[i]
        m = re.match(r"#\s+(\S+)\((\d)\)\s*$", ln)
        if m:
            out.append(f'.TH {m.group(1)} {m.group(2)} "{DATE}" "toolsrv" "toolsrv manual"')
        elif ln.startswith("### "):
            out.append(".SS " + inline(ln[4:].strip()))
        elif ln.startswith("## "):
            out.append(".SH " + inline(ln[3:].strip()).upper())
        elif ln.startswith("```"):
            out += [".PP", ".nf", ".RS 4"]
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(line_start(lines[i].replace("\\", "\\e")))
                i += 1
            out += [".RE", ".fi"]
        elif ln.startswith("|"):
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    out += [".TP", line_start(inline(cells[0])),
                            line_start(inline(" \\(em ".join(c for c in cells[1:] if c)))]
                i += 1
            i -= 1
        elif re.match(r"\s*[-*] ", ln):
            text, tick = balanced(re.sub(r"^\s*[-*] ", "", ln), False)
            out += [".IP \\(bu 2", line_start(inline(text))]
            while i + 1 < len(lines) and lines[i + 1].startswith("  ") and lines[i + 1].strip():
                i += 1
                text, tick = balanced(lines[i].strip(), tick)
                out.append(line_start(inline(text)))
        elif not ln.strip():
            para = False
        else:
            if not para:
                out.append(".PP")
                para, tick = True, False
            text, tick = balanced(ln.strip(), tick)
            out.append(line_start(inline(text)))
        if not ln.strip() or ln.startswith(("#", "```", "|")) or re.match(r"\s*[-*] ", ln):
            para = False
        i += 1
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(convert(f.read()))
