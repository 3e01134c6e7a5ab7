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


SORT_LISTING = """
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   STS [R0], RZ ;
        /*0020*/              @P0 BRA 0x10 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   MATCH.ANY R6, R5 ;
        /*0050*/                   POPC R7, R6 ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/                   SHFL.UP P0, R8, R7, 0x1, RZ ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0090*/                   STS.64 [R9], R10 ;
        /*00a0*/              @!P1 BRA 0x30 ;
        /*00b0*/              @!P2 BRA 0x0 ;
        /*00c0*/                   EXIT ;
"""


def test_on_chip_sort_pass_loop_and_label():
    """sort_rows_radix: the innermost loop holding MATCH.ANY and the pass's barriers, counted
    over the keys a thread holds; the label names the keys a thread (two digits: 16, 24)."""
    ins = model._instructions(SORT_LISTING.splitlines())
    (lp,) = model._sort_pass_loop(ins, keys=4)
    assert (lp.instructions, lp.entries, lp.branches) == (8, 4, 1)  # 0x30-0xa0, not 0x0-0xb0
    assert lp.per_entry == 2.0
    name = ("_ZN7rasfast50_GLOBAL__N__e372730e_17_select_kernels_cu_f5550bc915sort_rows_radixILNS_5DTypeE2"
            "ELi24EEEvPKylliiPKNS0_6RawKeyIXT_EE1WElPlPS7_")
    assert model._label(name) == "sort_rows_radix<bfloat16, 24 keys a thread>"
    assert model.blocks_per_sm(118, threads=512) == 1


QUIET_LISTING = """
        /*0000*/                   LDG.E.128 R8, desc[UR4][R4.64] ;
        /*0010*/              @P0 BRA 0x40 ;
        /*0020*/                   ISETP.GT.U32.AND P1, PT, R8, 0x7f800000, PT ;
        /*0030*/                   ISETP.GT.U32.AND P2, PT, R9, R3, PT ;
        /*0040*/              @P2 BRA 0x70 ;
        /*0050*/                   ATOMS.POPC.INC.32 RZ, [R9+URZ] ;
        /*0060*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0070*/              @!P3 BRA 0x90 ;
        /*0080*/                   IADD3 R6, R6, 0x1, RZ ;
        /*0090*/                   VOTE.ANY P0, P0 ;
        /*00a0*/              @!P0 BRA 0xe0 ;
        /*00b0*/                   SHFL.UP PT, R7, R6, 0x1, RZ ;
        /*00c0*/                   STG.E desc[UR4][R4.64], R7 ;
        /*00d0*/                   BRA 0xe0 ;
        /*00e0*/                   ISETP.GE.AND P4, PT, R2, R3, PT ;
        /*00f0*/              @!P4 BRA 0x0 ;
        /*0100*/                   EXIT ;
"""


def test_no_candidate_path_walk():
    """The walk over the path where no entry is wanted: it falls into a vector's key work
    (0x10: the skipped code holds the key transform's NaN bound), jumps over a candidate's
    atomic (0x40) and, after the warp vote, over the shuffle and store (0xa0) unless another
    lane of the warp has a candidate (the "lane" walk); a branch guarding neither falls
    through (0x70)."""
    ins = model._instructions(QUIET_LISTING.splitlines())
    (lp,) = model._element_loops(ins, entry_bytes=4)
    # 0x00 0x10 0x20 0x30 0x40 | 0x70 0x80 0x90 0xa0 | 0xe0 0xf0
    assert lp.quiet == 11 and lp.entries == 4 and lp.quiet_per_entry == 2.8
    # ... | 0xa0 0xb0 0xc0 0xd0 | 0xe0 0xf0
    assert lp.lane == 14 and lp.lane_per_entry == 3.5
    assert lp.instructions == 16
