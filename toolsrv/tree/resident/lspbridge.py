# toolsrv/tree/resident/lspbridge.py — the language server's parent inside the sandbox: it relays
# LSP between toolsrv and the server, and reads and writes the project's files for toolsrv.
#
# Theory of operation.  toolsrv never opens a file of the session's cwd with its own
# credentials (a tool may have put a symlink there).  So a language server is not started
# alone: the resident process is this bridge, run by the same interpreter as toolsrv in
# isolated mode (`python -I -c SOURCE -- SERVER ARGV...`, so no file of it needs a grant),
# confined as every run is (Landlock, uid, PID namespace, cgroup, seccomp).  It starts the
# server as its child, with the same confinement, and then:
#   - a frame from toolsrv whose method begins with "toolsrv/" it answers itself:
#       toolsrv/read  {path, known: [mtime_ns, size] | null} -> {data, stamp} (data:
#                     the UTF-8 text in base64, so toolsrv counts no JSON values in it) or
#                     {unchanged: true} when the stamp still holds (one fstat);
#       toolsrv/write {path, text, stamp} -> {stamp}; refused when the file changed since
#                     `stamp` (no lost update), never through a symlink;
#       toolsrv/files {root, extensions, limit} -> {paths, truncated}: the project's files
#                     (hidden, cache and dependency directories skipped), for a server
#                     without workspace symbols and for whole-workspace diagnostics;
#   - every other frame from toolsrv goes to the server's stdin, byte for byte;
#   - every frame from the server goes to toolsrv, whole (one lock: no interleaving).
# It ends when the server ends (with its status), or on EOF from toolsrv or SIGTERM (the
# server is then told the same and killed after a grace).  Standard library only.
import base64
import errno
import json
import os
import signal
import subprocess
import sys
import threading

MAX_FILE = 8 * 2**20
MAX_FRAME = 64 * 2**20
out_lock = threading.Lock()


def read_frame(fd, buf):
    """(body bytes, rest of buf) or (None, buf) at EOF; raises ValueError on bad framing."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            length = None
            for line in bytes(buf[:end]).split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if length is None or not 0 <= length <= MAX_FRAME:
                raise ValueError("bad Content-Length")
            while len(buf) < end + 4 + length:
                data = os.read(fd, 65536)
                if not data:
                    return None, buf
                buf += data
            body = bytes(buf[end + 4:end + 4 + length])
            del buf[:end + 4 + length]
            return body, buf
        if len(buf) > 8192:
            raise ValueError("header too long")
        data = os.read(fd, 65536)
        if not data:
            return None, buf
        buf += data


def write_frame(fd, body):
    data = b"Content-Length: %d\r\n\r\n" % len(body) + body
    with out_lock:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]


def stamp(st):
    return [st.st_mtime_ns, st.st_size]


def do_read(p):
    fd = os.open(p["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000) == 0o100000:
            raise OSError(21, "not a regular file")
        if p.get("known") == stamp(st):
            return {"unchanged": True}
        if st.st_size > MAX_FILE:
            raise OSError(27, f"file too large ({st.st_size} bytes, limit {MAX_FILE})")
        data = b""
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
        data.decode("utf-8")     # not UTF-8 text: refused here, named
        return {"data": base64.b64encode(data).decode("ascii"), "stamp": stamp(os.fstat(fd))}
    finally:
        os.close(fd)


def do_write(p):
    fd = os.open(p["path"], os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if stamp(os.fstat(fd)) != p.get("stamp"):
            raise OSError(16, "changed on disk since it was read; try again")
        data = p["text"].encode("utf-8")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.pwrite(fd, view, len(data) - len(view)):]
        return {"stamp": stamp(os.fstat(fd))}
    finally:
        os.close(fd)


SKIP = {"node_modules", "__pycache__", "venv", "site-packages", "build", "dist", "target"}


def do_files(p):
    exts, limit, paths = tuple(p.get("extensions") or ()), int(p.get("limit") or 1000), []
    for top, dirs, files in os.walk(p["root"]):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP)
        for f in sorted(files):   # a symlink is never followed (do_read refuses it): skipped
            if f.endswith(exts) and not os.path.islink(os.path.join(top, f)):
                if len(paths) >= limit:
                    return {"paths": paths, "truncated": True}
                paths.append(os.path.join(top, f))
    return {"paths": paths, "truncated": False}


def answer(msg):
    try:
        fn = {"toolsrv/read": do_read, "toolsrv/write": do_write,
              "toolsrv/files": do_files}[msg["method"]]
        result = {"result": fn(msg.get("params") or {})}
    except KeyError:
        result = {"error": {"code": -32601, "message": f"method not found: {msg['method']}"}}
    except (OSError, UnicodeError, TypeError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if isinstance(e, OSError) and e.errno == errno.ELOOP:   # O_NOFOLLOW met a symlink
            why = "a symbolic link, not followed: name the file it points to"
        if isinstance(e, UnicodeError):
            why = "not UTF-8 text"
        result = {"error": {"code": -32001, "message": why}}
    result.update(jsonrpc="2.0", id=msg.get("id"))
    write_frame(1, json.dumps(result, ensure_ascii=False).encode())


def from_server(child):
    buf = bytearray()
    fd = child.stdout.fileno()
    try:
        while True:
            body, buf = read_frame(fd, buf)
            if body is None:
                break
            write_frame(1, body)
    except (ValueError, OSError) as e:
        print(f"lspbridge: from the server: {e}", file=sys.stderr, flush=True)
        child.kill()


def from_toolsrv(child):
    buf = bytearray()
    to = child.stdin.fileno()
    try:
        while True:
            body, buf = read_frame(0, buf)
            if body is None:
                break
            try:
                msg = json.loads(body)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and str(msg.get("method", "")).startswith("toolsrv/"):
                answer(msg)
                continue
            data = b"Content-Length: %d\r\n\r\n" % len(body) + body
            view = memoryview(data)
            while view:
                view = view[os.write(to, view):]
    except (ValueError, OSError) as e:
        print(f"lspbridge: from toolsrv: {e}", file=sys.stderr, flush=True)
    end(child)


def end(child):
    try:
        child.stdin.close()
    except OSError:
        pass
    try:
        child.terminate()
        child.wait(2)
    except (OSError, subprocess.TimeoutExpired):
        child.kill()


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("lspbridge: no language server command")
    try:
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as e:
        sys.exit(f"lspbridge: cannot start {argv[0]}: {e.strerror or e}")
    signal.signal(signal.SIGTERM, lambda *_: end(child) or os._exit(0))
    threading.Thread(target=from_toolsrv, args=(child,), daemon=True).start()
    from_server(child)
    code = child.wait()
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
