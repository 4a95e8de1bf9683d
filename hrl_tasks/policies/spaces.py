"""The error for an env whose spaces a policy cannot act in."""


class UnsupportedSpaceError(TypeError, ValueError):
    """An observation or action space that a policy does not support.

    A ``TypeError`` (the space is of the wrong kind) and a ``ValueError`` (it is
    bad input, reported in one line by the command line).
    """
