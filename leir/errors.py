"""The base class of every error a user's input can cause.

The CLI prints a ``LeirError`` as one line and exits non-zero; anything else
escaping is a bug in leir-lsp."""


class LeirError(Exception):
    """A problem with the user's program, file or arguments."""
