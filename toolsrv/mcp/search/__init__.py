# toolsrv/mcp/search/ — the face's search mode (`toolsrv mcp --search [always|auto]`,
# doc/mcp.md, Large registries): what tools/list lists when the registry is too large
# to list whole.
#
# mode.py decides it: always search_tools + call_tool, or (auto) every tool while their
# definitions fit a budget in bytes and the two past it, with --pin's tools listed beside
# them; catalog.py says what the catalog holds (its largest groups, by name prefix and by
# keyword, with counts) in search_tools' description, so a model knows when to search.
#
# May import the rest of mcp/ that imports no SDK (tools.py); imported by face.py.
# Imports nothing here.
