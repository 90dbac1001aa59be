"""The registry as the 9P tree serves it: tools/, revision, revwait, live reload."""
from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir


@pytest.fixture()
def served():
    d = tools_dir()
    add_tool(d, "alpha", "#!/bin/sh\ncat\n", {"description": "first tool", "tier": "warm",
                                             "prompt": "## alpha\n"})
    with open(os.path.join(d, "broken.meta"), "w") as f:
        f.write('{"description": "x",\n  "args": {"type": "strin"}}')
    app = AppThread([d]).start()
    c = Client.connect(app.addr)
    yield app, c, d
    c.close()
    app.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def test_tools_files(served):
    _, c, d = served
    assert c.read("tools/index") == b"alpha\twarm\tfirst tool\n"
    errors = c.read("tools/errors").decode()
    assert errors.startswith(os.path.join(d, "broken.meta") + "\t") and "strin" in errors
    meta = json.loads(c.read("tools/alpha/meta"))
    assert meta["description"] == "first tool"
    assert json.loads(c.read("tools/alpha/schema")) == {"type": "object"}
    assert c.read("tools/alpha/prompt") == b"## alpha\n"
    assert [x.name for x in c.ls("tools")] == ["index", "errors", "search", "alpha"]
    with pytest.raises(ClientError, match="file not found"):
        c.read("tools/broken/meta")


def test_live_reload_through_revwait(served):
    app, c, d = served
    rev = int(c.read("revision"))
    assert int(c.read("revwait")) == rev                  # a plain read answers at once
    got: dict = {}
    t = threading.Thread(target=lambda: got.setdefault("r", c.rdwr("revwait", b"%d" % rev)))
    t.start()
    add_tool(d, "beta", "#!/bin/sh\ncat\n", {"description": "second tool"})
    t.join(30)
    new = int(got["r"])
    assert new == rev + 1
    assert int(c.read("revision")) == new and c.stat("revision").qid.vers == new
    assert b"beta\thot\tsecond tool\n" in c.read("tools/index")
    # and it goes when its .meta goes: the same fid waits again after another write
    fid = c.open("revwait", 2)
    c.write_fid(fid, b"%d" % new)
    t = threading.Thread(target=lambda: got.__setitem__("r2", c.read_fid(fid)))
    t.start()
    os.unlink(os.path.join(d, "beta.meta"))
    t.join(30)
    c.write_fid(fid, b"%d" % rev)                         # long past: answered at once
    assert int(c.read_fid(fid)) == new + 1
    c.clunk(fid)
    assert int(got["r2"]) == new + 1
    assert b"beta" not in c.read("tools/index")
