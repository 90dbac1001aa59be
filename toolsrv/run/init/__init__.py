# toolsrv/run/init/ — what runs in the forked processes, in a bare `python -I -S`.
#
# zygote.py the launcher process (started by run/launcher.py before the server grows; it
# forks inits); cold.py an init: pid 1 of a PID namespace, which spawns each run's tool
# from a thread that took on the run's confinement; warm.py an init become a warm Python
# interpreter, which forks each call (loaded from a memfd, SOURCES, into the tools'
# interpreter, so it and what it imports must need nothing but the standard library);
# reap.py an init's reaping of its children; wire.py the packet and fds on the
# socketpairs between the three (MAX_PACKET, recv_into), which the server's launcher
# reads the same way.
#
# May import: run/kernel/ and the standard library only (tests/test_layout.py checks it).
# This file must stay empty of imports.
