"""A bare 9P2000 client as the text of a script, for a test to run as another uid with the
system's python (which uid 65534 may run, where the venv's it may not): `BARE_9P` connects
to the Unix socket named by argv[1], versions and attaches as `nobody` (fid 1), and leaves
`rpc(type, body)` (an Rerror raises RuntimeError with its text) and `s(text)` to what
follows it."""

BARE_9P = r"""
import json, socket, struct, sys
# a bare 9P2000 client (the system's python, which uid 65534 may run: not the venv's)
sock = socket.socket(socket.AF_UNIX); sock.settimeout(30); sock.connect(sys.argv[1])
def s(x): b = x.encode(); return struct.pack("<H", len(b)) + b
def rpc(t, body):
    sock.sendall(struct.pack("<IBH", 7 + len(body), t, 1) + body)
    data = b""
    while len(data) < 4 or len(data) < struct.unpack_from("<I", data)[0]:
        data += sock.recv(65536)
    if data[4] == 107:
        raise RuntimeError(data[9:9 + struct.unpack_from("<H", data, 7)[0]].decode())
    return data[7:]
rpc(100, struct.pack("<I", 65536) + s("9P2000"))
rpc(104, struct.pack("<II", 1, 0xFFFFFFFF) + s("nobody") + s(""))
"""
