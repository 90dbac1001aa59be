# toolsrv/serve/ — where a 9P request enters and its reply leaves.
#
# transport.py is the asyncio adapter: listeners on dial strings (dial.py, plan9port's
# spelling, and the private namespace directory), peer checks, back-pressure, one socket
# write per batch of replies.  server.py is the 9P core: Conn.receive is the single entry
# point, every precondition is checked there or at the top of a handler (fid.py keeps the
# fids), a request waiting for a node runs as a task keyed by its tag so Tflush cancels
# it, and Conn._respond is the one respond path (req.py: the in-flight Req, Later).
# auth.py is Tauth's shared secret; tls.py the TLS contexts and the peer's identity for tls! listeners; peers.py who may
# connect (the peer policy) and the connection a tool is given (Internal); loopwatch.py the
# event loop's watch on itself (its lag in /status, a stall logged with what ran);
# metrics.py the metrics file and --metrics (prometheus_client: calls, runs, the loop).
# traces.py a span per call (the otel extra, imported only when traces are asked for).
#
# May import: proto, tree/, registry/, run/, dirs/, errors, record.  Never cli/ or app.
# Imports nothing here, so that importing one module costs that module alone.
