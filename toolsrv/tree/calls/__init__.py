# toolsrv/tree/calls/ — a tool call from the Twrite of its JSON to its result.
#
# jsonargs.py JSON arguments accumulated across Twrites and validated; ctl.py the ctl
# commands of an agent; scheduler.py the scheduled calls (Call) and the scheduler that
# hands them to the runner or to a resident process; slots.py the fair run slots the
# scheduler waits on; apply.py Calls, the agent's view of them (apply a ctl command,
# begin a call, the schemas file), given what it needs by the App; timebound.py a
# .meta timeoutArg bounded by the call's time limit in the schema served and checked;
# nested.py the rules of a call made by a running call (its turn, slot, time and end);
# toolspy.py an agent's tools.py, its loaded tools as Python functions; states.py the
# names of a call's states (Call.state), which imports nothing.
#
# May import: tree/state/, tree/resident/, registry/, run/, dirs/, errors, record.  Never
# the namespace modules of tree/ (node, root, sessiondirs, agent...), serve/, app or cli/.
