# toolsrv/run/init/wire.py — one packet and the fds it carries (SCM_RIGHTS), received.
#
# Theory of operation.  The server, the launcher and each init talk over SOCK_SEQPACKET
# socketpairs: one JSON request or report per packet, fds beside it.  Every side reads the
# same way: into a buffer made once (recvmsg(MAX) would allocate MAX bytes and shrink them
# for every packet), with MSG_CMSG_CLOEXEC (socket.recv_fds drops the flags in 3.11), and
# the fds taken out of every SCM_RIGHTS record.  Light on purpose: the launcher imports it.
#
# The packets, at most MAX_PACKET bytes each (one module holds the bound for all sides):
#   server -> zygote   {"op": "spawn", "id", ...}  a run for an init forked for it
#                      {"op": "spares", "n"}       fork this many idle inits ahead
#                      {"op": "ping", "n"}         are you there (answered "pong")
#   zygote -> server   {"op": "hello", ...}        what this host offers, once at start
#                      {"op": "spare"}             an idle init: its socket and pidfd as fds
#                      {"op": "init", "id"}        the init forked for request id (same fds)
#                      {"op": "error", "id", "error"}  request id could not be handed over
#                      {"op": "pong", "n"}
#   server -> init     {"op": "spawn", ...}        one run (run/runner.py _spawn_message;
#                                               its env's PATH, else DEFAULT_PATH)
#                      {"op": "warm", ...}         become a warm init first (run/warmplan.py)
#   init -> server     b"S<wait status>"           the run ended, nothing of it left
#                      b"E<json reason>"           a step of the launch failed
#                      b"W<bytecode magic>"        a warm init is up (then it takes the run)
#                      b"F<json reason>"           it could not become warm, and ends
from __future__ import annotations

import socket

MAX_PACKET = 1 << 20  # the largest request or report any of the three sides sends
# a spawn request's PATH when its env names none (the runner sets it, an init looks there);
# registry/warmstart.py, which may not import run/, holds the same (tests/registry/
# test_registry.py)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def recv_into(sock: socket.socket, buf: object, max_fds: int) -> tuple[int, list[int]]:
    """(bytes received into buf, fds received); 0 bytes is EOF.  Raises what recvmsg_into
    raises (BlockingIOError on a non-blocking socket with nothing to read)."""
    size, ancillary, _flags, _addr = sock.recvmsg_into(
        [buf], socket.CMSG_SPACE(max_fds * 4), socket.MSG_CMSG_CLOEXEC)  # type: ignore[list-item]
    fds: list[int] = []
    for level, kind, blob in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(memoryview(blob)[:len(blob) // 4 * 4].cast("i"))
    return size, fds
