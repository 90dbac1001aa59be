"""`toolsrv mcp --http`'s connections (issue 43 §5, mcp_http_slowloris.sh): a peer without
the token can never hold what the owner needs.

- another local uid trickling header lines on a thousand connections holds at most its
  own few, each answered 408 after the head deadline or 503 at once, and the owner's
  request with the token is answered all the while, with the face's fd limit at 1024;
- the same rules for one's own uid: the ninth connection without a request is refused 503
  at once, the others 408 when their deadline passes; a refused request ends its
  connection; a body past the bound is 413;
- the books (httpconns.Conns): per peer, in all (the oldest of the peer holding the most
  makes room), and a loopback peer is its uid.

Real sockets on loopback, real processes; waits on events with bounds.
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import selectors
import socket
import subprocess

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import FACE, HttpFace, env  # noqa: E402
from toolsrv.mcp import httpconns  # noqa: E402
from toolsrv.mcp.http import MAX_BODY  # noqa: E402
from toolsrv.mcp.httpconns import (HEAD_DEADLINE, WAITING_MAX, WAITING_PER_PEER,  # noqa: E402
                                   Conns, loopback_uid)

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "owner", "version": "1"}}}

# the other uid's client: keeps N connections open, each sending a partial head and a
# header line every second, opens a new one for each that is closed, until its stdin
# closes; then says what it saw: the status of every answer, and how many stayed open
TRICKLER = r"""
import json, selectors, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()
sel.register(sys.stdin, selectors.EVENT_READ)
got, made, said = {}, 0, {}
def conn():
    global made
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setblocking(False)
    s.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    sel.register(s, selectors.EVENT_READ, b"")
    made += 1
for _ in range(n):
    conn()
print("held", made, flush=True)
going, last = True, time.monotonic()
while going:
    for key, _ in sel.select(0.5):
        if key.fileobj is sys.stdin:
            going = False
            continue
        s = key.fileobj
        try:
            d = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            d = b""
        if d:
            sel.modify(s, selectors.EVENT_READ, key.data + d)
            continue
        head = key.data.split(b" ", 2)
        st = head[1].decode() if len(head) > 1 else "none"
        got[st] = got.get(st, 0) + 1
        if st not in said:
            said[st] = key.data.decode("latin-1")[-300:]
        sel.unregister(s)
        s.close()
        conn()
    if time.monotonic() - last > 1:
        last = time.monotonic()
        for key in list(sel.get_map().values()):
            if key.fileobj is not sys.stdin:
                try:
                    key.fileobj.send(b"X-a: b\r\n")
                except OSError:
                    pass
print(json.dumps({"made": made, "statuses": got, "said": said}), flush=True)
"""


def post_init(url: str, token: str | None) -> int:
    import httpx2
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, json=INIT, headers=h, timeout=30).status_code


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another uid")
def test_another_uid_trickling_never_locks_the_owner_out(server, loop_probe):
    """mcp_http_slowloris.sh: nobody keeps 1,100 trickling connections going against a
    face whose fd limit is 1,024; the owner's requests with the token are answered."""
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    resource.prlimit(f.p.pid, resource.RLIMIT_NOFILE, (1024, 1024))
    base = fds(f.p.pid)
    t = subprocess.Popen(["/usr/bin/python3", "-c", TRICKLER, str(port_of(f.url)), "1100"],
                         user=65534, group=65534, extra_groups=[], cwd="/", text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with loop_probe(server.addr):
            assert t.stdout.readline().startswith("held 1100"), t.stderr.read()
            # what the face holds of them: its own few, those refused and lingering, and
            # those accepted and not yet seen or refused and not yet closed
            assert fds(f.p.pid) <= (base + WAITING_PER_PEER + httpconns.LINGER_MAX
                                    + httpconns.IN_FLIGHT + 8)
            for _ in range(5):
                assert post_init(f.url, f.token) == 200
            out, err = t.communicate(timeout=120)       # closes its stdin: it stops
        seen = json.loads(out.splitlines()[-1])
        statuses = seen["statuses"]
        assert set(statuses) <= {"503", "408"} and seen["made"] > 1100, seen
        assert "too many connections from uid 65534" in seen["said"]["503"]
        assert "Too many open files" not in f.stderr()
    finally:
        if t.poll() is None:
            t.kill()
            t.wait()
        f.stop()


def raw(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(data)
    return s


def answer(s: socket.socket) -> bytes:
    """Everything the face sends until it closes the connection (30 s at most)."""
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            s.close()
            return got
        got += d


def test_tokenless_connections_are_few_short_and_end_when_refused(server):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    port = port_of(f.url)
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port
    try:
        held = [raw(port, head) for _ in range(WAITING_PER_PEER)]
        more = answer(raw(port, head))                  # refused at once, answered
        assert more.startswith(b"HTTP/1.1 503"), more
        assert f"too many connections from uid {os.getuid()}".encode() in more
        for s in held:                                  # each closed at its deadline
            got = answer(s)
            assert got.startswith(b"HTTP/1.1 408"), got
            assert f"no whole request within {HEAD_DEADLINE:g} s".encode() in got
        # a refused request ends its connection: nothing more is read from it
        body = json.dumps(INIT).encode()
        got = answer(raw(port, head + b"Content-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body) + head))
        assert got.startswith(b"HTTP/1.1 401") and got.count(b"HTTP/1.1") == 1, got
        assert b"connection: close" in got.lower()
        # a body past the bound: 413, whatever the token
        got = answer(raw(port, head + b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
                         % (f.token.encode(), MAX_BODY + 1)))
        assert got.startswith(b"HTTP/1.1 413") and b"request body too large" in got, got
        assert post_init(f.url, f.token) == 200
    finally:
        f.stop()


def test_too_low_an_open_file_limit_is_said_at_start(server, tmp_path):
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))
    p = subprocess.run([*FACE, "-a", server.addr, "--http", "127.0.0.1:0"], cwd=tmp_path,
                       env=env(XDG_STATE_HOME=str(tmp_path)), preexec_fn=low,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "the open-file limit (300) leaves too few fds for --http" in p.stderr
    need = (httpconns.HELD_MAX + httpconns.IN_FLIGHT + httpconns.FD_RESERVE
            + httpconns.PASSED_MIN)
    assert need > 300 and f"ulimit -n {need}" in p.stderr


class FakeTransport:
    def __init__(self, host: str, port: int) -> None:
        self.peer, self.wrote, self.closed, self.eof = (host, port), b"", False, False

    def get_extra_info(self, name: str) -> object:
        return {"peername": self.peer, "sockname": ("10.0.0.1", 8765)}.get(name)

    def write(self, data: bytes) -> None:
        self.wrote += data

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed


def test_the_books_per_peer_in_all_and_making_room():
    async def go() -> None:
        books = Conns(passed_max=2)
        a = [FakeTransport("10.0.0.2", 1000 + i) for i in range(WAITING_PER_PEER + 1)]
        conns = [books.admit(t) for t in a]
        assert None not in conns[:-1] and conns[-1] is None      # the ninth: refused
        assert a[-1].eof and a[-1].wrote.startswith(b"HTTP/1.1 503")
        others = [FakeTransport(f"10.0.{i // 200 + 1}.{i % 200 + 3}", 2000)
                  for i in range(WAITING_MAX - WAITING_PER_PEER)]
        for t in others:
            assert books.admit(t) is not None
        assert books.n_waiting == WAITING_MAX
        late = FakeTransport("10.9.9.9", 3000)            # full: room is made for it
        assert books.admit(late) is not None
        assert a[0].eof and b"closed to make room" in a[0].wrote     # 10.0.0.2's oldest
        assert books.n_waiting == WAITING_MAX and not late.closed
        # passing: counted apart, and bounded in all
        assert books.passes(("10.0.0.2", 1001)) is None
        assert books.passes(("10.0.0.2", 1002)) is None
        assert "too many connections open (2 at most)" in books.passes(("10.0.0.2", 1003))
        assert books.n_passed == 2 and books.n_waiting == WAITING_MAX - 2
        books.gone(conns[1])
        assert books.n_passed == 1 and books.passes(("10.0.0.2", 1003)) is None
        for c in list(books.by_client.values()):
            books.gone(c)
        assert (books.n_waiting, books.n_passed, books.waiting, books.passed) == (0, 0, {}, {})
    asyncio.run(go())


def test_a_loopback_peer_is_its_uid():
    lst = socket.create_server(("127.0.0.1", 0))
    try:
        c = socket.create_connection(lst.getsockname())
        s, _ = lst.accept()
        assert loopback_uid(s.getpeername(), s.getsockname()) == os.getuid()
        c.close()
        s.close()
        if os.getuid() != 0:
            return
        p = subprocess.Popen(["/usr/bin/python3", "-c", "import socket,sys; c=socket."
                              f"create_connection(('127.0.0.1',{lst.getsockname()[1]})); "
                              "sys.stdin.read()"], user=65534, group=65534, extra_groups=[],
                             stdin=subprocess.PIPE, cwd="/")
        s, _ = lst.accept()
        assert loopback_uid(s.getpeername(), s.getsockname()) == 65534
        p.stdin.close()
        p.wait(30)
        s.close()
    finally:
        lst.close()
