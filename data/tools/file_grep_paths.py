"""Which paths file_grep reads, and how it opens them: its gitignore-style rules
(.gitignore, .ignore, .rgignore, and the call's glob as an override) and opening only
regular files, never blocking.

A module of file_grep.py's, beside it in the same directory (it imports it from there, as
the script's directory is first on sys.path): copy both to use file_grep elsewhere.
Standard library only; runs on Python >= 3.9.
"""
import errno
import os
import re
import stat

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")  # later files take precedence


SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
           (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special(mode):
    """None for a regular file or a directory; else what it is ("a FIFO", ...)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in SPECIAL:
        if test(mode):
            return kind
    return "a special file"


def open_regular(apath):
    """The regular file apath opened for reading, never blocking: opened with O_NONBLOCK
    (a FIFO put where a file was does not wait for a writer), then fstat; anything but a
    regular file raises OSError."""
    fd = os.open(apath, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file: it is %s (invalid argument)"
                      % (special(mode) or "a directory"))
    return os.fdopen(fd, "rb")


# ------------------------------------------------ gitignore-style globbing

def _glob_body(pat):
    """Translate a glob (no leading/trailing slash handling) to a regex body."""
    out = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i):
                before_ok = i == 0 or pat[i - 1] == "/"
                after = i + 2
                if before_ok and after < n and pat[after] == "/":
                    out.append("(?:.*/)?")          # "**/" : zero or more directories
                    i = after + 1
                    continue
                if before_ok and after == n:
                    out.append(".*")                # trailing "/**" or lone "**"
                    i = after
                    continue
                out.append("[^/]*")
                i = after
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pat[i]))
        elif c == "[":
            j = i + 1
            if j < n and pat[j] in "!^":
                j += 1
            if j < n and pat[j] == "]":
                j += 1
            while j < n and pat[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j]
                neg = body[:1] in ("!", "^")
                if neg:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append("[%s%s]" % ("^" if neg else "", body))
                i = j
        elif c == "{":
            j = pat.find("}", i)
            if j < 0:
                out.append(re.escape(c))
            else:
                alts = pat[i + 1:j].split(",")
                out.append("(?:%s)" % "|".join(_glob_body(x) for x in alts))
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class Rule(object):
    """One gitignore-style line, matched against paths relative to `base`."""

    def __init__(self, line, base):
        self.base = base
        self.negated = False
        self.dir_only = False
        self.regex = None
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.startswith("#"):
            return
        if line.startswith("!"):
            self.negated = True
            line = line[1:]
        elif line.startswith("\\"):
            line = line[1:]
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        if line.endswith("/"):
            self.dir_only = True
            line = line.rstrip("/")
        if not line:
            return
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_body(line)
        if not anchored:
            body = "(?:.*/)?" + body
        try:
            self.regex = re.compile(body + r"\Z", re.DOTALL)
        except re.error:
            self.regex = None

    def matches(self, rel, is_dir):
        if self.regex is None or (self.dir_only and not is_dir):
            return False
        return self.regex.match(rel) is not None


def load_rules(directory):
    rules = []
    for fname in IGNORE_FILES:
        try:
            with open_regular(os.path.join(directory, fname)) as f:
                text = f.read().decode("utf-8", errors="replace")
                for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                    r = Rule(line, directory)
                    if r.regex is not None:
                        rules.append(r)
        except OSError:
            pass
    return rules


def ignored(rules, abspath, is_dir):
    """Last matching rule wins; deeper directories' rules come later."""
    verdict = False
    for r in rules:
        rel = os.path.relpath(abspath, r.base)
        if rel.startswith(".."):
            continue
        if r.matches(rel.replace(os.sep, "/"), is_dir):
            verdict = not r.negated
    return verdict


class Override(object):
    """The `glob` argument, with ripgrep's -g semantics (relative to cwd)."""

    def __init__(self, glob, cwd):
        self.cwd = cwd
        self.negated = glob.startswith("!")
        self.rule = Rule(glob[1:] if self.negated else glob, cwd)

    def verdict(self, abspath, is_dir):
        """'ignore', 'whitelist' or None."""
        rel = os.path.relpath(abspath, self.cwd)
        if rel.startswith(".."):
            rel = abspath.lstrip("/")
        hit = self.rule.regex is not None and self.rule.matches(rel.replace(os.sep, "/"), is_dir)
        if self.negated:
            return "ignore" if hit else None
        if hit:
            return "whitelist"
        return None if is_dir else "ignore"
