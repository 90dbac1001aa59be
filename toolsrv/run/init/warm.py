# toolsrv/run/init/warm.py — pid 1 of a run's namespace as a warm Python: each call a fork.
#
# Theory of operation.  A cold init (toolsrv/run/init/cold.py) asked to warm up for an
# interpreter takes on what every run of that kind shares — its network namespace, the
# tools' uid (which drops every capability), signals reset as posix_spawn resets them — and
# execs that interpreter, exactly as a cold run would start it, with BOOT as its program.
# It stays pid 1 of its PID namespace and in its cgroup.  BOOT notes what a pristine
# interpreter has loaded, imports the warmed modules (WARMED), then loads this module and
# the few it needs (SOURCES: landlock, libc, seccomp, wire, rules, confine, reap) from a memfd
# the cold init filled (so nothing comes from sys.path, and no file of toolsrv need be
# readable by the tools' uid), and calls serve().
#
# serve() is the init's loop.  Each call's child is forked ahead of its call, once the
# last call has ended and nothing of it is left (the standby: it has run the fork and the
# interpreter's at-fork handlers, and waits on a socketpair of its own), so a call does
# not wait for a fork.  A run arrives on the socket (the same request and fds as a cold
# run, plus "warm": the script, its argv), in two parts.  The init reads only the first,
# the profile's (its fixed Landlock paths, by reference), builds that much of the ruleset
# (RuleCache), and hands the standby the call's own part straight from its buffer (no
# copy of it is made here), with the ruleset, an error pipe and the run's fds; the child
# reads that into its own copy of the buffer and adds the call's paths to the ruleset, and
# the init clears its buffer, so nothing of a call stays in the memory the next call is
# forked from.  A standby found dead is replaced at once.  The packet may end with the
# script's source and the server's compilation of it (same bytecode magic): the child uses
# that only if the file it reads itself holds those very bytes.  The child confines itself
# as the cold init's spawning thread confines a tool
# (setsid, CPU rlimit, cwd, Landlock, seccomp: the uid and netns are the init's already),
# moves the run's fds to 0, 1, 2, 3... and closes every other, then makes the interpreter
# look freshly started on the script: os.environ is the call's environment, sys.argv,
# sys.orig_argv and sys.path[0] are the script's, the user site follows $HOME, every module
# not loaded before WARMED ended is dropped from sys.modules (ours among them), sys.std* are
# the ones made once ahead on pipes (as the interpreter makes them) when the run's fds are
# pipes too, rebuilt on the new fds otherwise, and a new __main__ module is made.
# serve() then returns in the child, and BOOT runs the script at its top level; an uncaught
# exception is printed without BOOT's frame, as a cold start prints it, then exits 1.
# The parent reaps as the cold init does: every child until the tool has ended, then
# kill(-1) and reap until none is left, and reports b"S<status>" (or b"E<reason>" when the
# child could not confine itself); only then is the next standby forked.  Each call is a
# fork of an interpreter that has run no tool code, so nothing of one call reaches the next.
from __future__ import annotations

import array
import atexit
import ctypes
import errno
import fcntl
import gc
import io
import json
import mmap
import os
import resource
import signal
import socket
import stat
import sys

from toolsrv.run.kernel import landlock
from toolsrv.run.kernel.confine import confine_rest
from toolsrv.run.kernel.libc import check
from toolsrv.run.init.wire import MAX_PACKET, recv_into
from toolsrv.run.init.reap import reap_until
from toolsrv.run.kernel.rules import RuleCache
from toolsrv.run.kernel.seccomp import Filter

TYPE_CHECKING = False   # an init does not import typing (its cost at start); mypy reads True
if TYPE_CHECKING:
    from typing import Any

MAX_FDS = 8
# the report when neither the standby nor a child forked then could be handed the call
NO_CHILD = json.dumps("warm: the run's child could not be handed its call (its standby and "
                      "a fresh fork both failed): call again; if it persists, serve with "
                      "--no-warm").encode()
# Imported before a call is forked (doc/performance.md, Warm starts): the standard modules
# the bundled Python tools import, measured with -X importtime (about 30 ms cold).
WARMED = ("json", "re", "stat", "errno", "collections", "base64", "shutil", "subprocess",
          "socket", "threading", "signal", "time")
# What BOOT loads from the memfd, in order (each may import only those before it).
SOURCES = ("toolsrv.run.kernel.landlock", "toolsrv.run.kernel.libc", "toolsrv.run.init.wire",
           "toolsrv.run.init.reap", "toolsrv.run.kernel.rules", "toolsrv.run.kernel.seccomp",
           "toolsrv.run.kernel.confine", "toolsrv.run.init.warm")
# argv: -c BOOT <socket fd> <memfd> <WARMED, comma-separated>
# LOAD makes BOOT's modules from the memfd alone: their packages first (empty, so an import
# of toolsrv, toolsrv.run or its folders init/ and kernel/ never searches sys.path: the
# tools' interpreter cannot import toolsrv, and must not find another), then each module,
# with __package__ set so its relative imports resolve among them.  It needs nothing importable but the standard library.
LOAD = """\
import sys as _s
_p = list(_s.path)
for _m in _s.argv[3].split(","):
    __import__(_m)
_k = set(_s.modules)
import json as _j, os as _o
with _o.fdopen(int(_s.argv[2]), "rb") as _f:
    _b = _j.loads(_f.read())
for _n in ("toolsrv", "toolsrv.run", "toolsrv.run.init", "toolsrv.run.kernel"):
    _m = _s.modules[_n] = type(_s)(_n)
    _m.__path__, _m.__package__ = [], _n
for _n, _f, _c in _b:
    _m = type(_s)(_n)
    _m.__file__, _m.__package__ = _f, _n.rpartition(".")[0]
    _s.modules[_n] = _m
    exec(compile(_c, _f, "exec"), _m.__dict__)
    setattr(_s.modules[_m.__package__], _n.rpartition(".")[2], _m)
"""
# A boot that fails (a module the interpreter lacks, a bundle it cannot load) reports
# b"F<reason>", one line, as the cold init reports a step that failed, and ends: no
# traceback reaches the server's stderr (the server logs the reason, /status shows it).
BOOT = """\
try:
""" + "".join("    " + line + "\n" for line in LOAD.splitlines()) + """\
    _r = _s.modules["toolsrv.run.init.warm"].serve(int(_s.argv[1]), _k, _p)
except BaseException as _e:
    import os as _o, json as _j, sys as _s
    _o.write(int(_s.argv[1]), b"F" + _j.dumps("warm boot: " + " ".join(
        f"{type(_e).__name__}: {_e}".split())).encode())
    _o._exit(1)
del _s, _p, _m, _k, _j, _o, _f, _b, _n, _c
try:
    exec(_r.code or compile(_r.source, _r.path, "exec", dont_inherit=True), _r.globals)
except SystemExit as _e:
    _r.exit(_e)
except BaseException as _e:
    _r.uncaught(_e)
_r.exit(None)
"""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.realpath.restype = ctypes.c_void_p
_libc.realpath.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
_libc.free.argtypes = (ctypes.c_void_p,)
_DROPPED: list = []  # the modules a call's interpreter no longer lists
_PREMADE: list = []  # sys.std* made ahead on pipes, and what their fds were (_premade)


def bundle() -> bytes:
    """The sources BOOT loads (read by the cold init, which can read them)."""
    # the directory that holds toolsrv/: toolsrv/run/init/warm.py, four levels down
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    out = []
    for name in SOURCES:
        path = os.path.join(root, *name.split(".")) + ".py"
        with open(path, encoding="utf-8") as f:
            out.append([name, path, f.read()])
    return json.dumps(out).encode()


class Run:
    """What BOOT needs in the child: the script's source, path and globals, and how the
    interpreter ends."""

    __slots__ = ("source", "path", "globals", "keep", "code", "modules")

    def __init__(self, source: bytes, path: str, globals_: dict, keep: set[str],
                 code: object = None) -> None:
        self.source, self.path, self.globals, self.keep = source, path, globals_, keep
        self.code = code  # the server's compilation of exactly these bytes, or None
        self.modules = _modules_mark()  # sys.modules as the script starts

    def exit(self, e: SystemExit | None) -> None:
        """The script ended, or raised SystemExit: its status as the interpreter takes it."""
        code = None if e is None else e.code
        if code is None:
            self.finish(0)
        if isinstance(code, int):
            self.finish(code)
        try:
            print(code, file=sys.stderr)
        except Exception:  # noqa: BLE001 - as _Py_HandleSystemExit, which ignores it
            pass
        self.finish(1)

    def finish(self, code: int, sig: int | None = None) -> None:
        """End as Py_FinalizeEx would, as far as the tool can tell, without tearing down
        the warmed modules (each object touched would copy its page: 20 ms): wait for
        non-daemon threads, run the atexit handlers, let go the script's own objects (its
        __main__ and the modules it imported: files it left open are flushed and closed),
        collect their cycles, flush the std streams (status 120 if stdout cannot be)."""
        threading = sys.modules.get("threading")
        if threading is not None and _threads_to_end(threading):
            threading._shutdown()
        atexit._run_exitfuncs()
        for name in reversed(list(self.globals)):  # the last defined first: a __del__
            if name != "__builtins__":             # still finds what it uses
                del self.globals[name]
        if _modules_mark() != self.modules:
            for name in [n for n in sys.modules if n not in self.keep]:
                del sys.modules[name]
        gc.collect()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception as err:  # noqa: BLE001 - as the interpreter reports it
                if stream is sys.stdout:
                    code = 120
                try:
                    sys.__excepthook__(type(err), err, None)
                except Exception:  # noqa: BLE001
                    pass
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        os._exit(code & 0xFF)

    def uncaught(self, e: BaseException) -> None:
        """As the interpreter ends on an uncaught exception: sys.last_*, sys.excepthook
        with the traceback from the script's frame on, exit status 1 (SIGINT for a
        KeyboardInterrupt, after the atexit handlers)."""
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e = e.with_traceback(tb)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = e
        try:
            sys.excepthook(type(e), e, tb)
        except BaseException as hook_error:  # noqa: BLE001 - as PyErr_Print does
            print("Error in sys.excepthook:", file=sys.stderr)
            sys.__excepthook__(type(hook_error), hook_error, hook_error.__traceback__)
            print("\nOriginal exception was:", file=sys.stderr)
            sys.__excepthook__(type(e), e, tb)
        # the interpreter ends by SIGINT after a KeyboardInterrupt
        self.finish(1, signal.SIGINT if isinstance(e, KeyboardInterrupt) else None)


def _modules_mark() -> tuple:
    """sys.modules's length and last name: a module imported since is added at the end,
    so two marks are the same only if none was."""
    return len(sys.modules), next(reversed(sys.modules), None)


def _threads_to_end(threading: object) -> bool:
    """Whether threading._shutdown() has anything to do at this exit: a non-daemon thread
    to wait for (each started one leaves its lock in _shutdown_locks until a shutdown or
    a later start sweeps it) or a handler of threading._register_atexit to run.  With
    neither, it would only mark this, the main thread, stopped, which nothing after
    os._exit sees; skipping it spares the child the copy of the pages it touches."""
    try:
        return bool(threading._shutdown_locks or threading._threading_atexits)  # type: ignore[attr-defined]
    except AttributeError:  # another threading than 3.9-3.12's: let it do its shutdown
        return True


def serve(sock_fd: int, keep: set[str], path: list[str]) -> Run:
    """The init's loop; returns only in a forked child, confined, ready to run a script."""
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    check(_libc.prctl(1, signal.SIGKILL, 0, 0, 0))  # PR_SET_PDEATHSIG, as a cold init
    rules, filt = RuleCache(), Filter()
    buf = mmap.mmap(-1, MAX_PACKET, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    # up: from now on an end without a report is the run's, not ours; and the bytecode
    # this interpreter runs (the server sends scripts compiled when its own is the same)
    sock.send(b"W" + sys.modules["_frozen_importlib_external"].MAGIC_NUMBER.hex().encode())
    # Once, here, not in every call: what this init loaded beyond the warmed modules
    # (toolsrv's, ctypes, mmap...) leaves sys.modules (kept alive here: a call that
    # imports one gets a fresh one, as a cold start would), and sys.path is the pristine.
    _DROPPED.extend(sys.modules.pop(n) for n in [n for n in sys.modules if n not in keep])
    sys.path[:] = path
    _PREMADE[:] = _premade()
    gc.freeze()  # what is here now is never traversed by a call's collections
    standby: tuple[int, socket.socket] | None = None
    while True:
        if standby is None:  # the next call's child, forked ahead: it waits for its call
            got = _standby(sock, buf, filt, keep, path)
            if isinstance(got, Run):
                return got  # in that child, once its call came
            standby = got
        try:
            size, fds = recv_into(sock, buf, MAX_FDS)
        except OSError:
            os._exit(0)
        if not size:
            os._exit(0)  # the server is gone, or let us go (the standby ends with us)
        # The packet: what every call of a profile shares (its fixed paths, by reference),
        # a newline, then the call's own request (and the script's source and bytecode),
        # which only the child reads: nothing of one call is left here for the next to see.
        try:
            head_end = buf.find(b"\n", 0, size)
            head = json.loads(buf[:head_end])
            ll = head.get("landlock")
            ruleset = rules.build({**ll, "paths": []}) if ll else -1
        except (OSError, LookupError, TypeError, ValueError) as e:
            buf[:size] = bytes(size)
            for fd in fds:
                os.close(fd)
            why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
            sock.send(b"E" + json.dumps(f"landlock: {why}").encode())
            continue
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        # to the standby, straight from buf (no copy of the call is made here): the rules'
        # ABI, then the call's part of the packet; the error pipe, the ruleset, the run's fds
        first = b"L%d\n" % ll["abi"] if ruleset >= 0 else b"-\n"
        give = [err_w, *([ruleset] if ruleset >= 0 else []), *fds]
        pid, chan = standby
        standby = None
        with memoryview(buf) as view:
            for retry in (False, True):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] != pid:  # not dead while it waited
                        chan.sendmsg([first, view[head_end + 1:size]], [(
                            socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", give))],
                            socket.MSG_NOSIGNAL)
                        break
                except OSError:  # it could not be handed the call: it goes, and is reaped
                    _end(pid)
                # it died waiting (killed?): a child forked now takes the call
                chan.close()
                again = _standby(sock, buf, filt, keep, path) if not retry else None
                if isinstance(again, Run):
                    return again
                if again is None:
                    pid = -1
                    break
                pid, chan = again
        chan.close()
        buf[:size] = bytes(size)  # ours is cleared; the child has its copy
        for fd in (*fds, ruleset, err_w):
            if fd >= 0:
                os.close(fd)
        status = reap_until(pid, True) if pid > 0 else 0  # always a namespace's pid 1
        report = os.read(err_r, 65536) if pid > 0 else NO_CHILD
        os.close(err_r)
        sock.send(b"E" + report if report else b"S%d" % status)


def _end(pid: int) -> None:
    """Kill and reap one child (a standby that could not take its call)."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:  # gone already, and reaped
        pass


def _standby(sock: socket.socket, buf: mmap.mmap, filt: Filter, keep: set[str],
             path: list[str]) -> Run | tuple[int, socket.socket]:
    """Fork the next call's child ahead of its call, with a socket to hand it the call:
    (its pid, our end); in the child, once its call has come, the Run."""
    ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.detach()  # both closed with every other fd once it runs, never by a finalizer
        sock.detach()
        return _called(its, buf, filt, keep, path)
    its.close()
    return pid, ours


def _called(chan: socket.socket, buf: mmap.mmap, filt: Filter, keep: set[str],
            path: list[str]) -> Run:
    """In a standby child: wait for the call (into our own copy of buf, which the init
    cleared of the last one before forking us), then become it."""
    try:
        size, fds = recv_into(chan, buf, MAX_FDS + 2)
    except OSError:
        os._exit(0)
    chan.detach()  # closed with every other fd in _become, never by a finalizer
    if not size or not fds:
        os._exit(0)  # the init let us go
    err_w = fds[0]
    try:
        first = buf.find(b"\n", 0, size)
        abi = buf[:first]
        ruleset, run = (fds[1], fds[2:]) if abi[:1] == b"L" else (-1, fds[1:])
        call_end = buf.find(b"\n", first + 1, size)
        call_end = size if call_end < 0 else call_end
        msg = json.loads(buf[first + 1:call_end])
        if ruleset >= 0:
            fs_mask = landlock.abi_masks(int(abi[1:]))[0]
            for p, a in msg["landlock"]["paths"]:
                landlock._add_path(ruleset, p, a & fs_mask)
        blob = buf[call_end + 1:size] if call_end < size else b""
        return _become(msg, run, ruleset, filt, err_w, keep, path, blob)
    except BaseException as e:  # noqa: BLE001 - reported, then this child ends
        why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
        try:
            os.write(err_w, json.dumps(str(why)).encode())
        finally:
            os._exit(127)


def _become(msg: dict, fds: list[int], ruleset: int, filt: Filter, err_w: int,
            keep: set[str], path: list[str], blob: bytes) -> Run:
    """In the child: the run's confinement, its fds, then a pristine interpreter's look."""
    step = "setsid"
    try:
        os.setsid()
        cpu = msg.get("rlimits", {}).get("cpu")
        if cpu:
            resource.setrlimit(resource.RLIMIT_CPU, tuple(cpu))
        confine_rest(msg["cwd"], ruleset, bool(msg.get("nnp")), filt)
    except OSError as e:
        step = getattr(e, "step", step)
        raise OSError(e.errno or errno.EINVAL, f"{step}: {e.strerror or e}") from None
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(fds)) for fd in fds]
    for i, fd in enumerate(high):
        os.dup2(fd, i)  # inheritable, as posix_spawn's dup2 leaves them
    os.closerange(len(fds), 1 << 20)  # everything else: ours, the run's originals, err_w
    return _pristine(msg["warm"], msg["env"], keep, path, blob)


def _pristine(warm: dict, env: dict, keep: set[str], path: list[str], blob: bytes) -> Run:
    """Make the interpreter look as a cold start on the script would."""
    script = warm["script"]
    _environ(env)
    sys.argv = list(warm["argv"])
    sys.orig_argv = list(warm["orig_argv"])
    sys.path[0] = os.path.dirname(_realpath(script))
    _user_site()
    premade = _PREMADE and _PREMADE[1] == tuple(_fd_kind(fd) for fd in (0, 1, 2))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        stream = _PREMADE[0][fd] if premade else _stdio(fd, name, getattr(sys, name))
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    main = type(sys)("__main__")
    if "__annotations__" in sys.modules["__main__"].__dict__:  # as this interpreter makes it
        main.__annotations__ = {}
    main.__dict__.update({"__file__": script, "__cached__": None, "__builtins__":
                          sys.modules["builtins"], "__loader__": sys.modules[
                              "_frozen_importlib_external"].SourceFileLoader("__main__", script)})
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write(f"{warm['orig_argv'][0]}: can't open file {script!r}: "
                         f"[Errno {e.errno}] {e.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    code = None
    if warm.get("code") and blob[:warm["code"][0]] == source:  # what it read, compiled
        import marshal
        code = marshal.loads(blob[warm["code"][0]:])
    return Run(source, script, main.__dict__, keep, code)


def _environ(env: dict[str, str]) -> None:
    """os.environ, and the C environment under it, the call's: what clear() then
    update(env) make, in the same order, without the mapping's Python-level popitem,
    encodekey and encodevalue for every variable (a tenth of a millisecond a call)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):  # an os.environ unlike 3.9-3.13's: the plain way
        os.environ.clear()
        os.environ.update(env)
        return
    for key in data:
        os.unsetenv(key)
    data.clear()
    code = sys.getfilesystemencoding()
    for key, value in env.items():
        k, v = key.encode(code, "surrogateescape"), value.encode(code, "surrogateescape")
        os.putenv(k, v)  # refuses a name with "=", as os.environ's setitem does
        data[k] = v


def _realpath(path: str) -> str:
    """The script's path as a cold start resolves it for sys.path[0] (_Py_wrealpath: the
    C library's realpath; the path as given when that fails)."""
    resolved = _libc.realpath(os.fsencode(path), None)
    if not resolved:
        return path
    try:
        return os.fsdecode(ctypes.string_at(resolved))
    finally:
        _libc.free(resolved)


def _user_site() -> None:
    """The user site directory follows $HOME, which is the call's (BOOT ran without)."""
    site: Any = sys.modules.get("site")    # its globals are set: not in ModuleType's type
    if site is None:
        return
    site.USER_BASE = site.USER_SITE = None
    user = site.getusersitepackages()
    if site.ENABLE_USER_SITE and os.path.isdir(user) and user not in sys.path:
        first = next((i for i, p in enumerate(sys.path) if p.endswith("-packages")),
                     len(sys.path))
        sys.path.insert(first, user)


def _premade() -> list:
    """[streams, kinds]: sys.std* made once, here, as _stdio makes them on fds 0, 1, 2 that
    are pipes (a call's are), for each call's child to take unused when its fds 0, 1, 2 are
    of the same kinds (_fd_kind); [] when they cannot be made.  Made on a pipe of our own
    moved to 0, 1, 2 for the while (the streams keep only the fd numbers, and what fstat,
    isatty and lseek said of them), our fds put back after."""
    r, w = os.pipe2(os.O_CLOEXEC)
    saved = {}
    try:
        for fd in (0, 1, 2):
            try:
                saved[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            except OSError:
                saved[fd] = -1
        for fd, to in ((r, 0), (w, 1), (w, 2)):
            os.dup2(fd, to, inheritable=False)
        streams = [_stdio(fd, name, getattr(sys, name))
                   for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr"))]
        return [streams, tuple(_fd_kind(fd) for fd in (0, 1, 2))]
    except OSError:
        return []
    finally:
        for fd, was in saved.items():
            if was >= 0:
                os.dup2(was, fd, inheritable=False)
                os.close(was)
            else:
                os.close(fd)
        os.close(r)
        os.close(w)


def _fd_kind(fd: int) -> tuple[int, int]:
    """What a std stream made on fd depends on (its type: a tty, seekable; its blksize)."""
    st = os.fstat(fd)
    return stat.S_IFMT(st.st_mode), st.st_blksize


def _stdio(fd: int, name: str, old: object) -> object:
    """sys.<name> as the interpreter makes it at start-up (Python/pylifecycle.c,
    create_stdio): the same codec; buffered unless the start-up made it unbuffered
    (PYTHONUNBUFFERED), then line-buffered when a tty and for stderr."""
    write = fd != 0
    buffered = not (write and isinstance(getattr(old, "buffer", None), io.FileIO))
    buf: Any = io.open(fd, "wb" if write else "rb", buffering=-1 if buffered else 0,
                       closefd=False)    # a Buffered{Reader,Writer}, or a FileIO unbuffered
    raw = buf.raw if buffered else buf
    raw.name = f"<{name}>"
    line = buffered and (raw.isatty() or fd == 2)
    stream = io.TextIOWrapper(buf, encoding=getattr(old, "encoding", None),
                              errors=getattr(old, "errors", None), newline="\n",
                              line_buffering=line, write_through=not buffered)
    stream.mode = "w" if write else "r"  # type: ignore[misc]  # writable, as create_stdio sets it
    return stream
