# toolsrv/mcp/ — the MCP face: `toolsrv mcp`, an MCP server that is a client of the tree.
#
# ninep.py is an asyncio 9P client (a flush is a cancellation); face.py is what MCP's
# tools/list and tools/call mean in toolsrv's files (sessions, agents, ctl, call, log,
# revwait, tools/search), with no MCP types in it; server.py wires the official `mcp` SDK
# to the face (the only module that imports the SDK, with http.py); http.py is the
# streamable HTTP listener and its bearer-token gate; run.py the process: dial ADDR, or
# serve the default registry in process when nothing answers there.
#
# May import app and everything below it (standalone mode starts an App); imported only
# by cli/ (the `mcp` verb), so `serve` never loads the SDK.
# Imports nothing here, so that importing one module costs that module alone.
