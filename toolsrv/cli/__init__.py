# toolsrv/cli/ — the `toolsrv` command (toolsrv/__main__.py is its thin entry).
#
# command.py parses the verbs (serve, ls, read, write, rdwr, stat, mkdir, rm, call,
# sandbox, approve, mount, umount) and runs them: `serve` builds the App (app.py), the
# others speak 9P through client.py, a small blocking client also used by the bundled
# client_9p tool and the tests; shortcut.py is `call`, mount.py 9pfuse, banner.py what a
# starting server prints; serveargs.py serve's options; importmcp.py `import-mcp`, with
# importgrant.py what an imported server needs granted and its one confined start;
# mcpconfig.py `mcp --config`; approve.py `approve`, the reference approval broker;
# sandbox_check.py `sandbox check`; audit.py `audit`, the audit trail read as a table.
#
# May import anything of toolsrv: nothing imports cli/ but toolsrv/__main__.py and the
# old path toolsrv/client.py.
# Imports nothing here, so that importing one module costs that module alone.
