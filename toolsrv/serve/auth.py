"""Shared-secret authentication for TCP listeners: 9P Tauth with an afid exchange, mutual,
bound to the server, the direction and the TLS channel.

A Unix socket needs none (the kernel names the peer's uid: SO_PEERCRED); a TCP
listener started with `--auth-secret FILE` (required with `--listen-any`) admits
only clients that prove they hold the secret, and proves it holds it too.  The
conversation, on the afid that Tauth makes (already open for reading and writing,
as in lib9p; offsets are ignored, as for lib9p's p9any):

    Tauth tag T afid A uname U aname N -> Rauth (qid type QTAUTH)
    Tread A   -> "toolsrv-auth-2 <server id> <snonce: 32 hex digits>\\n"
    Twrite A  "<cnonce: 32 hex digits> <HMAC-SHA256(Kc, transcript client->server), hex>\\n"
              a wrong answer is Rerror "permission denied: authentication failed", and
              the connection ends
    Tread A   -> "ok <HMAC-SHA256(Ks, transcript server->client), hex>\\n"  (the client checks)
    Tattach fid F afid A uname U aname N -> allowed only when A proved the secret for U, N

    Kc = HMAC-SHA256(secret, "toolsrv-auth-2 key client")   Ks: the same with "server"
    transcript = "toolsrv-auth-2" ‖ direction ‖ server id ‖ snonce ‖ cnonce ‖ U ‖ N
                 ‖ binding, NUL between each

What each part stops.  The server id is the address the connection reached on the server
(`HOST!PORT`), and a client refuses a challenge naming any other than the one its socket
is connected to: a remote that hands the front the challenge of another server sharing
the secret (a relay) is refused, and a relay that rewrites the id gets an answer the real
server refuses.  A key per role, and the direction in the transcript, keep the answer of
one side from ever serving as the other's (a reflection).  Fresh nonces from both sides
keep an answer or a proof from serving twice (a replay).  Inside TLS the binding is the
channel's `tls-unique` (`binding`): an exchange relayed from one TLS
connection to another does not verify.  The secret never crosses the wire.

Bounds (issue 43): an answer is at most MAX_ANSWER bytes (a write past it, or a wrong one,
fails and ends the connection); what an afid holds of it is in its fid's aux, counted in
--max-held; a connection holds at most MAX_AFIDS afids (server.py).
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import stat
from typing import Any, Callable

from toolsrv.proto import QTAUTH, Qid

from ..errors import P9Error, busy
from ..tree.node import Node

log = logging.getLogger("toolsrv.auth")

SCHEME = "toolsrv-auth-2"
OLD_SCHEME = "toolsrv-hmac-sha256"     # before it: not bound to the server; can be relayed
MIN_SECRET = 16
MAX_ANSWER = 256           # bytes an answer may take, whitespace included (it takes 98)
MAX_AFIDS = 8              # afids one connection may hold at once
EAUTHFAIL = "permission denied: authentication failed"
EAUTHREQ = "permission denied: authentication required (Tauth with the shared secret)"
EAUTHLONG = (f"permission denied: authentication failed: an answer is at most {MAX_ANSWER} "
             "bytes: too long")
EAUTHDONE = "permission denied: authentication failed: the afid's answer was already given"
_paths = itertools.count(1)
_HEX = frozenset(b"0123456789abcdef")


class AuthError(ValueError):
    """The client's side refused the server: its challenge or its proof."""


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


def address_id(sockaddr: Any) -> str:
    """A socket address as the server id the challenge names: `HOST!PORT` (an IPv4
    address mapped into IPv6 as its IPv4 self)."""
    host = str(sockaddr[0])
    return f"{host.removeprefix('::ffff:')}!{sockaddr[1]}"


def binding(ssl_object: Any) -> bytes:
    """The TLS channel binding of a connection (b"" for plain TCP).  Python's ssl has no
    TLS exporter (RFC 9266); `tls-unique` is what it gives, the first Finished message of
    the handshake, the same at both ends and unique to it (TLS 1.3: it covers both key
    shares; TLS 1.2: with the extended master secret OpenSSL negotiates)."""
    if ssl_object is None:
        return b""
    return b"tls-unique:" + (ssl_object.get_channel_binding("tls-unique") or b"")


def key(secret: bytes, role: str) -> bytes:
    """The key of one role ("client" or "server"), derived from the secret."""
    return hmac.new(secret, f"{SCHEME} key {role}".encode(), hashlib.sha256).digest()


def mac(secret: bytes, role: str, server: str, snonce: bytes, cnonce: bytes, uname: str,
        aname: str, chan: bytes) -> str:
    """What the side `role` proves, in hex: its key over the transcript, its direction
    first (client->server, server->client)."""
    direction = "client->server" if role == "client" else "server->client"
    msg = b"\0".join([SCHEME.encode(), direction.encode(), server.encode(), snonce, cnonce,
                      uname.encode(), aname.encode(), chan])
    return hmac.new(key(secret, role), msg, hashlib.sha256).hexdigest()


def _hex(word: bytes, n: int) -> bytes | None:
    return bytes.fromhex(word.decode()) if len(word) == 2 * n and set(word) <= _HEX else None


class ClientProof:
    """The client's side of one exchange: `answer(challenge)` is what to write to the
    afid, `check(proof)` what to make of the read that follows.  `dialed` is the address
    the client's socket is connected to (address_id), `chan` its binding()."""

    def __init__(self, secret: bytes, uname: str, aname: str, dialed: str,
                 chan: bytes = b"") -> None:
        self.secret, self.uname, self.aname = secret, uname, aname
        self.dialed, self.chan = dialed, chan
        self.cnonce = os.urandom(16)
        self.server = ""
        self.snonce = b""

    def answer(self, challenge: bytes) -> bytes:
        """The answer to a challenge; raises AuthError for one of another scheme or one
        that names another server than the one dialed."""
        words = challenge.split()
        scheme = words[0].decode("ascii", "replace")[:40] if words else ""
        if scheme == OLD_SCHEME:
            raise AuthError(f"{self.dialed}: the server speaks {OLD_SCHEME}, an older "
                            f"authentication that can be relayed: upgrade it to speak {SCHEME}")
        snonce = _hex(words[2], 16) if len(words) == 3 else None
        if scheme != SCHEME or snonce is None:
            raise AuthError(f"{self.dialed}: unknown authentication challenge "
                            f"{challenge[:80]!r} (this client speaks {SCHEME})")
        server = words[1].decode("ascii", "replace")
        if server != self.dialed:
            raise AuthError(f"{self.dialed}: the server names itself {server[:80]!r}, not "
                            "the address dialed: a relay, or a tunnel or NAT in between "
                            "(forward to the same address and port the server listens on)")
        self.server, self.snonce = server, snonce
        mine = mac(self.secret, "client", server, snonce, self.cnonce, self.uname, self.aname,
                   self.chan)
        return f"{self.cnonce.hex()} {mine}\n".encode()

    def check(self, proof: bytes) -> None:
        """Raise AuthError unless the server proved the secret for this exchange."""
        want = mac(self.secret, "server", self.server, self.snonce, self.cnonce, self.uname,
                   self.aname, self.chan)
        words = proof.split()
        if len(words) != 2 or words[0] != b"ok" or \
                not hmac.compare_digest(words[1], want.encode()):
            raise AuthError(f"{self.dialed}: the server did not prove the shared secret "
                            "(not the server it should be, or another secret: check the "
                            "secret file)")


class AuthFile(Node):
    """The afid's file: read the challenge, write the answer, read the server's proof.
    `end` hangs up the connection once the reply to a failed answer is out."""

    perm = 0o600

    def __init__(self, secret: bytes, uname: str, aname: str, server: str, chan: bytes,
                 end: Callable[[], None],
                 refused: Callable[[str], None] | None = None) -> None:
        super().__init__("auth", (1 << 62) | next(_paths))
        self.secret, self.uname, self.aname = secret, uname, aname
        self.server, self.chan, self.end = server, chan, end
        self.refused = refused     # tells the audit trail of a failed answer (Authenticator)
        self.snonce = os.urandom(16)
        self.proof = b""           # the server's proof, once the client proved the secret

    @property
    def proven(self) -> bool:
        return bool(self.proof)

    def qid(self) -> Qid:
        return Qid(QTAUTH, 0, self.qpath)

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        line = self.proof or f"{SCHEME} {self.server} {self.snonce.hex()}\n".encode()
        return line[:count]

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        if self.proven:
            return self._turn_away(fid, EAUTHDONE, "an answer after the proof")
        got = fid.aux.setdefault("answer", bytearray())
        if len(got) + len(data) > MAX_ANSWER:
            return self._turn_away(fid, EAUTHLONG, f"an answer past {MAX_ANSWER} bytes")
        got += data
        words = got.split()
        if b"\n" not in got and (len(words) < 2 or len(words[1]) < 64):
            return len(data)           # the answer so far: the rest comes in the next write
        cnonce = _hex(words[0], 16) if len(words) == 2 else None
        if cnonce is None:
            return self._turn_away(fid, EAUTHFAIL, "not an answer of " + SCHEME)
        want = mac(self.secret, "client", self.server, self.snonce, cnonce, self.uname,
                   self.aname, self.chan)
        if not hmac.compare_digest(bytes(words[1]), want.encode()):
            return self._turn_away(fid, EAUTHFAIL, "wrong answer to the challenge")
        del fid.aux["answer"]
        proof = mac(self.secret, "server", self.server, self.snonce, cnonce, self.uname,
                    self.aname, self.chan)
        self.proof = f"ok {proof}\n".encode()
        return len(data)

    def _turn_away(self, fid: Any, ename: str, why: str) -> int:
        fid.aux.pop("answer", None)
        said = f"auth refused: uname {self.uname!r} aname {self.aname!r}: {why}"
        log.warning("%s; hanging up", said)
        if self.refused is not None:
            self.refused(said)
        self.end()
        raise P9Error(ename)


class Authenticator:
    """A listener's auth policy: makes afid files and checks them at attach."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        # the audit trail's hook (tree/state/audit.py connection_refused): (peer, why) for
        # each failed answer and each attach turned away
        self.on_refuse: Callable[[Any, str], None] | None = None

    def refused(self, link: Any, why: str) -> None:
        """A connection turned away (a failed answer, an attach without the proof)."""
        if self.on_refuse is not None:
            self.on_refuse(getattr(link, "peer", None), why)

    def node(self, uname: str, aname: str, link: Any, afids: int) -> AuthFile:
        """The afid's file for a connection holding `afids` already (at most MAX_AFIDS);
        its link (transport.NinePProtocol) names the address the peer reached and the TLS
        binding, and hangs up after a failed answer."""
        if afids >= MAX_AFIDS:
            raise P9Error(busy("too many auth fids", MAX_AFIDS, then="clunk some"))
        server, chan = link.channel()
        return AuthFile(self.secret, uname, aname, server, chan, link.end,
                        lambda why: self.refused(link, why))

    def check(self, afid: Any, uname: str, aname: str) -> None:
        """Raise P9Error unless afid (a Fid or None) proved the secret for uname/aname."""
        node = getattr(afid, "node", None)
        if not isinstance(node, AuthFile):
            raise P9Error(EAUTHREQ)
        if not node.proven or node.uname != uname or node.aname != aname:
            raise P9Error(EAUTHFAIL)
