"""What a cubin says of its (only) kernel, read from its ELF: the registers a thread uses, the
bytes of local memory (stack frame: spills and arrays ptxas could not keep in registers) a
thread takes and the instructions of its code. No GPU needed: the CUDA backend reads them
after each NVRTC compile (register_fit, spill_fallback), tools/kernel_sass.py in its report."""

from __future__ import annotations

import struct

# ELF: the section of per-kernel attributes and the attributes read from it (EIATTR_REGCOUNT,
# EIATTR_FRAME_SIZE: each a 4-byte symbol index, then the value).
_NV_INFO = b".nv.info"
_TEXT = b".text."  # .text.<function>
_NV_SHARED = b".nv.shared."  # .nv.shared.<kernel>
_NV_SHARED_RESERVED = b".nv.shared.reserved."
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04


def registers(cubin: bytes) -> int:
    """The registers a thread of the kernel uses."""
    found = _kernel_attributes(cubin, _EIATTR_REGCOUNT)
    if len(found) != 1:
        raise ValueError(f"a cubin of one kernel has one register count (found {len(found)})")
    return found[0]


def frame_bytes(cubin: bytes) -> int:
    """The bytes of local memory a thread takes (0: none; ptxas spills there): the largest
    stack frame of the cubin's functions (the kernel, and any subroutine ptxas kept, such as
    a division's slow path, which has a frame entry of its own)."""
    return max(_kernel_attributes(cubin, _EIATTR_FRAME_SIZE), default=0)


def instructions(cubin: bytes) -> int:
    """The machine instructions of the cubin's code (its .text sections: the kernel and any
    subroutine ptxas kept), padding included: from sm_70 on every instruction is 16 bytes."""
    return sum(size for name, _, size in _sections(cubin) if name.startswith(_TEXT)) // 16


def shared_section_bytes(cubin: bytes) -> int:
    """The size of the kernel's .nv.shared section: its static shared memory as the driver
    allocates it (from sm_80 on this starts with the 1 KB the system reserves a block), the
    padding before an aligned `extern __shared__` array included; 0 without one."""
    sizes = [
        size
        for name, _, size in _sections(cubin)
        if name.startswith(_NV_SHARED) and not name.startswith(_NV_SHARED_RESERVED)
    ]
    if len(sizes) > 1:
        raise ValueError(f"a cubin of one kernel has one shared section (found {len(sizes)})")
    return sizes[0] if sizes else 0


def _kernel_attributes(cubin: bytes, attribute: int) -> list[int]:
    """The values of `attribute` in the cubin's .nv.info section (one a function that has it)."""
    found = []
    for name, offset, size in _sections(cubin):
        if name == _NV_INFO:
            found += _attributes(cubin[offset : offset + size], attribute)
    return found


def _sections(cubin: bytes) -> list[tuple[bytes, int, int]]:
    """(name, offset, size) of each section of the cubin's ELF."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    (section_offset,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQ", cubin, section_offset + i * entry_size) for i in range(count)
    ]
    names_offset = sections[names_index][4]
    return [
        (cubin[names_offset + name_at :].split(b"\0", 1)[0], offset, size)
        for name_at, _type, _flags, _addr, offset, size in sections
    ]


def _attributes(data: bytes, wanted: int) -> list[int]:
    """The values of attribute `wanted` in an .nv.info section: entries of a format byte, an
    attribute byte and, for the sized formats, a 2-byte size and that many bytes."""
    values = []
    at = 0
    while at + 4 <= len(data):
        fmt, attribute, size = struct.unpack_from("<BBH", data, at)
        if fmt == _EIFMT_SVAL:
            if attribute == wanted and size >= 8:
                values.append(struct.unpack_from("<II", data, at + 4)[1])
            at += 4 + size
        else:  # EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL: the value, if any, is in those 4 bytes
            at += 4
    return values
