#!/usr/bin/python3
"""A test tool: reads a JSON list of probes on stdin, tries each, prints one JSON result line.

Each probe is {"op": ..., ...}; each result is {"ok": true, ...} or {"ok": false, "errno":
"EACCES", ...}.  It follows the tool contract (args on stdin, result on stdout) so the tests
exercise the same path as real tools.  Runs under /usr/bin/python3 as the sandboxed uid."""
import errno
import json
import os
import signal
import socket
import sys


def attempt(fn, p):
    try:
        value = fn(p)
        return {"ok": True, "value": value}
    except OSError as e:
        return {"ok": False, "errno": errno.errorcode.get(e.errno, str(e.errno))}


def read(p):
    with open(p["path"], "rb") as f:
        return f.read(200).decode(errors="replace")


def write(p):
    with open(p["path"], "w") as f:
        f.write(p.get("data", "x"))
    return True


def listdir(p):
    return sorted(os.listdir(p["path"]))[:20]


def execute(p):
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(p["path"], [p["path"]] + p.get("args", []))
        except OSError as e:
            os._exit(100 + e.errno)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def connect_tcp(p):
    with socket.create_connection((p.get("host", "127.0.0.1"), p["port"]), timeout=5) as s:
        return s.recv(16).decode()


def bind_tcp(p):
    with socket.socket() as s:
        s.bind(("127.0.0.1", p.get("port", 0)))
        return s.getsockname()[1]


def udp(p):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return s.sendto(b"hi", (p.get("host", "127.0.0.1"), p["port"]))


def abstract(p):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect("\0" + p["name"])
        return True


def kill(p):
    os.kill(p["pid"], p.get("sig", signal.SIGTERM))
    return True


def open_fds(_p):
    found = []
    for fd in range(3, 256):
        try:
            os.fstat(fd)
            found.append(fd)
        except OSError:
            pass
    return found


def link(p):
    os.symlink(p["target"], p["path"])
    return True


def hardlink(p):
    os.link(p["target"], p["path"])
    return True


def rename(p):
    os.rename(p["src"], p["dst"])
    return True


def whoami(_p):
    return {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "pid": os.getpid(),
            "cwd": os.getcwd(), "env": dict(os.environ)}


def alloc(p):
    return len(bytearray(p["bytes"]))


OPS = {f.__name__: f for f in (read, write, listdir, execute, connect_tcp, bind_tcp, udp, abstract,
                               kill, open_fds, link, hardlink, rename, whoami, alloc)}


def main():
    probes = json.load(sys.stdin)
    results = []
    for p in probes:
        try:
            results.append(attempt(OPS[p["op"]], p))
        except MemoryError:
            results.append({"ok": False, "errno": "ENOMEM"})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
