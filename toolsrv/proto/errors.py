"""The one error family of the codec: anything malformed raises ProtocolError."""


class ProtocolError(ValueError):
    """Raised for any malformed 9P2000 input (bad size, type, string, count...)."""
