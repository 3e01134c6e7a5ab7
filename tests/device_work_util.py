"""What the tests/test_device_work_*.py files share: they count the CUDA emulator's work, so
they run only under RASFAST_CUDA_EMU=1 (marker cuda_emu), check that the emulated cuda backend
is what answers, and draw fresh random inputs on every run (the seed is in the failure)."""
import numpy as np
import pytest

import rasfast

from conftest import EMULATED

EMULATED_ONLY = [pytest.mark.cuda_emu,
                 pytest.mark.skipif(not EMULATED, reason="counts the CUDA emulator's work "
                                    "(RASFAST_CUDA_EMU=1)")]


@pytest.fixture(autouse=True)
def emulated():
    """Imported by each test file: every test there runs on the emulated cuda backend."""
    info = rasfast.backends()["cuda"]
    assert info["available"] and info["emulated"], info


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % (2 ** 31))
