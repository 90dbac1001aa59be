"""`toolsrv mount` and `toolsrv umount`: plan9port's 9pfuse against the server.

9pfuse is not packaged for Debian; it comes with plan9port.  When it is not
on $PATH or in $PLAN9/bin ($PLAN9 is /usr/local/plan9 when unset, as for
plan9port's own scripts) we say so and how to get it, and exit 1.  The mount
is started in its own session so it outlives this command, and we wait until
the kernel shows the mount before returning.  9pfuse stays behind as a daemon: it gets no
descriptor of ours (stdout to /dev/null, stderr to a file read back if it
fails), so `$(toolsrv mount)` or a pipe from it ends when the mount is up.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from ..serve import dial

HOWTO = ("toolsrv: 9pfuse not found: it comes with plan9port "
         "(https://9fans.github.io/plan9port/): build plan9port, then put $PLAN9/bin on "
         "your PATH or set PLAN9 (default /usr/local/plan9); FUSE must be available "
         "(/dev/fuse, fusermount)")


def default_mountpoint() -> str:
    return os.path.join(os.path.expanduser("~"), "mnt", "toolsrv")


def find_9pfuse() -> str | None:
    """9pfuse on $PATH, else in $PLAN9/bin ($PLAN9 defaulting to /usr/local/plan9, as
    plan9port's own scripts have it)."""
    found = shutil.which("9pfuse")
    if found:
        return found
    exe = os.path.join(os.environ.get("PLAN9") or "/usr/local/plan9", "bin", "9pfuse")
    return exe if os.access(exe, os.X_OK) else None


def mount(addr: str, mountpoint: str, wait: float = 10.0) -> str:
    """Mount addr on mountpoint with 9pfuse; returns the mountpoint."""
    if addr.startswith("tls!"):
        raise RuntimeError(f"toolsrv: cannot mount {addr}: 9pfuse speaks no TLS; mount a "
                           "unix! address of a server on this host (one that imports the "
                           "far one: doc/hosts.md)")
    exe = find_9pfuse()
    if exe is None:
        raise RuntimeError(HOWTO)
    os.makedirs(mountpoint, exist_ok=True)
    if os.path.ismount(mountpoint):
        raise RuntimeError(f"toolsrv: {mountpoint} is already a mount point")
    with tempfile.TemporaryFile() as errs:
        proc = subprocess.Popen([exe, addr, mountpoint], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=errs)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if os.path.ismount(mountpoint):
                return mountpoint
            if proc.poll() not in (None, 0):
                errs.seek(0)
                why = " ".join(errs.read(2000).decode(errors="replace").split())
                raise RuntimeError(f"toolsrv: 9pfuse exited with status {proc.returncode}"
                                   + (f": {why}" if why else "") + fuse_hint(why))
            time.sleep(0.05)
    raise RuntimeError(f"toolsrv: {mountpoint} did not appear as a mount within {wait:g}s")


def fuse_hint(why: str, dev: str = "/dev/fuse") -> str:
    """What to do when 9pfuse could not open the FUSE device: it is the host's to grant."""
    if dev not in why or "Permission denied" not in why:
        return ""
    try:
        st = os.stat(dev)
    except OSError:
        return ""
    return (f" ({dev} is mode {st.st_mode & 0o777:04o}, owner uid {st.st_uid}: FUSE "
            f"for this user needs it readable and writable by them, as udev's default "
            f"rules make it (0666); or mount as its owner)")


def umount(mountpoint: str) -> None:
    for cmd in (["fusermount3", "-u"], ["fusermount", "-u"], ["umount"]):
        if shutil.which(cmd[0]):
            r = subprocess.run(cmd + [mountpoint], capture_output=True, text=True)
            if r.returncode == 0:
                return
            err = r.stderr.strip()
            raise RuntimeError(f"toolsrv: {' '.join(cmd)} {mountpoint}: {err}")
    raise RuntimeError("toolsrv: no fusermount or umount on PATH")


def mount_main(args: Any) -> int:
    mp = args.mountpoint or default_mountpoint()
    try:
        if args.verb == "mount":
            addr = args.addr or str(dial.default_addr())
            mount(addr, mp)
            print(f"toolsrv: mounted {addr} on {mp}")
        else:
            umount(mp)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0
