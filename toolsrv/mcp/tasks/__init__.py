# toolsrv/mcp/tasks/ — the MCP face's tasks (the `io.modelcontextprotocol/tasks`
# extension of the 2026-07-28 revision, issue 48.1): a tools/call run in the background,
# polled with tasks/get and cancelled with tasks/cancel.
#
# store.py keeps the face's record of each task (the id, its principal, the tree's call it
# is, and a finished task's result), a file each in the state home; it knows nothing of
# MCP's wire and imports no SDK.  serve.py is the SDK's side: the extension advertised,
# the tools/call that becomes a task, the tasks/* handlers, and the run held in the
# background (server.py wires it in).
#
# May import what mcp/ may (dirs/ for the state home, mcp/face.py for seats and calls);
# imported by mcp/server.py alone.
# Imports nothing here, so that importing one module costs that module alone.
