"""What each Triton kernel module can launch, for ahead-of-time compilation checks.

Every module in this package lists, in ``aot_variants()``, each (kernel, argument types,
constexpr values) combination its host code can launch: every storage dtype and every
constexpr value (or, for block sizes that follow a user's shape, the smallest, a typical and
the largest; such constexprs are named in the module's ``AOT_SIZE_CONSTEXPRS``). The list
lives next to the launch code so the two change together, and tests/test_triton_aot.py checks
that every launch the ops make under the interpreter matches a listed variant.
``tests/triton_aot_gate.py`` compiles every variant for sm_80 and sm_90 with no GPU
(``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``) and fails on a
compile error or on shared memory beyond the target's limit.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Sequence, Tuple

# storage dtype name -> Triton pointer type
FLOAT_PTRS = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16"}
INDEX_PTRS = {"int32": "*i32", "int64": "*i64"}


class Variant(NamedTuple):
    kernel: Any                 # the @triton.jit function
    signature: Dict[str, str]   # every argument -> Triton type ("*fp32", "i32", "constexpr")
    constexprs: Dict[str, Any]  # constexpr argument -> value
    # integer arguments the launch makes divisible by 16, which Triton specialises on (masked
    # tiles then load in vectors; registers and spills differ): compiled as such
    divisible: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        ptrs = ",".join(f"{n}:{t[1:]}" for n, t in self.signature.items()
                        if t.startswith("*") and t not in ("*i64", "*fp32"))
        consts = ",".join(f"{n}={v}" for n, v in self.constexprs.items())
        return f"{self.kernel.__name__}[{';'.join(s for s in (consts, ptrs) if s)}]"


def variant(kernel, types: Dict[str, str], divisible: Sequence[str] = (), **constexprs) -> Variant:
    """A Variant of ``kernel``: ``types`` gives every runtime argument's Triton type,
    ``constexprs`` every constexpr argument's value (an argument named in neither is an error,
    so a kernel that gains an argument cannot silently drop out of the check); ``divisible``
    the integer arguments its launches make multiples of 16."""
    names = list(kernel.arg_names)
    unknown = (set(types) | set(constexprs) | set(divisible)) - set(names)
    if unknown:
        raise KeyError(f"{kernel.__name__}: no such argument(s) {sorted(unknown)}")
    if any(not types.get(n, "").startswith("i") for n in divisible):
        raise KeyError(f"{kernel.__name__}: divisible names integer arguments only, got {list(divisible)}")
    sig = {}
    for name in names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in types:
            sig[name] = types[name]
        else:
            raise KeyError(f"{kernel.__name__}: give a type or constexpr value for {name!r}")
    return Variant(kernel, sig, dict(constexprs), tuple(divisible))
