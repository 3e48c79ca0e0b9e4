"""Object code loaded without LLVM: a relocatable x86-64 ELF object (what the host JIT's
TargetMachine emits, position independent, small code model) copied into executable
memory, its relocations applied, its functions' addresses handed back.

This is the part of MCJIT's RuntimeDyld that kiln's kernels need, so that a process
whose kernels all come from the disk cache never loads LLVM (importing llvmlite's
binding and making an engine cost ~15 ms; `load` of a kernel costs ~0.1 ms). What it
does:

- the object is read and checked by runtime/llvm/elf_object.py before anything is mapped:
  every section, symbol and relocation lies inside the file and inside what it refers to,
  so nothing is read or written outside the object and the mapping;
- every SHF_ALLOC section is placed in one anonymous mapping at its offset in the file
  (NOBITS ones after them, zeroed), with a table after them of one GOT slot and one jump
  stub per symbol the object does not define, resolved in `Loader.symbols` (the
  functions this loader loaded before, as MCJIT resolves across modules) or else in the
  process (dlsym: libc's memset, CPython's API for runtime.fastcall);
- relocations: R_X86_64_64, PC32, PLT32 (through the stub when the target is out of
  32-bit reach), GOTPCREL, GOTPCRELX and REX_GOTPCRELX (read through the GOT slot,
  not relaxed);
- then the mapping is made read-only and executable.

Anything else (a damaged object, another machine or relocation type, writable sections,
COMMON or TLS symbols, a symbol defined nowhere) raises UnsupportedObject. Memory is
never freed, as with MCJIT: addresses handed out stay valid for the life of the process.
"""
from __future__ import annotations

import ctypes
import platform
import struct
import sys
import threading
from typing import Iterable

from runtime.llvm.elf_object import (GOT_RELOCATIONS, R_X86_64_64, R_X86_64_PLT32,
                                     ElfObject, Relocation, UnsupportedObject)

STUB = struct.Struct("<2sI Q")  # jmp *0(%rip) followed by the target's address
JMP_RIP = b"\xff\x25"
SLOT = 8 + STUB.size  # per undefined symbol: a GOT slot and a stub
PAGE = 4096
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20


def supported() -> bool:
    """Whether this process can load objects here: Linux on x86-64."""
    return sys.platform == "linux" and platform.machine() == "x86_64"


class Loader:
    """Loads objects into this process; `symbols` maps every global function and data
    symbol loaded so far to its address (a name defined twice is an error)."""

    def __init__(self):
        self.symbols: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self, code: bytes, functions: Iterable[str] = ()) -> dict[str, int]:
        """{name: address} of the global symbols `code` defines, loaded and relocated;
        UnsupportedObject, before anything is mapped, if it is refused or defines no
        function of one of the `functions` names."""
        with self._lock:
            obj = ElfObject(code)
            for name in functions:
                obj.function(name)
            defined = obj.defined_globals()
            taken = sorted(set(defined) & set(self.symbols))
            if taken:
                raise ValueError(f"the host JIT already has a function named {taken[0]!r}")
            image = _Image(obj)
            image.place(self._resolve)
            addresses = {name: image.address_of(index) for name, index in defined.items()}
            self.symbols.update(addresses)
            return addresses

    def _resolve(self, name: str) -> int:
        if name in self.symbols:
            return self.symbols[name]
        address = ctypes.cast(getattr(_process(), name), ctypes.c_void_p).value \
            if hasattr(_process(), name) else None
        if not address:
            raise UnsupportedObject(f"symbol {name!r} is defined nowhere in this process")
        return address


class _Image:
    """A checked object's loaded sections as this process will hold them: at their
    offsets in the file (so they keep the alignment LLVM laid them out with, whatever a
    header claims), then any NOBITS ones, zeroed, then a GOT slot and a jump stub per
    symbol from outside the object. It is built and relocated in a bytearray and copied
    into its mapping at once."""

    def __init__(self, obj: ElfObject):
        self.obj = obj
        self.offsets: dict[int, int] = {}  # section index -> its offset in the image
        self.slots: dict[str, int] = {}  # outside symbol -> its GOT slot's offset
        self.base = 0  # the mapping's address once placed

    def address_of(self, index: int) -> int:
        symbol = self.obj.symbols[index]
        return self.base + self.offsets[symbol.section] + symbol.value

    def place(self, resolve) -> None:
        """Resolve the symbols the object uses from outside, then map its loaded sections
        and relocate them."""
        obj = self.obj
        outside = {name: resolve(name) for name in
                   sorted({s.name for s in obj.symbols[1:] if not s.defined})}
        end = _round_up(self._lay_out(), 16)
        image = bytearray(end + SLOT * len(outside))
        for i, offset in self.offsets.items():
            section = obj.sections[i]
            if section.in_file:
                image[offset:offset + section.size] = \
                    obj.code[section.offset:section.offset + section.size]
        for n, (name, target) in enumerate(outside.items()):
            self.slots[name] = end + SLOT * n
            struct.pack_into("<Q", image, self.slots[name], target)
            STUB.pack_into(image, self.slots[name] + 8, JMP_RIP, 0, target)
        self.base = _map(len(image))
        for section, relocations in obj.relocations.items():
            for relocation in relocations:
                self._relocate(image, self.offsets[section], relocation, outside)
        ctypes.memmove(self.base, bytes(image), len(image))
        _protect(self.base, _round_up(len(image), PAGE), PROT_READ | PROT_EXEC)

    def _lay_out(self) -> int:
        """Set each loaded section's offset in the image; returns where they end."""
        sections = self.obj.sections
        self.offsets = {i: s.offset for i, s in enumerate(sections) if s.loaded and s.in_file}
        end = max((sections[i].size + offset for i, offset in self.offsets.items()),
                  default=0)
        for i, section in enumerate(sections):
            if section.loaded and not section.in_file:
                self.offsets[i] = end = _round_up(end, max(section.alignment, 1))
                end += section.size
        return end

    def _relocate(self, image: bytearray, section: int, relocation: Relocation,
                  outside: dict[str, int]) -> None:
        """Apply one relocation of the section at offset `section` of the image (ElfObject
        checked that it lies inside the section); `outside` holds the addresses of the
        symbols from outside the object."""
        offset, kind, index, addend = relocation
        symbol = self.obj.symbols[index]
        at = section + offset
        place = self.base + at
        name = None if symbol.defined else symbol.name
        value = outside[name] if name is not None else self.address_of(index)
        if kind == R_X86_64_64:
            struct.pack_into("<q", image, at, value + addend)
            return
        if kind in GOT_RELOCATIONS:
            value = self.base + self.slots[name]
        elif kind == R_X86_64_PLT32 and name is not None and not _fits(value + addend - place):
            value = self.base + self.slots[name] + 8  # its stub
        distance = value + addend - place
        if not _fits(distance):
            raise UnsupportedObject(f"a 32-bit relocation {distance:#x} bytes away")
        struct.pack_into("<i", image, at, distance)


def _fits(distance: int) -> bool:
    return -(1 << 31) <= distance < (1 << 31)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


_libc = None


def _process() -> ctypes.CDLL:
    """The process's symbols (dlopen(NULL)), with mmap and mprotect typed."""
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc = libc
    return _libc


def _map(size: int) -> int:
    address = _process().mmap(None, _round_up(max(size, 1), PAGE), PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"mmap of {size} bytes failed (errno {ctypes.get_errno()})")
    return address


def _protect(address: int, size: int, protection: int) -> None:
    if _process().mprotect(address, size, protection) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
