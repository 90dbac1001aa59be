"""The names tests/test_dead_code.py lets vulture call unused: each is used where vulture
does not look (by the tests, the benches, a protocol's caller, or the interpreter), and
says so.  A name added here needs its reason; code that is merely unused is removed."""
# flake8: noqa
# ruff: noqa
_ = None

# asyncio calls a Protocol's methods; vulture sees no caller
_.connection_made, _.data_received, _.connection_lost, _.pause_writing, _.resume_writing

# the 9P codec states the whole protocol (Plan 9's fcall.h): constants and helpers a
# message or a client may need, used by the tests that check the codec
VERSION, MAX_ERRLEN, Terror_T, QTFILE, DMMOUNT, DMEXEC, DMREAD, DMWRITE
_.__match_args__     # dataclass-style pattern matching of messages
_.notouch            # Twstat's "don't touch" stat, used by clients and the codec tests
_.wstat              # the CLI client's Twstat, for callers of the library (tests)
__getattr__          # proto/__init__.py: the package's lazy attribute access (PEP 562)

# read by the tests that check the error table and its errno words
DECLARED, errno_for

# read by benches and tests: the registry's rescan, its watch state, the search index's
# parts (bench/search_fusion.py), the fusion methods, the profile rules, the landlock
# ready-list and launcher counters, the shipped profiles' folder
_.rescan, _.watching, _.components, METHODS, RULES, _.fast_builds, _.restarts
default_shipped_dir

# run/init/warm.py sets what the interpreter itself would set (sys.last_*, the user site
# of `site`, __main__'s annotations) and BOOT's own source calls Run.uncaught
_.uncaught, _.last_traceback, _.last_type, _.last_value, _.last_exc, _.__annotations__
_.USER_BASE, _.USER_SITE
