# toolsrv/tree/ — the synthetic namespace, generated on demand from live state.
#
# The namespace is here: node.py is the node model the 9P core serves (Node, directories,
# text files, Qids, Pending and Committed replies); root.py the namespace from the root
# down (revision, revwait, status, tools/...); sessiondirs.py session/ and below (a
# session's cwd and sandbox, agent/); agent.py an agent's files (ctl, log, schemas, a
# loaded tool's call, out, err, status); searchfile.py the search files; scope.py the
# guard on a tool's own connection (AgentScope, node_path).  Four folders hold
# what the namespace shows: calls/ a call from its args to its result (the ctl commands,
# the scheduler), state/ the session store (sessions, agents, loaded tools, state.json,
# saved in a group commit), resident/ tools that stay running between calls; policy/ who
# may load and call which tools and how often (policy.yaml), and the kill switch, with
# the root's policy and block files.  Nothing is stored as files: a node asks the model
# whether it is alive.
#
# May import: registry/, run/, dirs/, errors, record.  Never serve/, app or cli/: the
# 9P core calls into the tree, not the other way.
# Imports nothing here, so that importing one module costs that module alone.
