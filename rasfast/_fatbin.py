"""Which GPU code a compiled module carries, read from its fatbinary (no cuobjdump needed).

nvcc embeds device code in the host shared object's ``.nv_fatbin`` ELF section: one or
more fatbinary blobs, each a header (magic 0xBA55ED50, header size, payload size) followed
by entries. Every entry has its own header giving its kind (1 = PTX, 2 = ELF cubin, i.e.
SASS) and the SM architecture it was built for; the payload (possibly compressed) follows.
Only the headers are read here.

>>> sorted(set(code_targets(rasfast._cuda.__file__)))   # doctest: +SKIP
[('ptx', 90), ('sass', 80), ('sass', 90)]
"""
from __future__ import annotations

import struct
from typing import List, Tuple

FATBIN_MAGIC = 0xBA55ED50
_KINDS = {1: "ptx", 2: "sass"}


def elf_section(path: str, name: str) -> bytes:
    """The bytes of section ``name`` of a 64-bit little-endian ELF file ("" if absent)."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = []
        for i in range(shnum):
            sh_name, _type, _flags, _addr, off, size = struct.unpack_from(
                "<IIQQQQ", table, i * shentsize)
            sections.append((sh_name, off, size))
        _, str_off, str_size = sections[shstrndx]
        f.seek(str_off)
        names = f.read(str_size)
        for sh_name, off, size in sections:
            end = names.index(b"\0", sh_name)
            if names[sh_name:end].decode() == name:
                f.seek(off)
                return f.read(size)
    return b""


def fatbin_entries(blob: bytes) -> List[Tuple[str, int]]:
    """(kind, sm) of every entry of every fatbinary in ``blob`` (an .nv_fatbin section).

    kind is "ptx" or "sass" (an unknown kind code is reported as "kind<N>").
    """
    out: List[Tuple[str, int]] = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            # blobs are aligned within the section; skip padding up to the next one
            pos += 8
            continue
        entry = pos + header_size
        end = entry + fat_size
        while entry + 40 <= end:
            kind, _ver, ehdr_size, payload_size = struct.unpack_from("<HHIQ", blob, entry)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            out.append((_KINDS.get(kind, f"kind{kind}"), arch))
            if ehdr_size == 0:
                raise ValueError(f"malformed fatbinary entry at offset {entry}")
            entry += ehdr_size + payload_size
        pos = end
    return out


def code_targets(path: str) -> List[Tuple[str, int]]:
    """(kind, sm) of the device code a shared object carries; [] when it has none."""
    return fatbin_entries(elf_section(path, ".nv_fatbin"))
