# toolsrv/tree/ — the synthetic namespace, generated on demand from live state.
#
# node.py is the node model the 9P core serves (Node, directories, text files, Qids,
# Pending and Committed replies); fs.py the namespace from the root down (tools/,
# revision, session/...); toolfile.py an agent's files (ctl, a loaded tool's call, out,
# err, status) and ctl.py the ctl commands; sessions.py the session store (sessions,
# agents, loaded tools, state.json, saved in a group commit); calls.py the scheduled
# calls and the scheduler that hands them to the runner; jsonargs.py JSON arguments
# across Twrites.  Nothing is stored as files: a node asks the model whether it is alive.
#
# May import: registry/, run/, dirs/, errors, record.  Never serve/, app or cli/: the
# 9P core calls into the tree, not the other way.
# Imports nothing here, so that importing one module costs that module alone.
