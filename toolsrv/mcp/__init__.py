# toolsrv/mcp/ — the MCP face: `toolsrv mcp`, an MCP server that is a client of the tree.
#
# ninep.py is an asyncio 9P client (a flush is a cancellation); face.py is what MCP's
# tools/list and tools/call mean in toolsrv's files (sessions, agents, ctl, call, log,
# revwait, tools/search), with no MCP types in it; tools.py a listed tool and a call's
# result as MCP spells them (annotations, outputSchema, structuredContent); server.py
# wires the official `mcp` SDK to the face; extras.py its prompts, log resource, roots
# and progress (server.py, extras.py, http.py and fast.py are the modules that import the SDK);
# http.py is the streamable HTTP listener and its gate (Origin, Host, bearer token);
# httpconns.py its connections' books (per peer, before and after the token, the head
# deadline); oauth.py the gate's OAuth 2.1 resource server (JWT access tokens checked with
# PyJWT against an issuer's keys, RFC 9728 metadata, scopes);
# run.py the process: dial ADDR, or serve the default registry in process when nothing
# answers there; stdio.py the stdio wire the SDK's transport is given (the event loop's
# pipes, not worker threads); fast.py the steady-state tools/call of a stdio connection,
# answered beside the SDK's dispatch with the SDK's own result serializer; tasks/ the
# `io.modelcontextprotocol/tasks` extension (a call run in the background, polled with
# tasks/get, cancelled with tasks/cancel, its record and result kept in the state home);
# consent/ the face as the approval broker of its own calls, asking the client's user
# (elicitation, input_required) before a call that needs a person's yes; search/ the
# search mode (--search [always|auto], --pin): what tools/list lists past a budget.
#
# May import app and everything below it (standalone mode starts an App); imported only
# by cli/ (the `mcp` verb), so `serve` never loads the SDK.
# Imports nothing here, so that importing one module costs that module alone.
