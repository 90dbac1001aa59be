"""A call's states (Call.state), named once.

The names.  Each is the string a client sees: the first word of a tool's `status` file,
the audit trail's "outcome", the metrics' and a trace's outcome label, and what a remote
host's status says of a call it ran (hosts/imports.py reads it back).

The states.
    QUEUED    begun, waiting for a run slot (slots.py)
    RUNNING   its run started: a process, a resident's request or a remote's call
    and, once it has ended (ENDS):
    OK        the tool succeeded: exit 0, a resident's output, the remote's ok
    EXIT      the tool exited non-zero; its status line names the code
    TIMEOUT   its time limit ended the run
    KILLED    stopped: cancelled (ctl's cancel, a flush of its read, a hang-up), its output
              past the cap, or ended by a signal
    INVALID   its args were no call (not JSON, or not its schema): it never ran
    REFUSED   refused before it ran (its sandbox, elevation, the audit trail, a limit)
    ERROR     a resident tool answered an error
    FAILED    a resident or a remote failed, rather than the tool answering

Imports nothing: the call's modules (scheduler.py), tree/resident/, tree/state/audit.py,
serve/ (metrics, traces) and hosts/ all name states from here.
"""


class State:
    """Call.state's values: see the module's doc."""

    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    EXIT = "exit"
    TIMEOUT = "timeout"
    KILLED = "killed"
    INVALID = "invalid"
    REFUSED = "refused"
    ERROR = "error"
    FAILED = "failed"
    ENDS = (OK, EXIT, TIMEOUT, KILLED, INVALID, REFUSED, ERROR, FAILED)
