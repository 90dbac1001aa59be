"""The old path of the 9P client, cli/client.py, kept for scripts that import
`toolsrv.cli.client` (a name of the top-level package, so it counts as part of cli/)."""
from .cli.client import Client, ClientError  # noqa: F401
