# toolsrv/tree/resident/ — tools that stay running between calls (issue 17).
#
# manager.py Residents, a resident process per (session, tool) and the calls it answers;
# process.py a resident process's pipes and the lines protocol; mcp.py the client side of
# MCP over stdio; lspproto.py the language-server client (framing, JSON-RPC, documents),
# lspops.py and lspedit.py the lsp_* calls, lspbridge.py the program that runs as the
# resident process of a language server (standard library only: it runs confined, as a
# tool, from its source); pyrun.py the server's half of protocol python, pyhost.py the
# interpreter that runs a one-shot Python tool for each call (confined, from its source,
# as lspbridge.py is).  Started through run/ (Runner.open_resident), confined as a cold
# run is.
#
# May import: run/, registry/ (warmstart, for pyrun), errors, record, tree/calls/states (a
# call's states).  Never the namespace of tree/, serve/, app or cli/.
