"""toolsrv.cli.client against a scripted 9P peer: what rdwr sends and what it waits for.

The peer answers on a socketpair from a thread; it holds back its Rclunks until the test
lets them go, so the test sees that rdwr returns without them and that a fid whose clunk
is unanswered is not reused.
"""
from __future__ import annotations

import socket
import threading

from toolsrv.proto import (
    Framer, Qid, Rattach, Rclunk, Ropen, Rread, Rversion, Rwalk, Rwrite, Tattach, Tclunk,
    Topen, Tread, Tversion, Twalk, Twrite, encode,
)
from toolsrv.cli.client import Client


class Peer(threading.Thread):
    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.seen: list = []
        self.held: list = []                    # Tclunks not answered yet
        self.release = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        framer = Framer(1 << 16)
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                return
            out = b""
            for m in framer.feed(data):
                with self.lock:
                    self.seen.append(m)
                if isinstance(m, Tversion):
                    out += encode(Rversion(m.tag, m.msize, "9P2000"))
                elif isinstance(m, Tattach):
                    out += encode(Rattach(m.tag, Qid(0x80, 0, 1)))
                elif isinstance(m, Twalk):
                    out += encode(Rwalk(m.tag, tuple(Qid(0, 0, 10 + i)
                                                      for i in range(len(m.wname)))))
                elif isinstance(m, Topen):
                    out += encode(Ropen(m.tag, Qid(0, 0, 99), 0))
                elif isinstance(m, Twrite):
                    out += encode(Rwrite(m.tag, len(m.data)))
                elif isinstance(m, Tread):
                    out += encode(Rread(m.tag, b"result" if m.offset == 0 else b""))
                elif isinstance(m, Tclunk):
                    with self.lock:
                        self.held.append(m)
            if out:
                self.sock.sendall(out)

    def answer_clunks(self) -> None:
        with self.lock:
            held, self.held = self.held, []
        self.sock.sendall(b"".join(encode(Rclunk(m.tag)) for m in held))


def test_rdwr_returns_before_its_clunk_is_answered_and_the_fid_waits_for_it():
    ours, theirs = socket.socketpair()
    peer = Peer(theirs)
    peer.start()
    c = Client(ours, uname="test")
    try:
        box: dict = {}
        t = threading.Thread(target=lambda: box.setdefault("r", c.rdwr("a/b/call", b"{}")))
        t.start()
        t.join(10)
        assert box.get("r") == b"result"        # returned with its Tclunk unanswered
        for _ in range(100):
            with peer.lock:
                if peer.held:
                    break
            threading.Event().wait(0.01)
        with peer.lock:
            first = [m for m in peer.seen if isinstance(m, Twalk)][-1].newfid
            assert [m.fid for m in peer.held] == [first]
        assert c.rdwr("a/b/call", b"{}") == b"result"
        with peer.lock:
            second = [m for m in peer.seen if isinstance(m, Twalk)][-1].newfid
        assert second != first                  # not reused while its clunk is out
        for _ in range(100):                    # both Tclunks have reached the peer
            with peer.lock:
                if len(peer.held) == 2:
                    break
            threading.Event().wait(0.01)
        peer.answer_clunks()
        for _ in range(100):                    # the reader frees both once Rclunk is in
            with c._lock:
                if not c._slots and set(c._free_fids) >= {first, second}:
                    break
            threading.Event().wait(0.01)
        with c._lock:
            assert not c._slots and set(c._free_fids) >= {first, second}
        assert c.rdwr("a/b/call", b"{}") == b"result"
        with peer.lock:
            third = [m for m in peer.seen if isinstance(m, Twalk)][-1].newfid
        assert third in (first, second)         # a freed fid is used again
    finally:
        c.close()                               # the peer sees end of file and returns
        peer.join(10)
        theirs.close()
