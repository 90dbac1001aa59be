"""The MCP face's tests share one set-up: `tools`, mcphelpers.face_tools() (a module that
needs more tools asks for this fixture in its own `tools` and adds them), and `server`, an
in-process toolsrv serving them (a module that needs other options has its own)."""
from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def tools():
    from mcphelpers import face_tools       # here: it imports the SDK, which may be absent
    d = face_tools()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tools):
    from apphelpers import AppThread
    from serverhelpers import stop_clean
    app = AppThread([tools]).start()
    yield app
    stop_clean(app)
