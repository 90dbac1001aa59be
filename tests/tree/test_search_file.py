"""tools/search and an agent's search file through 9P (issue 18): a whole server on a real
Unix socket, driven by toolsrv's own client and by the independent python-9p client.

tools/search answers on the fid that wrote (as `call` does); session/S/agent/A/search keeps
the agent's last answer for any fid, which is what a shell's `echo need > search; cat
search` needs (9pfuse opens one fid for the echo and another for the cat): both flows are
played here fid by fid, and through a real 9pfuse mount in tests/cli/test_shell_search.py.
"""
from __future__ import annotations

import errno
import json
import os

import pytest
from py9p import OREAD, ORDWR, OWRITE, RemoteError

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, connect, mkdir
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import errno_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = {
    "pdf_split": {"description": "Cut a PDF document into parts.",
                  "keywords": ["split pdf pages", "burst", "extract a page range"]},
    "img_scale": {"description": "Resize an image.", "keywords": ["thumbnail", "shrink photo"]},
    "tz_now": {"description": "The time now in a time zone.", "keywords": ["clock", "what time"]},
    "plan9_only": {"description": "Burst pages on Plan 9.",
                   "variants": [{"match": {"os": "plan9"}}]},
}


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    for name, meta in TOOLS.items():
        add_tool(d, name, None, {"cmd": "cat", **meta})
    app = AppThread([d, os.path.join(REPO, "data", "tools")]).start()
    app.tools = d
    yield app
    app.cleanup()


@pytest.fixture
def c(srv):
    c = Client.connect(srv.addr)
    yield c
    c.close()


def lines(answer: bytes) -> list[list[str]]:
    return [ln.split("\t") for ln in answer.decode().splitlines() if not ln.startswith("#")]


def test_tools_search_is_listed_and_answers_on_the_same_fid(c):
    assert "search" in [d.name for d in c.ls("tools")]
    got = lines(c.rdwr("tools/search", b"burst pdf pages\n"))
    assert got[0][0] == "pdf_split"
    assert all(len(f) == 3 for f in got) and len(got) <= 10
    assert float(got[0][1]) == max(float(f[1]) for f in got)       # best first
    assert got[0][2] == "Cut a PDF document into parts."
    assert "plan9_only" not in [f[0] for f in got]                 # hidden on this host


def test_limit_and_the_default_of_ten(c):
    assert len(lines(c.rdwr("tools/search", b"limit 2\nfile"))) == 2
    assert len(lines(c.rdwr("tools/search", b"file text tool read write search"))) == 10
    assert len(lines(c.rdwr("tools/search", b"limit 1\nshrink a photo"))) == 1


@pytest.mark.parametrize("data, num", [
    (b"   \n", errno.EINVAL), (b"limit 0\nx", errno.EINVAL), (b"limit 101\nx", errno.EINVAL),
    (b"limit x\npdf", errno.EINVAL), (b"z" * 4097, errno.E2BIG)])
def test_bad_needs_fail_on_the_twrite(srv, data, num):
    """Through python-9p: the Rerror is the Twrite's, worded for 9pfuse's errno."""
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, "tools/search")
    p.open(f, ORDWR)
    with pytest.raises(RemoteError) as e:
        p.write(f, data)
    assert str(e.value).startswith("search: ") and errno_for(str(e.value)) == num
    assert p.read(f, offset=0) == b""           # nothing was searched on this fid
    p.clunk(f)
    p.close()


def test_what_a_shell_splits_arrives_whole(srv):
    """printf may write a `limit N` line apart from the need; 9pfuse cuts a write(2)
    longer than 4 KiB into 4 KiB Twrites: each still arrives, or fails, whole."""
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, "tools/search")
    p.open(f, ORDWR)
    p.write(f, b"limit 1\n")
    p.write(f, b"shrink a photo\n")
    assert lines(p.read(f, offset=0)) and len(lines(p.read(f, offset=0))) == 1
    p.write(f, b"y" * 4096)                      # a piece: kept for what follows
    with pytest.raises(RemoteError, match="too long"):
        p.write(f, b"y" * 904)
    p.write(f, b"burst pdf pages " * 256)        # exactly 4 KiB, and nothing follows
    assert lines(p.read(f, offset=0))[0][0] == "pdf_split"
    p.clunk(f)
    p.close()


def test_a_fid_that_wrote_nothing_reads_end_of_file_and_a_fid_searches_again(srv):
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, "tools/search")
    p.open(f, ORDWR)
    assert p.read(f, offset=0) == b""
    p.write(f, b"thumbnail")
    first = p.read(f, offset=0)
    assert first.startswith(b"img_scale\t")
    p.write(f, b"what time is it in Tokyo")       # offsets ignored: a new need, a new answer
    assert p.read(f, offset=0).startswith(b"tz_now\t")
    p.clunk(f)
    # another fid does not see this fid's answer
    g = next(_fids)
    p.walk(0, g, "tools/search")
    p.open(g, OREAD)
    assert p.read(g, offset=0) == b""
    p.clunk(g)
    p.close()


def test_a_descriptors_read_after_its_write_finds_the_answer(srv):
    """A read-write descriptor (`exec 3<>tools/search` under 9pfuse) reads where its write
    ended: the answer starts there."""
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, "tools/search")
    p.open(f, ORDWR)
    need = b"burst pdf pages\n"
    p.write(f, need, offset=0)
    assert p.read(f, offset=len(need)).startswith(b"pdf_split\t")
    p.clunk(f)
    p.close()


def test_the_agent_search_file_keeps_the_last_answer_for_any_fid(srv, c):
    """The shell flow: write on one fid and clunk it (echo need > search), then open,
    read and clunk another (cat search)."""
    c.mkdir("session/s1")
    c.mkdir("session/s1/agent/a")
    base = "session/s1/agent/a"
    assert "search" in [d.name for d in c.ls(base)]
    assert c.read(f"{base}/search") == b""
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, f"{base}/search")
    p.open(f, OWRITE)
    p.write(f, b"limit 3\nshrink a photo\n")
    p.clunk(f)
    g = next(_fids)
    p.walk(0, g, f"{base}/search")
    p.open(g, OREAD)
    got = lines(p.read(g, offset=0))
    p.clunk(g)
    p.close()
    assert got[0][0] == "img_scale" and len(got) <= 3
    assert c.read(f"{base}/search") == c.read(f"{base}/search")
    log = c.read(f"{base}/log").decode()
    assert "search 'shrink a photo' -> " in log
    with pytest.raises(ClientError, match="empty need"):
        c.write(f"{base}/search", b"\n")
    assert "search -> error: search: empty need" in c.read(f"{base}/log").decode()
    assert lines(c.read(f"{base}/search"))[0][0] == "img_scale"    # the error kept it


def test_the_agent_search_file_on_a_read_write_fid_answers_from_where_the_write_ended(srv, c):
    """Issue 46 item 1: `exec 3<>search; echo need >&3; head -n 1 <&3` reads at the
    offset its write left; the answer starts there, whole (it lost as many bytes as the
    need had)."""
    c.mkdir("session/s46")
    c.mkdir("session/s46/agent/a")
    p = connect(srv)
    f = next(_fids)
    p.walk(0, f, "session/s46/agent/a/search")
    p.open(f, ORDWR)
    need = b"shrink a photo\n"
    p.write(f, need, offset=0)
    got = p.read(f, offset=len(need))
    assert got.startswith(b"img_scale\t"), got[:40]
    assert p.read(f, offset=len(need) + 4) == got[4:]          # sliced from that origin
    again = b"what time\n"
    p.write(f, again, offset=len(need) + len(got))              # the descriptor's offset
    assert p.read(f, offset=len(need) + len(got) + len(again)).startswith(b"tz_now\t")
    p.clunk(f)
    p.close()
    assert lines(c.read("session/s46/agent/a/search"))[0][0] == "tz_now"   # any fid, at 0


def test_each_agent_has_its_own_answer(c):
    c.mkdir("session/s2")
    c.mkdir("session/s2/agent/x")
    c.mkdir("session/s2/agent/y")
    c.write("session/s2/agent/x/search", b"thumbnail")
    c.write("session/s2/agent/y/search", b"what time")
    assert lines(c.read("session/s2/agent/x/search"))[0][0] == "img_scale"
    assert lines(c.read("session/s2/agent/y/search"))[0][0] == "tz_now"


def test_a_change_on_disk_is_found_by_the_next_search(srv, c):
    rev = int(c.read("revision"))
    add_tool(srv.tools, "qr_decode", None, {"cmd": "cat", "description": "Decode QR codes.",
                                           "keywords": ["scan a qr code"]})
    c.rdwr("revwait", str(rev).encode())                  # the registry saw it
    assert lines(c.rdwr("tools/search", b"scan a qr code"))[0][0] == "qr_decode"
    rev = int(c.read("revision"))
    os.unlink(os.path.join(srv.tools, "qr_decode.meta"))
    c.rdwr("revwait", str(rev).encode())
    assert "qr_decode" not in [f[0] for f in lines(c.rdwr("tools/search", b"scan a qr code"))]


def test_tool_search_and_client_9p_search_from_inside_a_call(c):
    c.mkdir("session/s3")
    c.mkdir("session/s3/agent/a")
    c.rdwr("session/s3/agent/a/ctl", b"tool_load tool_search client_9p")
    out = c.rdwr("session/s3/agent/a/tools/tool_search/call",
                 json.dumps({"query": "burst pdf pages", "limit": 2}).encode())
    assert lines(out)[0][0] == "pdf_split" and len(lines(out)) == 2
    with pytest.raises(ClientError, match="invalid args"):
        c.rdwr("session/s3/agent/a/tools/tool_search/call", b'{"query": "x", "limit": 0}')
    out = c.rdwr("session/s3/agent/a/tools/client_9p/call", json.dumps(
        {"op": "rdwr", "path": "tools/search", "data": "limit 1\nthumbnail"}).encode())
    assert lines(out)[0][0] == "img_scale"
    out = c.rdwr("session/s3/agent/a/tools/client_9p/call", json.dumps(
        {"op": "write", "path": "session/s3/agent/a/search", "data": "what time"}).encode())
    assert lines(c.read("session/s3/agent/a/search"))[0][0] == "tz_now"
    # the search file of another agent is outside the tool's scope
    c.mkdir("session/s3/agent/b")
    from toolsrv.cli.shortcut import call_file    # the reason whole, as the CLI prints it
    with pytest.raises(ClientError, match="agent/b is outside"):
        call_file(c, "session/s3/agent/a/tools/client_9p/call", json.dumps(
            {"op": "write", "path": "session/s3/agent/b/search", "data": "x"}).encode())


def test_a_server_with_no_tools_answers_nothing():
    app = AppThread([tools_dir()]).start()
    try:
        with Client.connect(app.addr) as c:
            answer = c.rdwr("tools/search", b"anything")
            assert lines(answer) == []
    finally:
        app.cleanup()


STARTUP = """
import sys
sys.path[:0] = [{tests!r}]
from apphelpers import AppThread, tools_dir
from toolsrv.cli.client import Client
heavy = lambda: sorted({{m.split(".")[0] for m in sys.modules}} & {{"numpy", "wordllama", "tokenizers"}})
app = AppThread([{tools!r}]).start()
with Client.connect(app.addr) as c:
    c.read("tools/index")
    print("started", heavy())
    c.rdwr("tools/search", b"anything")
    print("searched", heavy())
app.cleanup()
"""


def test_the_extra_is_not_imported_until_the_first_search(srv):
    import subprocess
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", STARTUP.format(tests=here, tools=srv.tools)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "started []"
    import importlib.util
    if importlib.util.find_spec("wordllama") is not None:
        assert out[1] == "searched ['numpy', 'tokenizers', 'wordllama']"
