"""The training corpus (step 1 of bench/static_model): the short description of every
Debian package in this host's apt lists (bookworm main, updates, security; decompressed
with lz4cat), and the Python standard library's docstrings (each module, class and
function: its first paragraph, and its first three joined when longer), deduplicated.
Never a benchmark set.  Writes texts.json, [source, text] pairs, into the shared folder."""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from . import folder

out = []
seen = set()
def add(t, src):
    t = re.sub(r"\s+", " ", t).strip()
    if len(t) < 12 or t.lower() in seen:
        return
    seen.add(t.lower())
    out.append((src, t))
for lst in ["deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4",
            "deb.debian.org_debian_dists_bookworm-updates_main_binary-amd64_Packages.lz4",
            "deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages.lz4"]:
    raw = subprocess.run(["lz4cat", "/var/lib/apt/lists/" + lst], capture_output=True, text=True).stdout
    for line in raw.splitlines():
        if line.startswith("Description: "):
            add(line[13:], "debian")
n_deb = len(out)
roots = [Path("/usr/lib/python3.11"),
         Path(sys.base_prefix) / "lib" / "python3.11"]
files = set()
for r in roots:
    if not r.is_dir():
        continue
    for p in r.rglob("*.py"):
        s = str(p)
        if "site-packages" in s or "/test" in s or "/tests/" in s or "idle_test" in s:
            continue
        files.add(p.resolve())
for p in sorted(files):
    try:
        tree = ast.parse(p.read_text(errors="replace"))
    except Exception:
        continue
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            d = ast.get_docstring(node)
            if not d:
                continue
            # one text per docstring: its first paragraph, plus the whole (capped) if longer
            paras = [x for x in re.split(r"\n\s*\n", d) if x.strip()]
            add(paras[0], "pydoc")
            if len(paras) > 1:
                add(" ".join(paras[:3])[:1500], "pydoc")
print(f"debian {n_deb}, pydoc {len(out)-n_deb}, files {len(files)}", file=sys.stderr)
json.dump(out, open(os.path.join(folder(), "texts.json"), "w"))
