# toolsrv/tree/state/ — the server's state: sessions.py (sessions, agents, loaded tools,
# state.json saved in a group commit, the private cwds); audit.py the audit trail
# (audit.jsonl: a record per call before its reply, sessions, agents, ctl, refusals).
#
# May import: registry/names, dirs/, errors, record, tree/calls/states (a call's states).
# Never the namespace of tree/, serve/, app or cli/.
