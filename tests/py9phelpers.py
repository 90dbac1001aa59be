"""The independent python-9p client driving a whole server: connect, and the few
operations the call tests are written in (an agent's rdwr, mkdir, read)."""
from __future__ import annotations

from py9p import DMDIR, OREAD, ORDWR, Client

def connect(app) -> Client:
    c = Client.connect_unix(app.addr[len("unix!"):], msize=8192 + 24)
    c.negotiate()
    c.attach(0, uname="agent")
    return c


_fids = iter(range(1000, 10**6))


def rdwr(c: Client, path: str, data: bytes) -> bytes:
    """client_9p's rdwr: open ORDWR, write once, read on the same fid."""
    f = next(_fids)
    c.walk(0, f, path)
    try:
        c.open(f, ORDWR)
        c.write(f, data)
        out, off = b"", 0
        while True:
            chunk = c.read(f, offset=off)
            if not chunk:
                return out
            out += chunk
            off += len(chunk)
    finally:
        c.clunk(f)


def mkdir(c: Client, path: str) -> None:
    parent, name = path.rsplit("/", 1)
    f = next(_fids)
    c.walk(0, f, parent)
    c.create(f, name, DMDIR | 0o755, OREAD)
    c.clunk(f)


def read(c: Client, path: str) -> bytes:
    f = next(_fids)
    c.walk(0, f, path)
    c.open(f, OREAD)
    try:
        return c.read(f)
    finally:
        c.clunk(f)


def agent(c: Client, s: str, a: str, *tools: str) -> str:
    mkdir(c, f"session/{s}")
    mkdir(c, f"session/{s}/agent/{a}")
    base = f"session/{s}/agent/{a}"
    if tools:
        assert rdwr(c, base + "/ctl", ("tool_load " + " ".join(tools)).encode()) == \
            "".join(t + "\n" for t in tools).encode()
    return base
