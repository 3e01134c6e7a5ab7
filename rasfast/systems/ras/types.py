"""Moved to :mod:`rasfast.types` (shared by every system); kept importable here."""
from ...types import *  # noqa: F401,F403
from ...types import __all__  # noqa: F401
