"""TLS for 9P over TCP: the contexts, the peer's identity, and a TLS socket for threads.

    tls!HOST!PORT        (dial.py)  9P2000 inside TLS, on a TCP port of its own

Theory of operation.  The standard library's `ssl` does all of TLS (OpenSSL underneath);
asyncio's transports take its contexts as they are (`create_server(ssl=...)`,
`create_connection(ssl=..., server_hostname=...)`), so nothing else is needed
(doc/hosts.md, TLS).  A server context needs a certificate and its key; given a client CA
it is mutual TLS: a client without a certificate that CA signed fails the handshake, and the
certificate's subject is the peer's name in the log, as a Unix peer's uid is.  A client
context verifies the server's certificate and its host name against the system's store or
a private CA (--tls-ca, $TOOLSRV_TLS_CA), and presents a certificate of its own when given
one.  Both refuse anything older than TLS 1.2.

The handshake is bounded on both ends (HANDSHAKE_TIMEOUT): a plain 9P client that dials a
TLS port sends a Tversion the server cannot read as a ClientHello, and is hung up on at
once; one that sends nothing is hung up on when the bound passes.

The threaded client (cli/client.py) shares one connection between a reader thread and
writers: an `ssl.SSLSocket` may not be read and written from two threads at once (OpenSSL's
SSL objects are not thread-safe), so `TLSSocket` runs the TLS state machine on memory BIOs
under a lock and does the socket's blocking reads and writes outside it.  Lock order:
the write lock, then the state lock; bytes leave in the order TLS made them.

`asyncio` may have been imported with `ssl` hidden (cli/command.py does, to start fast);
`asyncio_ssl()` gives its modules the real one before a TLS transport is made.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

from ..record import Record

HANDSHAKE_TIMEOUT = 10.0     # seconds a TLS handshake may take, either end
ENV = {"ca": "TOOLSRV_TLS_CA", "cert": "TOOLSRV_TLS_CERT", "key": "TOOLSRV_TLS_KEY"}


class TLSError(ConnectionError):
    """A TLS set-up or handshake failed; the message names the file or the peer.  A
    ConnectionError, so what catches a failed dial catches it (no errno: never taken for
    "nothing answers")."""


def _ssl() -> Any:
    import ssl
    asyncio_ssl(ssl)
    return ssl


def asyncio_ssl(ssl: Any = None) -> None:
    """Give asyncio's modules the `ssl` module they were imported without, if they were."""
    if ssl is None:
        import ssl
    for name in ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "ssl", ssl) is None:
            mod.ssl = ssl   # type: ignore[attr-defined]


def _load(what: str, fn: Any, *paths: str) -> None:
    try:
        fn(*paths)
    except FileNotFoundError as e:
        raise TLSError(f"{what} {e.filename or paths[0]}: file not found") from None
    except OSError as e:        # ssl.SSLError is one: a file that is not PEM, a wrong key
        raise TLSError(f"{what} {' '.join(paths)}: {getattr(e, 'reason', None) or e}") from None


def server_context(cert: str, key: str, client_ca: str | None = None) -> Any:
    """The context of a TLS listener; with client_ca, clients must show a certificate it
    signed (mutual TLS).  Raises TLSError naming the file that is wrong."""
    ssl = _ssl()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load("--tls-cert/--tls-key", ctx.load_cert_chain, cert, key)
    if client_ca:
        _load("--tls-client-ca", ctx.load_verify_locations, client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ClientTLS(Record):
    """What a client trusts and shows: a CA file (None: the system's store), and a
    certificate and key for mutual TLS."""
    FIELDS = ("ca", "cert", "key")

    def __init__(self, ca: str | None = None, cert: str | None = None,
                 key: str | None = None) -> None:
        self.ca, self.cert, self.key = ca, cert, key

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **given: str | None) -> "ClientTLS":
        """The options given, each one missing from $TOOLSRV_TLS_CA/_CERT/_KEY."""
        env = dict(os.environ) if env is None else env
        return cls(**{k: given.get(k) or env.get(v) or None for k, v in ENV.items()})

    def context(self) -> Any:
        """The client context: the server's certificate and host name verified."""
        ssl = _ssl()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)      # CERT_REQUIRED, check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca:
            _load("--tls-ca", ctx.load_verify_locations, self.ca)
        else:
            ctx.load_default_certs()
        if self.cert or self.key:
            if not (self.cert and self.key):
                raise TLSError("--tls-cert and --tls-key go together")
            _load("--tls-cert/--tls-key", ctx.load_cert_chain, self.cert, self.key)
        return ctx


SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
         "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
         "domainComponent": "DC"}


def subject(peercert: dict | None) -> str | None:
    """A certificate's subject as one line, in its order (`O=fleet,CN=agent1`), or None."""
    if not peercert or not peercert.get("subject"):
        return None
    return ",".join(f"{SHORT.get(k, k)}={v}" for rdn in peercert["subject"] for k, v in rdn)


def handshake_error(e: BaseException, where: str) -> TLSError:
    """A failed handshake as a sentence naming the peer and what to do."""
    ssl = _ssl()
    if isinstance(e, ssl.SSLCertVerificationError):
        why = e.verify_message or e.reason
        if "mismatch" in str(why):    # trusted, but made out to another name or address
            return TLSError(f"{where}: the server's certificate is not for this address: "
                            f"{why} (dial the name or address it was made for, or give the "
                            "server a certificate whose subjectAltName holds this one)")
        return TLSError(f"{where}: the server's certificate is not trusted: "
                        f"{why} (pass --tls-ca FILE or set "
                        "$TOOLSRV_TLS_CA to the CA that signed it)")
    if isinstance(e, ssl.SSLError):
        why = e.reason or str(e)
        hint = " (the server wants a client certificate: --tls-cert/--tls-key)" \
            if "CERTIFICATE" in str(why).upper() or "ALERT" in str(why).upper() else ""
        return TLSError(f"{where}: TLS handshake failed: {why}{hint}")
    if isinstance(e, (TimeoutError, socket.timeout)):
        return TLSError(f"{where}: TLS handshake timed out after {HANDSHAKE_TIMEOUT:g}s "
                        "(is it a TLS port?)")
    return TLSError(f"{where}: TLS handshake failed: {e or type(e).__name__} "
                    "(is it a TLS port?)")


def no_answer(where: str) -> TLSError:
    """The server closed the TLS connection before its first reply."""
    return TLSError(f"{where}: the server closed the TLS connection before answering "
                    "(most likely it wants a client certificate it trusts: "
                    "--tls-cert FILE --tls-key FILE)")


class TLSSocket:
    """TLS over a connected blocking socket, safe for one reader thread and many writers.
    Has what cli/client.py uses of a socket: sendall, recv, settimeout, shutdown, close,
    getpeername, and the SSL object."""

    def __init__(self, sock: socket.socket, ctx: Any, host: str, where: str,
                 timeout: float | None = None) -> None:
        ssl = _ssl()
        self.sock, self.ssl, self.where = sock, ssl, where
        self.answered = False                # any data came after the handshake
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        self._state = threading.Lock()       # the SSL object and its BIOs
        self._wlock = threading.Lock()       # the socket's writes, in TLS's order
        sock.settimeout(HANDSHAKE_TIMEOUT if timeout is None else
                        min(timeout, HANDSHAKE_TIMEOUT))
        try:
            self._handshake()
        except (OSError, EOFError) as e:
            raise handshake_error(e, where) from None
        sock.settimeout(None)

    def _handshake(self) -> None:
        while True:
            with self._state:
                try:
                    self.obj.do_handshake()
                    done = True
                except self.ssl.SSLWantReadError:
                    done = False
            self._flush()
            if done:
                return
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the server hung up during the handshake")
            self.incoming.write(data)

    @property
    def peercert(self) -> dict | None:
        return self.obj.getpeercert()

    @property
    def ssl_object(self) -> Any:
        """The SSL object, for the channel binding (auth.binding)."""
        return self.obj

    def getpeername(self) -> Any:
        return self.sock.getpeername()

    def _flush(self) -> None:
        with self._wlock:
            with self._state:
                out = self.outgoing.read()
            if out:
                self.sock.sendall(out)

    def sendall(self, data: bytes) -> None:
        with self._wlock:
            with self._state:
                view = memoryview(data)
                while view:
                    n = self.obj.write(view)
                    view = view[n:]
                out = self.outgoing.read()
            self.sock.sendall(out)

    def recv(self, n: int) -> bytes:
        while True:
            with self._state:
                try:
                    data = self.obj.read(n)
                except self.ssl.SSLWantReadError:
                    data = None
                except (self.ssl.SSLZeroReturnError, self.ssl.SSLEOFError):
                    return b""
                except self.ssl.SSLError as e:   # TLS 1.3: a refused client cert shows here
                    raise handshake_error(e, self.where) from None
                pending = self.outgoing.pending
            if pending:
                self._flush()
            if data is not None:
                self.answered = True
                return data
            raw = self.sock.recv(65536)
            if not raw:
                if not self.answered:        # asyncio's server drops its alert: say why
                    raise no_answer(self.where)
                return b""
            with self._state:
                self.incoming.write(raw)

    def settimeout(self, t: float | None) -> None:
        self.sock.settimeout(t)

    def fileno(self) -> int:
        return self.sock.fileno()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()
