"""Directories toolsrv trusts: proved ours once, then used only through their fds.

Theory of operation.  toolsrv keeps its own things in a few directories: the namespace
directory (its socket), the state directory, the work base (the sessions' private cwds)
and the scratch base (each call's TMPDIR).  Some live in places every local user may
write (/tmp, /var/tmp, /dev/shm), where another user can make the name first or, owning a
directory on the way, swap what lies beneath it.  `open_dir(path, mode)` opens one such
directory and proves it ours, or raises `Untrusted` (`open_kept(path)` checks one that
another process of ours or root's keeps, the approval broker's, the same way, but makes
and changes nothing, and takes root's as well as ours):

- every directory above it (symlinks above it resolved once, and what they lead to
  checked) is owned by root or by us, and writable by no one else unless it is sticky (in
  a sticky directory no one else may rename or remove what is ours);
- it is opened from its parent's fd with O_NOFOLLOW|O_DIRECTORY (made with `mode` first
  when missing, as are missing directories above it, 0700): a symlink or anything but a
  directory is refused, never followed;
- it is owned by our euid and not sticky (a sticky directory such as /tmp is shared,
  never ours alone); its mode is then set to exactly `mode` (it is ours to fix), or, with
  fix_mode=False (a directory the user named, such as `toolsrv approve --socket`'s), left
  as it is and refused if anyone else may write in it.

The walk holds each directory's fd while it opens the next, so what was checked is what
is opened.  Everything below a `Dir` is made, chowned, listed and removed through its fd
(`dir_fd=`, never following a symlink), so no path is looked up again through a
directory someone else could change.  The message of `Untrusted` names the path, what
was found there and what to do.  Paths handed to others (a session's cwd, TMPDIR) stay
strings, and are safe as such because every directory on them was checked.
"""
from __future__ import annotations

import os
import pwd
import shutil
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
STEP_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Untrusted(ValueError):
    """A directory toolsrv would rely on is not provably ours: refuse to use it."""


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISREG, "a regular file"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


class Dir:
    """An open directory proved ours (open_dir, subdir); names below it go through fd."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def subdir(self, name: str, mode: int, todo: str = "remove it and start again") -> Dir:
        """The directory `name` in this one, made with `mode` when missing, proved ours."""
        return _open_last(self.fd, self.join(name), name, mode, todo)

    def mkdir(self, name: str, mode: int) -> str:
        """Make `name` (FileExistsError when there is one); its path."""
        os.mkdir(name, mode, dir_fd=self.fd)
        return self.join(name)

    def chown(self, name: str, uid: int, gid: int) -> None:
        os.chown(name, uid, gid, dir_fd=self.fd, follow_symlinks=False)

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(name, dir_fd=self.fd)

    def remove(self, name: str) -> None:
        """Remove `name` and all below it, best effort; see remove_at."""
        remove_at(self.fd, name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_dir(path: str, mode: int, todo: str = "remove it and start again",
             fix_mode: bool = True) -> Dir:
    """The directory at `path`, proved ours (see the header), made with `mode` when
    missing (and set to it when found, unless not fix_mode); raises Untrusted, whose
    message ends with `todo` when the directory itself is the problem."""
    path, name, fd = _walk(path, True)
    try:
        return _open_last(fd, path, name, mode, todo, fix_mode)
    finally:
        os.close(fd)


def open_kept(path: str, todo: str) -> Dir:
    """The directory at `path`, kept by us or by root (the approval broker's): the
    directories above it checked as open_dir checks them, but nothing made and nothing
    changed; it must exist, be owned by our euid or root, not be sticky, and be writable
    by no one else.  Raises Untrusted, ending with `todo` when the directory is the
    problem."""
    path, name, fd = _walk(path, False)
    try:
        return _open_last(fd, path, name, 0, todo, False, (os.geteuid(), 0))
    finally:
        os.close(fd)


def _walk(path: str, make: bool) -> tuple[str, str, int]:
    """(the absolute path, its last name, an fd on its parent), every directory on the
    way checked (_check_above); missing ones made 0700 when `make`."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name:
        raise Untrusted(f"{path}: the root, not a directory of ours (permission denied)")
    fd = os.open("/", STEP_FLAGS)
    try:
        where = "/"
        _check_above(fd, where, path)
        for part in os.path.realpath(parent).split("/"):
            if part:
                where = os.path.join(where, part)
                nfd = _step(fd, part, where, path, make)
                os.close(fd)
                fd = nfd
                _check_above(fd, where, path)
    except BaseException:
        os.close(fd)
        raise
    return path, name, fd


ELSEWHERE = "choose a place that only root or we can change"


def _step(fd: int, part: str, where: str, path: str, make: bool = True) -> int:
    """The fd of directory `part` in fd, made 0700 when missing (and `make`)."""
    try:
        try:
            nfd = os.open(part, STEP_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(part, STEP_FLAGS, dir_fd=fd)
    except OSError as e:
        raise Untrusted(f"{path}: {where}: {e.strerror} (permission denied); "
                        f"{ELSEWHERE}") from None
    return nfd


def _check_above(fd: int, where: str, path: str) -> None:
    st = os.fstat(fd)
    if st.st_uid not in (0, os.geteuid()):
        why = f"{where} above it is owned by {_who(st.st_uid)}"
    elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        why = f"{where} above it is writable by others and not sticky"
    else:
        return
    raise Untrusted(f"{path}: {why} (permission denied); {ELSEWHERE}")


def _open_last(fd: int, path: str, name: str, mode: int, todo: str,
               fix_mode: bool = True, owners: tuple[int, ...] = ()) -> Dir:
    """`name` in fd, proved ours; made with `mode` when missing, unless `owners` (the
    uids it may belong to; default our euid alone) is given: then it must exist."""
    try:
        try:
            dfd = os.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if owners:
                raise
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except FileExistsError:
                pass
            dfd = os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        try:
            found = _kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            found = e.strerror or str(e)
        raise Untrusted(f"{path}: {found}, not a directory (permission denied); {todo}") \
            from None
    st = os.fstat(dfd)
    why = None
    owners = owners or (os.geteuid(),)
    if st.st_uid not in owners:
        whose = " or ".join(_who(u) for u in dict.fromkeys(owners))
        why = f"owned by {_who(st.st_uid)}, not {whose} (permission denied); {todo}"
    elif st.st_mode & stat.S_ISVTX:    # /tmp, /var/tmp: shared, never ours to chmod
        why = f"a shared (sticky) directory, not a private one (permission denied); {ELSEWHERE}"
    elif not fix_mode and st.st_mode & 0o022:
        why = (f"writable by others (mode {stat.S_IMODE(st.st_mode):04o}; permission denied); "
               f"{todo}")
    if why:
        os.close(dfd)
        raise Untrusted(f"{path}: {why}")
    if fix_mode and stat.S_IMODE(st.st_mode) != mode:
        os.fchmod(dfd, mode)
    return Dir(path, dfd)


def remove_at(dir_fd: int, name: str) -> None:
    """Remove `name` in dir_fd: a tree, a file or a symlink (the link, not what it names),
    best effort.  The tree is walked by fds and never through a symlink (shutil's fd-based
    rmtree: a tool that planted a link to /etc in its cwd cannot make root remove /etc)."""
    if not shutil.rmtree.avoids_symlink_attacks:   # pragma: no cover (not on Linux)
        raise OSError("rmtree: this platform cannot remove a tree without following symlinks")
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, ignore_errors=True, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def remove_path(path: str) -> None:
    """remove_at for a path: its parent opened once, the last name removed through it."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        fd = os.open(parent or "/", DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError:
        return
    try:
        remove_at(fd, name)
    finally:
        os.close(fd)
