"""Shared-secret authentication for TCP listeners: 9P Tauth with an afid exchange.

A Unix socket needs none (the kernel names the peer's uid: SO_PEERCRED); a TCP
listener started with `--auth-secret FILE` (required with `--listen-any`) admits
only clients that prove they hold the secret.  The conversation, on the afid
that Tauth makes (already open for reading and writing, as in lib9p):

    Tauth tag T afid A uname U aname N  -> Rauth (qid type QTAUTH)
    Tread A offset 0                    -> "toolsrv-hmac-sha256 <nonce, 32 hex digits>\\n"
    Twrite A "<64 hex digits>"          -> HMAC-SHA256(secret, nonce NUL U NUL N) in hex;
                                           a wrong answer is Rerror "permission denied:
                                           authentication failed"
    Tattach fid F afid A uname U aname N -> allowed only when A proved the secret for the
                                           same U and N; without a proven afid, Rerror
                                           "permission denied: authentication required"

The secret itself never crosses the wire, and an answer is good for its own
nonce only, so a passive listener learns nothing it can replay.  The rest of
the conversation is not encrypted: on an untrusted network, tunnel it (ssh -L).
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import stat
from typing import Any

from toolsrv.proto import QTAUTH, Qid

from ..errors import P9Error
from ..tree.node import Node

log = logging.getLogger("toolsrv.auth")

SCHEME = "toolsrv-hmac-sha256"
MIN_SECRET = 16
EAUTHFAIL = "permission denied: authentication failed"
EAUTHREQ = "permission denied: authentication required (Tauth with the shared secret)"
_paths = itertools.count(1)


def load_secret(path: str) -> bytes:
    """Read a secret file: ours, a regular file, not readable by group or others."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if st.st_uid != os.getuid():
            raise ValueError(f"{path}: owned by uid {st.st_uid}, not by us")
        if st.st_mode & 0o077:
            raise ValueError(f"{path}: mode {st.st_mode & 0o777:o}: must not be readable "
                             "by group or others (chmod 600)")
        secret = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(secret) < MIN_SECRET:
        raise ValueError(f"{path}: secret shorter than {MIN_SECRET} bytes")
    return secret


def answer(secret: bytes, challenge: bytes, uname: str, aname: str) -> bytes:
    """The client's reply to a challenge read from the afid."""
    words = challenge.decode("ascii", "replace").split()
    if len(words) != 2 or words[0] != SCHEME:
        raise ValueError(f"unknown authentication challenge {challenge[:60]!r}")
    return _mac(secret, bytes.fromhex(words[1]), uname, aname).encode()


def _mac(secret: bytes, nonce: bytes, uname: str, aname: str) -> str:
    msg = nonce + b"\0" + uname.encode() + b"\0" + aname.encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


class AuthFile(Node):
    """The afid's file: read the challenge, write the answer."""

    perm = 0o600

    def __init__(self, secret: bytes, uname: str, aname: str) -> None:
        super().__init__("auth", (1 << 62) | next(_paths))
        self.uname, self.aname = uname, aname
        self.nonce = os.urandom(16)
        self.expected = _mac(secret, self.nonce, uname, aname)
        self.proven = False
        self.got = b""

    def qid(self) -> Qid:
        return Qid(QTAUTH, 0, self.qpath)

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return f"{SCHEME} {self.nonce.hex()}\n".encode()[offset:offset + count]

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        if self.proven:
            return len(data)
        self.got += data
        text = self.got.strip()
        if len(text) < len(self.expected):
            return len(data)
        if not hmac.compare_digest(text, self.expected.encode()):
            self.got = b""
            log.warning("auth refused: uname %r aname %r: wrong answer to the challenge",
                        self.uname, self.aname)
            raise P9Error(EAUTHFAIL)
        self.proven = True
        return len(data)


class Authenticator:
    """A listener's auth policy: makes afid files and checks them at attach."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def node(self, uname: str, aname: str) -> AuthFile:
        return AuthFile(self.secret, uname, aname)

    def check(self, afid: Any, uname: str, aname: str) -> None:
        """Raise P9Error unless afid (a Fid or None) proved the secret for uname/aname."""
        node = getattr(afid, "node", None)
        if not isinstance(node, AuthFile):
            raise P9Error(EAUTHREQ)
        if not node.proven or node.uname != uname or node.aname != aname:
            raise P9Error(EAUTHFAIL)
