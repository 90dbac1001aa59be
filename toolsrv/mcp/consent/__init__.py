# toolsrv/mcp/consent/ — consent a model cannot give itself, through the MCP face (issue
# 48.2; doc/mcp.md, Consent).
#
# broker.py is the face as the approval broker of its own calls: a Unix socket and its
# token in a private directory (run/elevation.py's protocol), named to the tree on the
# face's own 9P connection (/consent), answering a question only for a tools/call of the
# face that is waiting on it, with what its client's user said; it imports no SDK.  ask.py
# is the SDK's side: how the user is asked on each era (elicitation/create on the
# handshake era, an input_required result on 2026-07-28), and the tools/call wrapped so
# that its question reaches its user.
#
# May import what mcp/ may (run/ for the broker's protocol, mcp/face.py for seats);
# imported by mcp/server.py, mcp/fast.py and mcp/run.py alone.
# Imports nothing here, so that importing one module costs that module alone.
