#!/bin/sh
# Drive one toolsrv session end to end, Plan 9 style: everything is a file.
# Usage: examples/session.sh [MOUNTPOINT]
#   with a MOUNTPOINT (a 9pfuse mount, see `toolsrv mount`) it uses echo and cat;
#   without one it uses the toolsrv CLI (set TOOLSRV_ADDR to reach another server).
# The session it makes is removed when it ends, whether it got to the end or not.
set -eu
s=demo.$$            # a session of our own
a=me
if [ $# -ge 1 ]; then
	m=$1
	rd() { cat "$m/$1"; }
	wr() { printf '%s' "$2" > "$m/$1"; }
	# writing then reading the same fid needs rdwr; through the mount we write call,
	# then read out, which waits for that call to end.  A failed call leaves out empty:
	# status says how it ended, err and the log say why.
	call() {
		wr "$1/call" "$2" && rd "$1/out" || return
		case $(rd "$1/status") in
		ok*) ;;
		*) rd "$1/err" >&2; return 1;;
		esac
	}
	mk() { mkdir "$m/$1"; }
	rmr() { rm -r "$m/$1"; }
else
	t=${TOOLSRV:-toolsrv}
	rd() { $t read "$1"; }
	wr() { printf '%s' "$2" | $t write "$1"; }
	call() { $t rdwr "$1/call" "$2"; }      # a failed call: exit 1, the reason on stderr
	mk() { $t mkdir "$1"; }
	rmr() { $t rm "$1"; }
fi

echo "registry revision $(rd revision)"
mk session/$s
trap 'rmr session/$s 2>/dev/null || :' EXIT     # whatever happens next
trap 'exit 130' INT
trap 'exit 143' TERM
mk session/$s/agent/$a
A=session/$s/agent/$a
wr $A/ctl 'tool_load file_write file_read file_grep'
echo "loaded: $(rd $A/ctl | tr '\n' ' ')"

call $A/tools/file_write '{"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}'
call $A/tools/file_read '{"path": "notes.txt", "offset": 2}'
call $A/tools/file_grep '{"pattern": "^g", "path": "."}'

# a failing call: the shell sees an error, the log keeps the reason
if call $A/tools/file_read '{"path": "missing.txt"}' 2>/dev/null; then
	echo "unexpected success" >&2; exit 1
fi
echo "status: $(rd $A/tools/file_read/status)"
rd $A/log | tail -n 1

trap - EXIT
rmr session/$s
echo done
