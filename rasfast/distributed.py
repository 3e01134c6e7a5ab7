"""Kept for ``torchrun ... -m rasfast.distributed`` and old imports: the distributed index now
lives in :mod:`rasfast.index.distributed`."""
from .index.distributed import *  # noqa: F401,F403
from .index.distributed import __all__, main  # noqa: F401

if __name__ == "__main__":
    import sys
    sys.exit(main())
