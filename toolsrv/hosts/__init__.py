# toolsrv/hosts/ — other hosts' toolsrv trees, imported (`serve --import`).
#
# ninep.py an asyncio 9P2000 client (the MCP face's connection too); imports.py one
# imported host, its tools served here as NAME.TOOL and its calls run there; remote.py
# such a tool as the registry holds it; hosts.py the set of imports, kept in the state
# directory; ctlfile.py hosts/ctl, the tree's view of them; sessioncwd.py
# session/<id>/hosts/NAME, a session's cwd on an imported host.
#
# May import: serve/ (dial strings, TLS), tree/, registry/, run/, dirs/, errors, record.
# Never app, mcp/ or cli/.
