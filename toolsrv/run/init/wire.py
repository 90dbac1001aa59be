# toolsrv/run/init/wire.py — one packet and the fds it carries (SCM_RIGHTS), received.
#
# Theory of operation.  The server, the launcher and each init talk over SOCK_SEQPACKET
# socketpairs: one JSON request or report per packet, fds beside it.  Every side reads the
# same way: into a buffer made once (recvmsg(MAX) would allocate MAX bytes and shrink them
# for every packet), with MSG_CMSG_CLOEXEC (socket.recv_fds drops the flags in 3.11), and
# the fds taken out of every SCM_RIGHTS record.  Light on purpose: the launcher imports it.
from __future__ import annotations

import socket

MAX_PACKET = 1 << 20  # the largest request or report any of the three sides sends


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
