# toolsrv/tree/resident/pyhost.py — one interpreter kept per agent that runs its one-shot Python
# tools for each call as a cold start would (resident protocol "python", issue 33).
#
# Theory of operation.  This file runs in the tools' sandbox, in their own interpreter,
# given as source: `PYTHON -c SOURCE CAP_OUT CAP_ERR TOOLS_DIR` (no file of toolsrv needs
# a grant, nothing of toolsrv need be importable; the flags are a cold start's: none).  It
# serves the one-shot Python tools of one agent that share that directory and sandbox
# (tree/resident/pyrun.py).  It keeps the pipes to toolsrv on private descriptors
# (close-on-exec) and, for each line toolsrv sends ({"script", "argv", "stdin"}: the bytes
# a cold run reads on stdin), runs SCRIPT as `PYTHON SCRIPT ARGV...` would:
#   - descriptor 0 is a pipe that holds those bytes and ends; 1 and 2 are memory files of
#     this call, so what the script, or a child it starts, writes to them lands in order,
#     as it would in a cold run's pipes (they differ from pipes only in that they can seek);
#     sys.stdin, sys.stdout and sys.stderr are opened on them with
#     the encoding, errors and buffering the interpreter gave the real ones;
#   - a new module __main__ (fresh globals, so nothing of one call is seen by the next),
#     sys.argv as written, sys.path[0] the script's directory; each script's code is
#     compiled once and again when the file's mtime, size or inode change (the file is
#     read here, confined);
#   - SystemExit and an uncaught exception end the call as they end the interpreter (the
#     traceback on stderr, status 1);
#   - afterwards the process is put back: the environment, cwd, umask, sys.path, sys.argv,
#     sys.modules["__main__"], the standard streams and the handlers of the usual signals.
# Then one line back: {"exit": N, "stdout": S, "stderr": S}, the bytes as strings
# (surrogateescape where they are not UTF-8), each cut to its cap, with "truncated":
# "stdout" (or "stderr") when a cap cut it.  EOF on the control pipe ends the process.
# As a cold run's end: the non-daemon threads the script started are waited for, a pending
# alarm is cancelled, and os._exit(N) in the script's own process ends the call with N
# (in a child it forked, it is the real one).  What a call leaves behind that a cold run's
# end would clear (a daemon thread, a child process, an atexit handler) is the tool's to
# avoid: the bundled tools leave none.  Standard library
# only; runs on Python >= 3.8.
import fcntl
import io
import json
import os
import signal
import sys
import threading
import traceback

SIGNALS = [s for s in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD", "SIGALRM", "SIGHUP",
                       "SIGUSR1", "SIGUSR2") if hasattr(signal, s)]


def memfile():
    """An empty file of memory, for a call's stdout or stderr."""
    try:
        return os.memfd_create("toolsrv-call", 0)
    except (AttributeError, OSError):
        import tempfile
        return os.dup(tempfile.TemporaryFile().fileno())


def stdin_pipe(data):
    """A pipe that holds `data` and then ends, as a cold run's stdin does: filled now when
    it fits in the pipe (grown to it where the kernel lets), else by a thread."""
    r, w = os.pipe()
    if len(data) > 65536 and hasattr(fcntl, "F_SETPIPE_SZ"):
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, len(data))
        except OSError:
            pass
    try:
        room = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) if hasattr(fcntl, "F_GETPIPE_SZ") else 65536
    except OSError:
        room = 65536
    if len(data) <= room:
        os.write(w, data)
        os.close(w)
    else:
        def feed():
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
            except OSError:
                pass
            finally:
                os.close(w)
        threading.Thread(target=feed, daemon=True).start()
    return r


def read_back(fd, cap):
    size = os.fstat(fd).st_size
    out = os.pread(fd, min(size, cap), 0) if size else b""
    os.close(fd)
    return out, size > cap


class Script:
    """The tool's code, compiled when it changed."""

    def __init__(self, path):
        self.path, self.stamp, self.code = path, None, None

    def load(self):
        """The code object, or an error text as the interpreter prints it (status 2)."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self.stamp:
                with open(self.path, "rb") as f:
                    self.code = compile(f.read(), self.path, "exec", dont_inherit=True)
                self.stamp = stamp
        except OSError as e:
            self.stamp = None
            return None, "%s: can't open file %r: [Errno %d] %s\n" % (
                sys.executable, self.path, e.errno or 0, e.strerror or e)
        except (SyntaxError, ValueError):
            self.stamp = None
            return None, traceback.format_exc()
        return self.code, None


def exit_status(e):
    """The status SystemExit(e.code) gives a process, printing what it would print."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:
        pass
    return 1


class Saved:
    """What a call may change in the process, put back after it."""

    def __init__(self):
        self.environ = dict(os.environ)
        self.raw = dict(getattr(os.environ, "_data", {}))   # compared as bytes, at C speed
        self.cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.path, self.argv = list(sys.path), list(sys.argv)
        self.main = sys.modules.get("__main__")
        self.streams = (sys.stdin, sys.stdout, sys.stderr)
        self.handlers = {s: signal.getsignal(getattr(signal, s)) for s in SIGNALS}

    def restore(self):
        raw = getattr(os.environ, "_data", None)
        if raw is None or raw != self.raw:
            os.environ.clear()
            os.environ.update(self.environ)
        os.fchdir(self.cwd)
        os.umask(self.umask)
        sys.path[:], sys.argv[:] = self.path, self.argv
        sys.modules["__main__"] = self.main
        for s, h in self.handlers.items():
            if h is not None and signal.getsignal(getattr(signal, s)) is not h:
                signal.signal(getattr(signal, s), h)
        sys.stdin, sys.stdout, sys.stderr = self.streams


def streams(real):
    """sys.stdin, stdout, stderr on descriptors 0, 1, 2, made as the interpreter made `real`."""
    made = []
    for fd, r, mode in ((0, real[0], "r"), (1, real[1], "w"), (2, real[2], "w")):
        made.append(io.TextIOWrapper(open(fd, mode + "b", closefd=False), encoding=r.encoding,
                                     errors=r.errors, line_buffering=r.line_buffering))
    return made


class Exited(BaseException):
    """os._exit(status) in the script's own process: the call ends with that status (the
    process must serve the next one); in a child it forked, os._exit is the real one."""

    def __init__(self, status):
        BaseException.__init__(self, status)
        self.status = status


def _exit_for(pid, real_exit):
    def _exit(status):
        if os.getpid() != pid:
            real_exit(status)
        raise Exited(status)
    return _exit


def settle(before):
    """What the end of a cold run's process does that the host can: wait for the non-daemon
    threads the script started (the interpreter waits for them too), and cancel a pending
    alarm or interval timer (it would end this process after the call)."""
    threading_mod = sys.modules.get("threading")
    if threading_mod is not None:
        for t in threading_mod.enumerate():
            if t not in before and not t.daemon and t is not threading_mod.current_thread():
                t.join()
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)
    signal.alarm(0)


def run(script, argv, data, real):
    """One call, its output left in descriptors 1 and 2: its exit status."""
    before = set(threading.enumerate())
    fds = [stdin_pipe(data), memfile(), memfile()]
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = streams(real)
    status = 0
    code, why = script.load()
    if code is None:
        sys.stderr.write(why)
        status = 2
    else:
        main = type(sys)("__main__")
        main.__file__, main.__builtins__ = script.path, __builtins__
        main.__cached__ = None
        sys.modules["__main__"] = main
        sys.argv[:] = argv
        sys.path[0] = os.path.dirname(os.path.realpath(script.path))  # as `PYTHON SCRIPT`
        real_exit, os._exit = os._exit, _exit_for(os.getpid(), os._exit)
        try:
            exec(code, main.__dict__)
        except SystemExit as e:
            status = exit_status(e)
        except Exited as e:
            status = e.status & 0xFF if isinstance(e.status, int) else 1
        except BaseException:      # as the interpreter prints it: from the script's frame
            kind, err, tb = sys.exc_info()
            traceback.print_exception(kind, err, tb.tb_next if tb is not None else None)
            status = 1
        finally:
            os._exit = real_exit
        settle(before)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    return status


def main():
    cap_out, cap_err, tools = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctl_in = os.fdopen(os.dup(0), "rb")
    ctl_out = os.dup(1)
    real = (sys.stdin, sys.stdout, sys.stderr)
    del sys.argv[1:]
    sys.path[0] = os.path.realpath(tools)      # never '' (the cwd) for the host's own imports
    scripts = {}
    null = os.open(os.devnull, os.O_RDWR)
    saved = Saved()
    for line in ctl_in:
        msg = json.loads(line)
        path = msg["script"]
        script = scripts.get(path)
        if script is None:
            if len(scripts) >= 64:
                scripts.clear()
            script = scripts[path] = Script(path)
        data = msg["stdin"].encode("utf-8", "surrogateescape")
        status = run(script, msg["argv"], data, real)
        results = []
        for fd, cap in ((1, cap_out), (2, cap_err)):
            results.append(read_back(os.dup(fd), cap))
            os.dup2(null, fd)
        os.dup2(null, 0)
        saved.restore()
        reply = {"exit": status,
                 "stdout": results[0][0].decode("utf-8", "surrogateescape"),
                 "stderr": results[1][0].decode("utf-8", "surrogateescape")}
        cut = [n for n, (_, over) in zip(("stdout", "stderr"), results) if over]
        if cut:
            reply["truncated"] = cut[0]
        out = (json.dumps(reply, separators=(",", ":")) + "\n").encode()
        view = memoryview(out)
        while view:
            view = view[os.write(ctl_out, view):]


if __name__ == "__main__":      # `python -c SOURCE ...`; an import (the layout test) runs nothing
    HOST_ERR = os.dup(2)       # the host's own trouble goes where toolsrv reads it, not a call's
    try:
        main()
    except Exception:
        os.write(HOST_ERR, ("pyhost: " + traceback.format_exc()).encode("utf-8", "replace"))
        sys.exit(1)
