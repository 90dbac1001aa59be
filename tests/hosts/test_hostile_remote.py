"""What a hostile remote host sends (issue 43, findings 8 and 9): its msize, its frames,
its reads' lengths, and its words.  The remote is tests/hosts/hostile9p.py, a 9P server on
a loopback port; the front a whole server on a thread, watched by the loop-lag probe.
Each test checks a bound the front keeps (bytes it took, requests it sent, bytes it
lists), never a time."""
from __future__ import annotations

import re

import pytest

from toolsrv.cli.client import Client
from toolsrv.hosts import ninep

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean
from hostshelpers import wait_for
from hostile9p import BIG, ESC, Hostile

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@pytest.fixture
def front():
    made = []

    def start(addr: str) -> tuple[AppThread, Client]:
        d = tools_dir()
        add_tool(d, "file_read", "#!/bin/sh\ncat\n")    # a local tool the remote names too
        a = AppThread([d], imports=[f"evil={addr}"]).start()
        c = Client.connect(a.addr)
        made.append((a, c))
        return a, c
    yield start
    for a, c in made:
        c.close()
        stop_clean(a)


def ctl(c: Client) -> str:
    return c.read("hosts/ctl").decode()


def test_the_msize_is_the_smaller_and_never_below_the_least():
    least = ninep.MIN_MSIZE
    assert ninep.agreed_msize(1 << 31) == ninep.MSIZE and ninep.agreed_msize(least) == least
    with pytest.raises(ninep.NinePError, match=f"msize 24 is too small: .* at least {least}"):
        ninep.agreed_msize(24)


def test_a_frame_past_our_msize_is_refused_from_its_header(front, loop_probe):
    """The remote announces msize 2 GiB and sends one Rread of BIG bytes: the front keeps
    its own msize, refuses the frame from its size[4] and hangs up, having taken no more
    than the sockets' buffers of it (it took the whole frame into memory before)."""
    with Hostile("bigframe") as h:
        a, c = front(h.addr)
        with loop_probe(a.addr):
            assert h.hung_up.wait(60), "the front read on"
            assert h.frame_sent < 32 << 20 < BIG, f"the front took {h.frame_sent} bytes"
            assert wait_for(lambda: b"evil.ok_tool" in c.read("tools/index"))  # dialled again


def test_a_tiny_msize_is_refused_naming_the_import(front, loop_probe):
    """msize 24 left a read of 0 bytes a round trip, forever: now it is refused at once,
    hosts/ctl and tools/errors say why, and not one Tread was sent."""
    with Hostile("tinymsize") as h:
        a, c = front(h.addr)
        with loop_probe(a.addr):
            assert wait_for(lambda: "too small" in ctl(c), 30), ctl(c)
        assert re.match(rf"evil {h.addr} down: the server's msize 24 is too small: toolsrv "
                        rf"needs at least {ninep.MIN_MSIZE}", ctl(c))
        assert f"evil\tunreachable at {h.addr}: the server's msize 24" in \
            c.read("tools/errors").decode()
        assert h.treads == 0


def test_an_rread_longer_than_asked_breaks_the_connection(front, loop_probe):
    with Hostile("longread") as h:
        a, c = front(h.addr)
        with loop_probe(a.addr):
            assert wait_for(lambda: "for a Tread of" in ctl(c), 30), ctl(c)
        assert re.search(r"down: broken reply from the server: Rread of (\d+) bytes for a "
                         r"Tread of (\d+)", ctl(c))
        assert b"evil." not in c.read("tools/index")


def test_a_remotes_words_reach_no_listing_with_their_control_bytes(front, loop_probe):
    """Descriptions, rejected names and error strings of the remote's choosing: listed in
    tools/index, tools/search and tools/errors, relayed in a call's error and the agent's
    log, each with its control bytes written out (a terminal reading them ran them)."""
    with Hostile("names") as h:
        a, c = front(h.addr)
        with loop_probe(a.addr):
            assert wait_for(lambda: b"evil.ok_tool" in c.read("tools/index"))
            index, errors = c.read("tools/index").decode(), c.read("tools/errors").decode()
            search = c.rdwr("tools/search", b"hostile remote").decode()
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.write("session/s/agent/a/ctl", b"tool_load evil.ok_tool\n")
            with pytest.raises(Exception) as failed:
                c.rdwr("session/s/agent/a/tools/evil.ok_tool/call", b"{}")
            log = c.read("session/s/agent/a/log").decode()
        listed = {"index": index, "search": search, "errors": errors, "log": log,
                  "error": str(failed.value)}
        for what, text in listed.items():
            assert not CONTROL.search(text.replace("\n", "").replace("\t", "")), \
                (what, text)
        assert "evil.ok_tool\thot\tremote ok_tool \\x1b]0;owned\\x07\\x1b[2J\n" in index
        assert "evil.x\\x00y\tat " in errors and "evil.err_tool\tat " in errors
        assert "\\x1b[2Jmeta: " in errors
        assert "\\x1b[2Jexit 3" in log and "boom" in str(failed.value)
        assert '"file": "/' in c.read("tools/file_read/meta").decode()   # the local one
        assert ESC not in ctl(c)
