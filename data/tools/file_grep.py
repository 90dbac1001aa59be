#!/usr/bin/env python3
"""file_grep engine: regex search over files, in pure Python or through ripgrep.

This is the executable behind the `file_grep` tool (file_grep.meta).  It is
deliberately not named `file_grep`: a co-located executable with the tool's
own name would take precedence over the .meta's variant commands, and the
variants choose between

    file_grep.py --rg   ripgrep does the searching (variant `binary: rg`);
                        this script builds rg's argv and formats its --json
    file_grep.py        pure-Python search (any host)

Both paths produce the same output: `path:LINE:text` for matching lines and
`path-LINE-text` for context lines, `--` between non-adjacent groups, files
in path order, hidden files, binary files and paths ignored by
.gitignore/.ignore/.rgignore skipped.  `--rg` falls back to the pure-Python
engine when rg is not on $PATH.

Input (JSON object on stdin):
  {"pattern": str, "path": str, "glob": str, "context": int,
   "case_insensitive": bool, "output": "content"|"files"|"count",
   "max_results": int}
Errors go to stderr with a non-zero exit status.  Which paths it reads and how
it opens them (the ignore rules, regular files only) is file_grep_paths.py,
beside it: copy both.  Standard library only; runs on Python >= 3.9.
"""
import base64
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import threading

from file_grep_paths import Override, ignored, load_rules, open_regular, special

NAME = "file_grep"
DEFAULT_MAX_RESULTS = 200
MAX_MAX_RESULTS = 5000
MAX_CONTEXT = 20
MAX_LINE_CHARS = 500
MAX_OUTPUT_CHARS = 60000
BINARY_SNIFF = 65536


class ToolError(Exception):
    def __init__(self, msg, code=1):
        Exception.__init__(self, msg)
        self.code = code


def fail(msg, code=1):
    raise ToolError(msg, code)


# ---------------------------------------------------------------- arguments

def parse_args(raw):
    try:
        args = json.loads(raw) if raw.strip() else None
    except ValueError as e:
        fail("input is not valid JSON: %s" % e, 2)
    if not isinstance(args, dict):
        fail('input must be a JSON object such as {"pattern": "TODO", "path": "src"}', 2)
    a = {}
    pat = args.get("pattern")
    if not isinstance(pat, str) or pat == "":
        fail("pattern is required and must be a non-empty string (a regular expression)", 2)
    a["pattern"] = pat
    for key in ("path", "glob"):
        v = args.get(key)
        if v is not None and (not isinstance(v, str) or v == ""):
            fail("%s must be a non-empty string" % key, 2)
        a[key] = v
    ctx = args.get("context", 0)
    if ctx is None:
        ctx = 0
    if isinstance(ctx, bool) or not isinstance(ctx, int) or not 0 <= ctx <= MAX_CONTEXT:
        fail("context must be an integer between 0 and %d" % MAX_CONTEXT, 2)
    a["context"] = ctx
    ci = args.get("case_insensitive", False)
    if ci is None:
        ci = False
    if not isinstance(ci, bool):
        fail("case_insensitive must be true or false", 2)
    a["case_insensitive"] = ci
    mode = args.get("output") or "content"
    if mode not in ("content", "files", "count"):
        fail('output must be "content", "files" or "count"', 2)
    a["output"] = mode
    mx = args.get("max_results", DEFAULT_MAX_RESULTS)
    if mx is None:
        mx = DEFAULT_MAX_RESULTS
    if isinstance(mx, bool) or not isinstance(mx, int) or not 1 <= mx <= MAX_MAX_RESULTS:
        fail("max_results must be an integer between 1 and %d" % MAX_MAX_RESULTS, 2)
    a["max_results"] = mx
    return a


# ------------------------------------------------------------ the engines
# Both engines yield the same events:
#   ("line", path, lineno, is_match, text)   text without the line terminator
#   ("end", path, matched_lines)
#   ("warn", message)

def display_join(path_arg, rel):
    if path_arg is None:
        return rel
    return os.path.join(path_arg, rel)


def walk_files(root, path_arg, glob):
    """Yield (display_path, abspath) in ripgrep's --sort path order."""
    cwd = os.getcwd()
    override = Override(glob, cwd) if glob else None
    aroot = os.path.abspath(root)
    rules = []
    parents = []
    d = os.path.dirname(aroot)
    while True:
        parents.append(d)
        nd = os.path.dirname(d)
        if nd == d:
            break
        d = nd
    for p in reversed(parents):
        rules.extend(load_rules(p))

    def walk(adir, rel_dir, rules):
        rules = rules + load_rules(adir)
        try:
            entries = sorted(os.scandir(adir), key=lambda e: e.name)
        except OSError as e:
            yield ("warn", "%s: %s" % (display_join(path_arg, rel_dir) if rel_dir else
                                      (path_arg or "."), e.strerror or e))
            return
        for e in entries:
            rel = rel_dir + "/" + e.name if rel_dir else e.name
            try:
                if e.is_symlink():
                    continue
                is_dir = e.is_dir()
                is_file = e.is_file()
            except OSError:
                continue
            if not (is_dir or is_file):
                continue
            apath = os.path.join(adir, e.name)
            v = override.verdict(apath, is_dir) if override else None
            if v == "ignore":
                continue
            if v is None:
                if e.name.startswith("."):
                    continue
                if ignored(rules, apath, is_dir):
                    continue
            if is_dir:
                for x in walk(apath, rel, rules):
                    yield x
            else:
                yield ("file", display_join(path_arg, rel), apath)

    for x in walk(aroot, "", rules):
        yield x


def search_file(f, rx, context, mode, shown):
    """Search an open binary file line by line, as ripgrep does.

    A NUL byte in the first 64 KiB marks a binary file, which is skipped; a
    NUL byte further on stops the search of that file (rg's "quit" mode).
    """
    if b"\0" in f.read(BINARY_SNIFF):
        return
    f.seek(0)
    before = collections.deque(maxlen=context)
    matched = 0
    after = 0
    for i, raw in enumerate(f, 1):
        if b"\0" in raw:
            break
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        text = raw.decode("utf-8", errors="replace")
        if rx.search(text):
            matched += 1
            if mode == "files":
                break
            if mode == "content":
                for j, t in before:
                    yield ("line", shown, j, False, t)
                before.clear()
                yield ("line", shown, i, True, text)
                after = context
        elif after > 0:
            if mode == "content":
                yield ("line", shown, i, False, text)
            after -= 1
        elif context:
            before.append((i, text))
    yield ("end", shown, matched)


def python_events(a, root):
    flags = re.IGNORECASE if a["case_insensitive"] else 0
    try:
        rx = re.compile(a["pattern"], flags)
    except re.error as e:
        fail("invalid regular expression %s: %s" % (json.dumps(a["pattern"]), e), 2)
    if os.path.isfile(root):
        targets = [("file", a["path"], root)]
    else:
        targets = walk_files(root, a["path"], a["glob"])
    for t in targets:
        if t[0] == "warn":
            yield t
            continue
        _, shown, apath = t
        try:
            f = open_regular(apath)
        except OSError as e:
            yield ("warn", "%s: %s" % (shown, e.strerror or e))
            continue
        with f:
            try:
                for ev in search_file(f, rx, a["context"], a["output"], shown):
                    yield ev
            except OSError as e:
                yield ("warn", "%s: %s" % (shown, e.strerror or e))


def _rg_text(obj):
    if obj is None:
        return ""
    if "text" in obj:
        return obj["text"]
    return base64.b64decode(obj.get("bytes", "")).decode("utf-8", errors="replace")


def rg_argv(rg, a):
    argv = [rg, "--json", "--no-config", "--no-require-git", "--no-ignore-global",
            "--no-ignore-exclude", "--sort", "path"]
    if a["case_insensitive"]:
        argv.append("--ignore-case")
    else:
        argv.append("--case-sensitive")
    if a["output"] == "content" and a["context"]:
        argv += ["--context", str(a["context"])]
    if a["output"] == "files":
        argv += ["--max-count", "1"]
    if a["glob"]:
        argv += ["--glob", a["glob"]]
    argv += ["--regexp", a["pattern"], "--", a["path"] if a["path"] is not None else "."]
    return argv


class RgRun(object):
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.err = []
        self.t = threading.Thread(target=self._drain)
        self.t.daemon = True
        self.t.start()

    def _drain(self):
        for line in self.proc.stderr:
            if len(self.err) < 100:
                self.err.append(line.decode("utf-8", errors="replace").rstrip("\n"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.stdout.close()
        rc = self.proc.wait()
        self.t.join(2)
        return rc


def rg_events(a, rg, runs):
    run = RgRun(rg_argv(rg, a))
    runs.append(run)
    strip = a["path"] is None
    def shown(p):
        p = _rg_text(p)
        if strip and p.startswith("./"):
            p = p[2:]
        return p
    searched = 0
    for raw in run.proc.stdout:
        try:
            msg = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError:
            continue
        kind = msg.get("type")
        d = msg.get("data") or {}
        if kind in ("match", "context"):
            text = _rg_text(d.get("lines"))
            if text.endswith("\n"):
                text = text[:-1]
            yield ("line", shown(d.get("path")), d.get("line_number") or 0,
                   kind == "match", text)
        elif kind == "end":
            searched += 1
            st = d.get("stats") or {}
            yield ("end", shown(d.get("path")), st.get("matched_lines", 0))
    rc = run.stop()
    if rc == 2 and not searched and run.err:
        # Nothing was searched: a bad regex or a bad path.  Report rg's words.
        msg = "\n".join(run.err)
        fail(msg[4:] if msg.startswith("rg: ") else msg, 2)
    if rc == 2:
        for line in run.err:
            yield ("warn", line[4:] if line.startswith("rg: ") else line)


# ------------------------------------------------------------- formatting

def clip(text):
    if text.endswith("\r"):
        text = text[:-1]
    if len(text) > MAX_LINE_CHARS:
        return text[:MAX_LINE_CHARS] + " [... %d more chars]" % (len(text) - MAX_LINE_CHARS)
    return text


def run(a, events, out, err):
    mode, limit, ctx = a["output"], a["max_results"], a["context"]
    chars = [0]
    shown = [0]       # matching lines (content) or files (files/count) printed
    state = {"last": None, "stop_at": None, "seeking": False}
    truncated = cut = False
    warnings = []

    def emit(s):
        if chars[0] + len(s) + 1 > MAX_OUTPUT_CHARS:
            return False
        out.write(s + "\n")
        chars[0] += len(s) + 1
        return True

    for ev in events:
        if ev[0] == "warn":
            warnings.append(ev[1])
            err.write("%s: warning: %s\n" % (NAME, ev[1]))
            continue
        if mode == "content":
            if ev[0] == "end":
                if state["stop_at"] is not None:
                    state["seeking"] = True
                continue
            _, path, n, is_match, text = ev
            if state["seeking"]:
                if is_match:
                    truncated = True
                    break
                continue
            if state["stop_at"] is not None:
                if is_match:
                    truncated = True
                    break
                if n > state["stop_at"] + ctx:
                    continue
            last = state["last"]
            if ctx and last is not None and (last[0] != path or n != last[1] + 1):
                if not emit("--"):
                    cut = True
                    break
            line = "%s%s%d%s%s" % (path, ":" if is_match else "-", n,
                                   ":" if is_match else "-", clip(text))
            if not emit(line):
                cut = True
                break
            state["last"] = (path, n)
            if is_match:
                shown[0] += 1
                if shown[0] >= limit:
                    state["stop_at"] = n
        else:
            if ev[0] != "end" or not ev[2]:
                continue
            _, path, matched = ev
            if shown[0] >= limit:
                truncated = True
                break
            if not emit(path if mode == "files" else "%s:%d" % (path, matched)):
                cut = True
                break
            shown[0] += 1

    if shown[0] == 0:
        if warnings and not truncated:
            fail("no matches, and the search had errors: %s" % "; ".join(warnings[:5]), 2)
        where = a["path"] if a["path"] is not None else "the working directory"
        extra = " (files matching %s)" % json.dumps(a["glob"]) if a["glob"] else ""
        out.write("No matches for %s in %s%s.\n" % (json.dumps(a["pattern"]), where, extra))
        return
    if truncated:
        unit = "matching lines" if mode == "content" else "files"
        out.write("[%s: showing the first %d %s; there are more. Narrow the search "
                  "(path, glob, a more specific pattern) or raise max_results]\n"
                  % (NAME, limit, unit))
    if cut:
        out.write("[%s: output cut at %d characters; narrow the search]\n"
                  % (NAME, MAX_OUTPUT_CHARS))


def main(argv):
    use_rg = "--rg" in argv[1:]
    runs = []
    try:
        a = parse_args(sys.stdin.read())
        root = os.path.expanduser(a["path"]) if a["path"] is not None else "."
        if a["path"] is not None:
            a["path"] = root
        if not os.path.exists(root):
            fail("no such file or directory: %s" % (a["path"] or root))
        kind = special(os.stat(root).st_mode)
        if kind:
            fail("not a regular file: %s is %s (invalid argument)" % (a["path"] or root, kind))
        if os.path.isfile(root):
            try:
                with open_regular(root) as f:
                    head = f.read(BINARY_SNIFF)
            except OSError as e:
                fail("cannot read %s: %s" % (a["path"], e.strerror or e))
            if b"\0" in head:
                sys.stdout.write("[%s: %s is a binary file; not searched]\n" % (NAME, a["path"]))
                return 0
        rg = shutil.which("rg") if use_rg else None
        events = rg_events(a, rg, runs) if rg else python_events(a, root)
        run(a, events, sys.stdout, sys.stderr)
        for r in runs:
            r.stop()
    except ToolError as e:
        for r in runs:
            r.stop()
        sys.stdout.flush()
        sys.stderr.write("%s: %s\n" % (NAME, e))
        return e.code
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:
        sys.exit(1)
