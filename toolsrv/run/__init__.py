# toolsrv/run/ — one tool call run confined, bounded and killable.
#
# runner.py is the public API (Runner.run: a RunRequest in, a RunResult out) on the
# server's side, with launcher.py (the client of the zygote and its spare inits) and
# pumps.py (a run's pipes).  zygote.py is the small launcher process, started with
# `python -I -S` before the server grows; it forks inits (runinit.py, pid 1 of a PID
# namespace), and an init spawns each run's tool from a thread that took on the run's
# confinement.  sandbox.py turns profiles into a per-call Policy; landlock.py, seccomp.py,
# cgroups.py and idmap.py are the kernel interfaces; fdpass.py receives a packet and its
# fds, the same for all three processes; elevation.py asks the approval broker.
#
# May import: dirs/, errors, record.  Never tree/, serve/, app or cli/, nor registry/.
# This file must stay empty of imports: the zygote's boot line imports run.zygote from a
# bare interpreter, and whatever this package imported would be in every launcher.
