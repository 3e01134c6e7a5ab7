"""Plain-torch reference implementations: the oracle every backend is tested against.

Each function here is written to be obviously correct rather than fast.
"""
