# toolsrv/run/kernel/ — the kernel's interfaces, bound with ctypes where Python has none.
#
# landlock.py Landlock (ABI probe, rulesets, PathCache of a profile's fixed paths);
# rules.py an init's RuleCache of the fixed path lists it was sent; seccomp.py the filter
# every run takes on; cgroups.py a cgroup per run; idmap.py a root server's grants mapped
# for the tools' uid; confine.py the last steps of a run's confinement, the same in every
# init; libc.py the unshare, setns and errno check the inits share.  Used by the inits
# (run/init/), loaded into a warm init's interpreter from a memfd.
#
# May import: run/init/ and the standard library only (tests/test_layout.py checks it).
# This file must stay empty of imports.
