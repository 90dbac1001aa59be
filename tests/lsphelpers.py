"""The small project the language-server tests write (issue 31), and where pylsp is."""
from __future__ import annotations

import os
import shutil
import sysconfig

BIN = sysconfig.get_path("scripts")      # the lsp extra installs pylsp beside python
PYLSP = shutil.which("pylsp", path=BIN)

SHAPES = '''\
class Shape:
    """A rectangle-like shape that knows its area."""

    def __init__(self, w, h):
        self.w, self.h = w, h

    def area(self):
        """Width times height."""
        return self.w * self.h

    def scaled(self, k):
        return Shape(self.w * k, self.h * k)
'''
A = "from pkg.shapes import Shape\n\n\ndef one():\n    return Shape(1, 2).area()\n"
B = ("from pkg.shapes import Shape\n\n\ndef two():\n    s = Shape(3, 4)\n"
     "    return s.area() + s.scaled(2).area()\n")
C = "def area(r):\n    return 3 * r * r\n"          # another `area`: a rename leaves it be
PROJECT = {"pkg/__init__.py": "", "pkg/shapes.py": SHAPES, "pkg/a.py": A, "pkg/b.py": B,
           "pkg/c.py": C, "notes.txt": "the area of a Shape\n"}



def write_project(cwd: str, files: dict[str, str]) -> None:
    """Write files as the uid tools run as would own them (the cwd's owner)."""
    st = os.stat(cwd)
    for rel, text in files.items():
        path = os.path.join(cwd, rel)
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            os.makedirs(d)
            os.chown(d, st.st_uid, st.st_gid)
        tmp = path + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)     # a new inode: a changed stamp, as an editor's save
