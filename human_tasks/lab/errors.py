"""The lab runner's one error: a session that cannot start or go on as asked."""

from cuebench.errors import CuebenchError


class LabError(CuebenchError):
    """The lab session cannot start as asked (bad participant id, group, input mode, missing file)."""
