# tests/vulture_allow.py — the names vulture cannot see used (tests/test_dead_code.py).
#
# vulture reads this file as more source, so a name below counts as used.  It is never
# imported (`_` stands for any object).  Each line says who uses the name; keep the list
# short: code nothing uses is removed, not listed here.

# asyncio calls these on a protocol object
_.connection_made, _.data_received, _.connection_lost, _.pause_writing, _.resume_writing

# proto/__init__.py: a module's __getattr__, Python calls it for a missing name
__getattr__

# proto/const.py: 9P2000's constants, all of them, as the manual lists them
_.MAX_ERRLEN, _.Terror_T, _.QTFILE, _.DMMOUNT, _.DMREAD, _.DMWRITE, _.DMEXEC

# toolsrv/registry/resolve.py: RULES names the values of a resolution's `rule` (its docstring)
_.RULES

# toolsrv/run/init/warm.py: what the warm interpreter sets as CPython would (sys.last_*,
# main.__annotations__, site.USER_*); `uncaught` is called from the BOOT source text
_.last_type, _.last_value, _.last_traceback, _.last_exc, _.__annotations__
_.USER_BASE, _.USER_SITE, _.uncaught

# toolsrv/run/kernel/landlock.py: PathCache.fast_builds, read by a test's child program
# (tests/run/test_sandbox_landlock.py, in a source string)
_.fast_builds

# toolsrv/tree/resident/pyhost.py: the call's __main__ gets the attributes CPython gives a script's
_.__cached__

# toolsrv/mcp/http.py: uvicorn.Server.capture_signals, overridden (uvicorn calls it in serve)
_.capture_signals

# toolsrv/mcp/http.py: uvicorn.Server.should_exit, which uvicorn's main loop reads
_.should_exit

# toolsrv/mcp/oauth.py: urllib's opener calls a redirect handler's redirect_request
_.redirect_request

# toolsrv/options.py: Options' metaclass property, read by inspect.signature(Options)
_.__signature__
