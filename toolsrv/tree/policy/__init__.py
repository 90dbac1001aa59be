# toolsrv/tree/policy/ — who may load and call which tools, how often, and the kill switch
# (issue 50.2, 50.3; doc/sandbox.md, Policy).
#
# rules.py policy.yaml parsed and checked (Rules, Rule: globs, limits, where each rule is
# written); who.py a principal's name from what a connection knows (uid:N, tls:SUBJECT,
# host:ADDR, token:sha256:HEAD, oauth:SUB); limits.py the counters (calls in the last
# minute, calls under way, sessions); blocks.py the kill switch's list, kept in the state
# directory; gate.py the policy in force (the file followed, last good kept) and the
# checks the tree asks; files.py the root's policy and block files; consent.py which calls
# wait for a person's yes (a .meta's `confirm`, policy's, elevation) and whom the tree asks:
# the server's approval broker, or the one a connection (the MCP face) named on /consent.
#
# May import: tree/state/ (the audit trail's principal), tree/node.py (files.py and
# consent.py), registry/ (its watcher), run/ (the approval broker), dirs/, errors.  Never
# serve/, app or cli/.
