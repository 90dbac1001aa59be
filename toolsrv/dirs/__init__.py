# toolsrv/dirs/ — the directories the server keeps things in.
#
# trusted.py proves a directory ours (no symlink, nothing above it that others can
# change) and hands back its fd, which is used from then on; serverdir.py is one
# directory per server life under a lock, and the sweep of dead servers' ones;
# statedir.py chooses the state directory (named for the first listen address, given
# as a dial string) and holds its lock, so one server runs per state directory;
# layout.py where the sessions' private cwds go (the work base, nostate/) and the sweep;
# bundled.py where the package data is (the bundled tools, data/bin, the shipped sandbox
# profiles), in an installed package or a checkout.
#
# At the bottom with errors and record: used by run/, registry/, tree/, serve/, app, mcp/
# and cli/; may import nothing of toolsrv but errors and record.
# Imports nothing here, so that importing one module costs that module alone.
