"""The ``rasfast`` command line.

Subcommands: ``demo`` (what ``make demo`` runs: the full RAS loop over a generated offline
corpus), ``index build`` (rasfast.index.knowledge), ``ask`` (``--system`` runs a registered system
from a knowledge index), ``profile``, ``eval`` (``eval gear`` for GEAR's MuSiQue
evaluation when rasfast.systems.gear is installed; ``eval qa`` for every system's answer quality
with one LLM, rasfast.qa_eval) and ``bench select``.
"""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
