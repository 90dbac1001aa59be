"""Search work never runs on the event loop (issue 25 section 4), and a .meta whose prose
is past 64 KiB is refused in tools/errors.

The reproducer (../shared/repro/round3/huge_desc.py) loaded ten ~900 KB descriptions and
showed another client's read of `revision` stalled 15 s by the first search.  Here the
index's work is made observably slow instead of big: `SearchIndex.apply` (tokenising,
postings, embedding) is held on an event until the test lets it go.  While it is held,
another client's read of `revision` must be answered; were the work on the loop, that
read could not be served until the release (it would time out below).  No timing assert:
each wait has a generous deadline, and the assertion is the order of events.
"""
from __future__ import annotations

import json
import os
import threading

import pytest

from apphelpers import AppThread, add_tool, ranked, tools_dir
from toolsrv.cli.client import Client
from toolsrv.registry.metafile import MAX_TEXT_BYTES

DEADLINE = 120.0


@pytest.fixture
def srv():
    d = tools_dir()
    add_tool(d, "pdf_split", None, {"cmd": "cat", "description": "Cut a PDF into parts.",
                                    "keywords": ["split pdf pages"]})
    add_tool(d, "tz_now", None, {"cmd": "cat", "description": "The time in a time zone."})
    app = AppThread([d]).start()
    app.tools = d
    yield app
    app.cleanup()


class Held:
    """Wraps the index's `apply`: each call says it started, notes its thread, and waits
    for `release` before it does the work."""

    def __init__(self, index) -> None:
        self.index, self.real = index, index.apply
        self.started, self.release = threading.Event(), threading.Event()
        self.threads: list[threading.Thread] = []
        index.apply = self

    def __call__(self, moved):
        self.threads.append(threading.current_thread())
        self.started.set()
        assert self.release.wait(DEADLINE), "the test never released the index"
        return self.real(moved)


def top(answer: bytes) -> bytes:
    """The first tool a search ranks."""
    lines = ranked(answer)
    return lines[0].split(b"\t")[0] if lines else b""


def search_in_thread(addr: str, need: bytes) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        with Client.connect(addr) as c:
            out.append(c.rdwr("tools/search", need))
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def read_revision_while_held(app: AppThread, held: Held) -> None:
    """Another client's read of revision is answered while the index's work is held."""
    got: list = []

    def probe() -> None:
        with Client.connect(app.addr) as c:
            got.append(c.read("revision"))
    th = threading.Thread(target=probe, daemon=True)
    th.start()
    th.join(DEADLINE)
    assert got and got[0].strip().isdigit(), "revision was not served while search indexed"
    assert not held.release.is_set()            # it was served during the indexing


def test_another_clients_read_is_served_while_the_first_search_indexes(srv):
    held = Held(srv.app.searcher.index)
    try:
        th, out = search_in_thread(srv.addr, b"split pdf pages")
        assert held.started.wait(DEADLINE)
        read_revision_while_held(srv, held)
        assert th.is_alive()                    # the search itself waits for its answer
    finally:
        held.release.set()
    th.join(DEADLINE)
    assert out and top(out[0]) == b"pdf_split"
    assert all(t is not srv.thread for t in held.threads)   # never the loop's thread


def test_a_change_is_indexed_off_the_loop_too(srv):
    with Client.connect(srv.addr) as c:
        assert top(c.rdwr("tools/search", b"time zone")) == b"tz_now"
        held = Held(srv.app.searcher.index)
        rev = int(c.read("revision"))
        add_tool(srv.tools, "qr_decode", None, {"cmd": "cat", "description": "Decode QR codes.",
                                                "keywords": ["scan a qr code"]})
        c.rdwr("revwait", str(rev).encode())
    try:
        th, out = search_in_thread(srv.addr, b"scan a qr code")
        assert held.started.wait(DEADLINE)
        read_revision_while_held(srv, held)
    finally:
        held.release.set()
    th.join(DEADLINE)
    assert out and top(out[0]) == b"qr_decode"
    assert all(t is not srv.thread for t in held.threads)


def test_a_flushed_search_still_indexes_what_moved(srv):
    """A search whose client goes away mid-indexing: the changes it took are indexed."""
    with Client.connect(srv.addr) as c:
        c.rdwr("tools/search", b"warm up")
        held = Held(srv.app.searcher.index)
        rev = int(c.read("revision"))
        add_tool(srv.tools, "qr_decode", None, {"cmd": "cat", "description": "Decode QR codes."})
        c.rdwr("revwait", str(rev).encode())
    c = Client.connect(srv.addr)
    th = threading.Thread(target=lambda: _ignore(c.rdwr, "tools/search", b"qr"), daemon=True)
    th.start()
    assert held.started.wait(DEADLINE)
    c.close()                                   # the connection ends: its requests flush
    held.release.set()
    th.join(DEADLINE)
    with Client.connect(srv.addr) as c2:
        assert top(c2.rdwr("tools/search", b"decode qr codes")) == b"qr_decode"


def _ignore(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:
        pass


@pytest.mark.parametrize("field", ["description", "prompt", "keywords"])
def test_prose_past_64_kib_is_refused_in_tools_errors(field):
    d = tools_dir()
    words = " ".join("lorem" for _ in range(MAX_TEXT_BYTES // 5))   # ~64 KiB + spaces
    value = [words] if field == "keywords" else words
    add_tool(d, "huge", None, {"cmd": "cat", field: value})
    add_tool(d, "fits", None, {"cmd": "cat", "description": "x" * MAX_TEXT_BYTES})
    app = AppThread([d]).start()
    try:
        with Client.connect(app.addr) as c:
            errors = c.read("tools/errors").decode()
            index = c.read("tools/index").decode()
            answer = c.rdwr("tools/search", b"lorem")
    finally:
        app.cleanup()
    line = next(ln for ln in errors.splitlines() if "huge.meta" in ln)
    assert f"{field}: too long: " in line and f"at most {MAX_TEXT_BYTES} (64 KiB)" in line
    assert "fits" in index and "huge" not in index.split()
    assert b"huge" not in answer


def test_ten_huge_descriptions_from_the_reproducer_are_all_refused():
    """huge_desc.py's tools (hostile_mcp.py MODE=huge: ~60,000 random words, ~400 KB+)."""
    import random
    import string
    d = tools_dir()
    rnd = random.Random(1)
    for i in range(10):
        desc = " ".join("".join(rnd.choice(string.ascii_lowercase)
                                for _ in range(rnd.randint(3, 10))) for _ in range(60000))
        with open(os.path.join(d, f"huge{i}.meta"), "w") as f:
            json.dump({"description": desc, "cmd": "cat", "args": {"type": "object"}}, f)
    add_tool(d, "small", None, {"cmd": "cat", "description": "A small tool."})
    app = AppThread([d]).start()
    try:
        with Client.connect(app.addr) as c:
            errors = c.read("tools/errors").decode()
            assert top(c.rdwr("tools/search", b"small tool")) == b"small"
    finally:
        app.cleanup()
    assert sum("description: too long" in ln for ln in errors.splitlines()) == 10
