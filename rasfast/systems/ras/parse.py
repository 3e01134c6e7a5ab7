"""Moved to :mod:`rasfast.parse` (shared by every system); kept importable here."""
from ...parse import *  # noqa: F401,F403
from ...parse import __all__  # noqa: F401
