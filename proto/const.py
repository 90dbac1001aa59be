"""9P2000 constants from intro(5) and <fcall.h>: message types, modes, limits."""

VERSION = "9P2000"
NOTAG = 0xFFFF
NOFID = 0xFFFFFFFF
MAXWELEM = 16          # most names a Twalk may carry
IOHDRSZ = 24           # bytes of Twrite/Rread header that precede the data
HEADER_SIZE = 7        # size[4] type[1] tag[2]
MAX_ERRLEN = 128       # ERRMAX: clients keep at most this much of an ename

# message types
Tversion_T, Rversion_T = 100, 101
Tauth_T, Rauth_T = 102, 103
Tattach_T, Rattach_T = 104, 105
Terror_T, Rerror_T = 106, 107  # Terror is illegal on the wire
Tflush_T, Rflush_T = 108, 109
Twalk_T, Rwalk_T = 110, 111
Topen_T, Ropen_T = 112, 113
Tcreate_T, Rcreate_T = 114, 115
Tread_T, Rread_T = 116, 117
Twrite_T, Rwrite_T = 118, 119
Tclunk_T, Rclunk_T = 120, 121
Tremove_T, Rremove_T = 122, 123
Tstat_T, Rstat_T = 124, 125
Twstat_T, Rwstat_T = 126, 127

# open modes
OREAD, OWRITE, ORDWR, OEXEC = 0, 1, 2, 3
OTRUNC = 0x10
OCEXEC = 0x20
ORCLOSE = 0x40

# qid types
QTDIR = 0x80
QTAPPEND = 0x40
QTEXCL = 0x20
QTMOUNT = 0x10
QTAUTH = 0x08
QTTMP = 0x04
QTFILE = 0x00

# Dir.mode bits
DMDIR = 0x80000000
DMAPPEND = 0x40000000
DMEXCL = 0x20000000
DMMOUNT = 0x10000000
DMAUTH = 0x08000000
DMTMP = 0x04000000
DMREAD, DMWRITE, DMEXEC = 0x4, 0x2, 0x1

# wstat "don't touch" values: all ones of the field's width
NOTOUCH16 = 0xFFFF
NOTOUCH32 = 0xFFFFFFFF
NOTOUCH64 = 0xFFFFFFFFFFFFFFFF

__all__ = [n for n in dir() if not n.startswith("_")]
