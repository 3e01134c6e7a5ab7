"""benchmarks/select_sass_model.py reads loops and their instructions per entry from SASS:
checked on a canned listing (no nvcc needed), so a parser change that miscounts fails here."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import select_sass_model as model  # noqa: E402

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0030*/              @P0 BRA 0x10 ;
        /*0040*/                   LDG.E.128 R8, desc[UR4][R4.64] ;
        /*0050*/                   LDG.E.128 R12, desc[UR4][R4.64+0x10] ;
        /*0060*/                   LOP3.LUT R8, R8, 0x7fffffff, RZ, 0xc0, !PT ;
        /*0070*/                   ATOMS.POPC.INC.32 RZ, [R8+URZ] ;
        /*0080*/                   ISETP.GE.AND P1, PT, R2, R3, PT ;
        /*0090*/              @!P1 BRA 0x40 ;
        /*00a0*/              @!P2 BRA 0x0 ;
        /*00b0*/                   EXIT ;
"""


def test_innermost_load_loops_and_instructions_per_entry():
    ins = model._instructions(LISTING.splitlines())
    assert len(ins) == 12
    loops = model._element_loops(ins, entry_bytes=4)
    # 0x10-0x30 has no 16-byte load; 0x0-0xa0 holds the 0x40-0x90 loop, so it is not innermost
    assert len(loops) == 1
    lp = loops[0]
    assert (lp.instructions, lp.loads16, lp.branches, lp.entries) == (6, 2, 1, 8)
    assert lp.per_entry == 0.8
    # 16-bit entries: twice as many per load
    assert model._element_loops(ins, entry_bytes=2)[0].entries == 16


def test_kernel_labels_and_register_occupancy():
    name = ("_ZN7rasfast50_GLOBAL__N__e372730e_17_select_kernels_cu_f5550bc910radix_passILNS_5DTypeE1ELi0"
            "EEEvPKNS0_6RawKeyIXT_EE1WE")
    assert model._label(name) == "radix_pass<float16, histogram only>"
    assert model._label("_Z3fooILNS_5DTypeE0EEv") is None
    assert [model.blocks_per_sm(r) for r in (32, 40, 48, 63, 64, 76)] == [8, 6, 5, 4, 4, 3]
