# toolsrv/run/elevation.py — asking the approval broker before a run leaves the sandbox.
#
# Theory of operation.  A call with "elevated": true runs outside Landlock only after the
# broker says yes.  The protocol is one JSON line each way over a Unix stream socket: the
# server sends {"token", "session", "agent", "tool", "args", "cwd", "reach"} ("reach" says
# in words what an approved run may reach), the broker answers {"approve": true|false,
# "reason": "..."}.  Every doubt means no: no socket configured, a directory or token that
# is not provably the broker's, a peer of another uid, a socket that does not answer, a
# timeout, a closed connection, an answer that is not exactly a JSON object whose
# "approve" is the boolean true.
#
# Who is asked, and who may ask (issue 44.4).  The socket is the server's configuration
# (RunnerConfig.bypass_socket; the app takes $OLLIE_BYPASS_SOCKET), never a tool's: tools
# do not get it in their environment.  Before each question the server proves the broker:
#   - the socket's directory is ours or root's, as is every directory above it, and no
#     one else may write in it (dirs/trusted.open_kept): no other user can bind that name;
#   - the broker's token, <socket>.token beside the socket (written 0600 by the broker at
#     its start), is read through that directory's fd: a regular file of ours or root's
#     that no one else may read.  The request carries it, and the broker refuses, without
#     asking anyone, a request that does not: a tool can reach the socket (Landlock does
#     not govern connect(2) on pathname sockets, and a server not run as root shares its
#     uid with its tools), never the token (it lies outside every profile's grants);
#   - the peer that answers is of our uid or root (SO_PEERCRED), checked before the token
#     is sent.
#
# This is the server's half (the client of the broker).  The reference broker, `toolsrv
# approve [--allow TOOL …] [--socket PATH]`, is a command of its own: cli/approve.py.
from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import struct
from collections.abc import Mapping

from toolsrv.dirs.trusted import Untrusted, open_kept

MAX_LINE = 1 << 20
SOCKET_VARS = ("OLLIE_BYPASS_SOCKET", "OLLIE_ELEVATE_SOCKET")   # toolsrv's name, the seeds'


def broker_socket(env: Mapping[str, str], namespace: str) -> str:
    """The broker's socket, by the one rule `toolsrv serve` (which asks) and `toolsrv
    approve` (which listens) both follow, so that they meet without being told:
    $OLLIE_BYPASS_SOCKET, else $OLLIE_ELEVATE_SOCKET (the name the seeds use), else
    approve.sock in the Plan 9 namespace directory.  ValueError when the two variables
    name different sockets: which one is meant cannot be guessed."""
    ours, seeds = (env.get(n) or "" for n in SOCKET_VARS)
    if ours and seeds and os.path.abspath(ours) != os.path.abspath(seeds):
        raise ValueError(f"OLLIE_BYPASS_SOCKET={ours} and OLLIE_ELEVATE_SOCKET={seeds} name "
                         "two approval brokers' sockets (both variables mean the one "
                         "broker): unset one, or make them agree")
    return ours or seeds or os.path.join(namespace, "approve.sock")


def no_broker(socket_path: str) -> str:
    """No broker listens at socket_path: what to do, in few words (the runner's refusal,
    `elevation denied (permission denied): …`, must fit ERRMAX)."""
    return f"no broker at {socket_path}: start one with `toolsrv approve`"


TOKEN = ".token"          # the broker's token is <socket>.token
MAX_TOKEN = 4096
KEEP = "keep the broker's socket in a directory of yours (or root's) that no one else may write"


def token_path(socket_path: str) -> str:
    """Where the broker at socket_path keeps its token."""
    return socket_path + TOKEN


def peer_creds(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of a Unix socket's peer (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def trusted_uid(uid: int) -> bool:
    """A broker, or a server asking one, must be of our uid or root."""
    return uid in (os.geteuid(), 0)


def reach(uid: int, name: str) -> str:
    """What an approved run may reach, in words, for the broker's prompt."""
    return (f"an approved run leaves Landlock and seccomp and has the host's network: it may "
            f"read, write, run and connect to whatever uid {uid} ({name}) may on this host. "
            "It still cannot see other sessions' directories or other runs' files (the work "
            "and scratch bases are hidden, but for its own cwd and TMPDIR), nor other "
            "processes (a /proc of its own PID namespace)")


def read_token(socket_path: str) -> str:
    """The token of the broker at socket_path, read through its directory proved ours or
    root's; raises Untrusted or OSError saying what is wrong and what to do."""
    d = open_kept(os.path.dirname(os.path.abspath(socket_path)), KEEP)
    name = os.path.basename(socket_path) + TOKEN
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=d.fd)
        except FileNotFoundError:
            raise OSError(f"{d.join(name)}: no such file: no broker has started at "
                          f"{socket_path} (start `toolsrv approve --socket {socket_path}`)"
                          ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not trusted_uid(st.st_uid) \
                    or st.st_mode & 0o077 or st.st_size > MAX_TOKEN:
                raise Untrusted(f"{d.join(name)}: not a private file of ours or root's "
                                "(permission denied); restart the broker, which writes it")
            token = os.read(fd, MAX_TOKEN).decode(errors="replace").strip()
        finally:
            os.close(fd)
    finally:
        d.close()
    if not token:
        raise Untrusted(f"{d.join(name)}: empty (permission denied); restart the broker")
    return token


async def request_approval(socket_path: str | None, request: dict,
                           timeout: float = 60.0) -> tuple[bool, str]:
    """Ask the broker; return (approved, reason). Never raises for broker trouble."""
    if not socket_path:
        return False, "no approval broker configured (OLLIE_BYPASS_SOCKET is unset)"
    if not os.path.lexists(socket_path):    # the commonest case, before the token's
        return False, no_broker(socket_path)
    try:
        token = read_token(socket_path)
        return await asyncio.wait_for(_ask(socket_path, {"token": token, **request}), timeout)
    except TimeoutError:
        return False, f"approval broker did not answer within {timeout:g}s"
    except Untrusted as e:
        return False, f"approval broker: {e}"
    except (FileNotFoundError, ConnectionRefusedError):
        return False, no_broker(socket_path)
    except (OSError, ValueError) as e:
        return False, f"approval broker at {socket_path}: {e.strerror or e}" \
            if isinstance(e, OSError) else f"approval broker: bad answer: {e}"


async def _ask(socket_path: str, request: dict) -> tuple[bool, str]:
    reader, writer = await asyncio.open_unix_connection(socket_path, limit=MAX_LINE)
    try:
        pid, uid = peer_creds(writer.get_extra_info("socket"))
        if not trusted_uid(uid):
            return False, (f"approval broker at {socket_path}: served by uid {uid} (pid "
                           f"{pid}), not ours or root's (permission denied); {KEEP}")
        writer.write(json.dumps(request, default=str).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    if not line:
        return False, "approval broker closed the connection without answering"
    answer = json.loads(line)
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    reason = str(answer.get("reason") or "")
    if answer.get("approve") is True:
        return True, reason or "approved"
    return False, reason or "refused by the approval broker"
