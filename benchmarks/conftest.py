"""pytest-benchmark setup: benchmarks are not tests and never run from `make test`."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
