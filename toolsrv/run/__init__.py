# toolsrv/run/ — one tool call run confined, bounded and killable.
#
# Three processes run the files of this folder, and the folders say which:
#   run/         the server, on its event loop: runner.py the public API (Runner.run: a
#                RunRequest in, a RunResult out; Runner.open_resident), warmplan.py which
#                calls start warm and the request that warms an init, launcher.py the
#                client of the zygote and its spare inits, warmpool.py the idle warm inits
#                by kind, handle.py one init lent to one run, pumps.py a run's pipes,
#                scratch.py its private TMPDIR, sandbox.py profiles into a per-call Policy,
#                ownscript.py the compiled code of a tool's own script, elevation.py the
#                client of the approval broker, live.py a running call's output so far
#                (bytes, the tool's progress line), secrets.py a tool's secrets read for its
#                run and redacted from what it gives back.
#   run/init/    the zygote and the inits it forks, in a bare `python -I -S` (their
#                __init__ says which modules).
#   run/kernel/  ctypes bindings of the kernel, used by the inits (and read by the server
#                for status and plans).
#
# May import: run/init/, run/kernel/, dirs/, errors, record.  Never tree/,
# serve/, app or cli/, nor registry/.  This file must stay empty of imports: the zygote's
# boot line imports run.init.zygote from a bare interpreter, and whatever this package
# imported would be in every launcher.
