"""toolsrv: a 9P2000 file server that exposes a registry of tools as files."""
__version__ = "0.1.0"
