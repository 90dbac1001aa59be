# toolsrv/run/live.py — what a running call has printed so far, seen without waiting.
#
# Theory of operation.  A Live is handed to the runner in a request's context ("live"); the
# runner attaches the run's two Collectors (pumps.py) to it while it pumps, and detaches
# them when the run ends, so a Live holds no output after the call.  Nothing is done per
# chunk read: a reader (the call's `status` file) asks, and gets the bytes of stdout kept so
# far, and the last progress line the tool wrote on stderr, found by scanning only the
# chunks that arrived since the last question.  A progress line is the tool's own report
# (doc/tools.md):
#
#     progress DONE[/TOTAL][ MESSAGE]
#
# a whole line of stderr; DONE and TOTAL are non-negative decimal numbers, MESSAGE the rest
# of the line (cut to MESSAGE_MAX characters, control characters dropped).  The line stays
# in `err` as the tool wrote it; the tool's I/O contract (args on stdin, the result on
# stdout) is untouched.  A call whose tool has secrets (run/secrets.py) sets `redact`: a
# line is redacted whole before it is parsed and cut, so no value, nor its beginning,
# reaches `status` (its out and err are redacted when the call ends: nothing of them is
# served while it runs).
from __future__ import annotations

import re
from typing import Any, Callable

MESSAGE_MAX = 200
LINE_MAX = 4096          # a longer stderr line is not a progress line (not kept whole)
_NUM = r"(?:\d+(?:\.\d+)?|\.\d+)"
_LINE = re.compile(rf"progress ({_NUM})(?:/({_NUM}))?(?: (.*))?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse(line: str) -> tuple[float, float | None, str] | None:
    """(done, total or None, message) of a progress line, or None for any other line."""
    m = _LINE.fullmatch(line.rstrip("\r"))
    if m is None:
        return None
    done, total = float(m.group(1)), float(m.group(2)) if m.group(2) else None
    message = _CONTROL.sub("", m.group(3) or "").strip()[:MESSAGE_MAX]
    return done, total, message


def words(report: tuple[float, float | None, str]) -> str:
    """A report as status writes it: `progress 40/100 compiling`."""
    done, total, message = report
    text = f"progress {done:g}" + (f"/{total:g}" if total is not None else "")
    return f"{text} {message}" if message else text


class Live:
    """A running call's stdout size and latest progress report."""

    def __init__(self) -> None:
        self.out: Any = None             # the run's Collectors while it runs (pumps.py)
        self.err: Any = None
        self.report: tuple[float, float | None, str] | None = None
        self._scanned = 0                # chunks of err scanned
        self._tail = b""                 # an unfinished last line of those
        self.redact: Callable[[str], str | None] | None = None   # run/secrets.Values'

    def attach(self, out: Any, err: Any) -> None:
        self.out, self.err = out, err

    def detach(self) -> None:
        self.scan()
        self.out = self.err = None

    def out_bytes(self) -> int | None:
        return self.out.size if self.out is not None else None

    def scan(self) -> tuple[float, float | None, str] | None:
        """Read the stderr that arrived since the last scan; the latest report."""
        err = self.err
        if err is None:
            return self.report
        chunks = err.chunks
        while self._scanned < len(chunks):
            data = self._tail + chunks[self._scanned]
            self._scanned += 1
            lines = data.split(b"\n")
            self._tail = lines.pop()
            if len(self._tail) > LINE_MAX:
                self._tail = b"\0"       # too long to be one: the rest of it is skipped
            for raw in reversed(lines):
                if raw.startswith(b"progress "):
                    line = raw.decode("utf-8", "replace")
                    got = parse((self.redact(line) or "") if self.redact else line)
                    if got is not None:
                        self.report = got
                        break
        return self.report

    def status_words(self) -> str:
        """What a running call's status line adds: ` out N` and ` progress …`."""
        n = self.out_bytes()
        text = f" out {n}" if n is not None else ""
        report = self.scan()
        return text + (f" {words(report)}" if report is not None else "")
