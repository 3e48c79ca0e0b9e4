"""Object code loaded without LLVM: a relocatable x86-64 ELF object (what the host JIT's
TargetMachine emits, position independent, small code model) copied into executable
memory, its relocations applied, its functions' addresses handed back.

This is the part of MCJIT's RuntimeDyld that kiln's kernels need, so that a process
whose kernels all come from the disk cache never loads LLVM (importing llvmlite's
binding and making an engine cost ~15 ms; `load` of a kernel costs ~0.1 ms). What it
does:

- every SHF_ALLOC section is placed in one anonymous mapping (aligned as the section
  asks; .bss zeroed), with a table after them of one GOT slot and one jump stub per
  symbol the object does not define, resolved in `Loader.symbols` (the functions this
  loader loaded before, as MCJIT resolves across modules) or else in the process
  (dlsym: libc's memset, CPython's API for runtime.fastcall);
- relocations: R_X86_64_64, PC32, PLT32 (through the stub when the target is out of
  32-bit reach), GOTPCREL, GOTPCRELX and REX_GOTPCRELX (read through the GOT slot,
  not relaxed);
- then the mapping is made read-only and executable.

Anything else (another machine, relocation type, writable sections, COMMON or TLS
symbols) raises
UnsupportedObject and the caller loads the object through MCJIT instead. Memory is never
freed, as with MCJIT: addresses handed out stay valid for the life of the process.
The file's layout is checked by cache_trust.object_problem before anything reaches here;
a relocation, symbol or name that points outside its section or table is refused too,
so nothing is written outside the mapping.
"""
from __future__ import annotations

import ctypes
import platform
import struct
import sys
import threading

from runtime.cache_trust import ELF_HEADER, SECTION_HEADER

SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, section, value, size
RELA = struct.Struct("<QQq")  # Elf64_Rela: offset, info, addend
SHT_SYMTAB, SHT_RELA, SHT_NOBITS = 2, 4, 8
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STB_LOCAL, STT_TLS = 0, 6
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL = 1, 2, 4, 9
R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 41, 42
GOT_RELOCATIONS = frozenset({R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX})
STUB = struct.Struct("<2sI Q")  # jmp *0(%rip) followed by the target's address
JMP_RIP = b"\xff\x25"
SLOT = 8 + STUB.size  # per undefined symbol: a GOT slot and a stub
PAGE = 4096
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20


class UnsupportedObject(Exception):
    """Object code this loader does not handle; the message says what. MCJIT loads it."""


def supported() -> bool:
    """Whether this process can load objects here: Linux on x86-64."""
    return sys.platform == "linux" and platform.machine() == "x86_64"


class Loader:
    """Loads objects into this process; `symbols` maps every global function and data
    symbol loaded so far to its address (a name defined twice is an error)."""

    def __init__(self):
        self.symbols: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self, code: bytes) -> dict[str, int]:
        """{name: address} of the global symbols `code` defines, loaded and relocated."""
        with self._lock:
            obj = _Object(code)
            defined = obj.defined_globals()
            taken = sorted(set(defined) & set(self.symbols))
            if taken:
                raise ValueError(f"the host JIT already has a function named {taken[0]!r}")
            obj.place(self._resolve)
            addresses = {name: obj.address_of(index) for name, index in defined.items()}
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


class _Object:
    """One object's sections, symbols and relocations, read from its bytes."""

    def __init__(self, code: bytes):
        header = ELF_HEADER.unpack_from(code)
        if header[2] != 62:
            raise UnsupportedObject(f"ELF machine {header[2]}, not x86-64")
        table, count = header[6], header[12]
        self.code = code
        self.sections = [SECTION_HEADER.unpack_from(code, table + i * SECTION_HEADER.size)
                         for i in range(count)]
        symtab = next((i for i, s in enumerate(self.sections) if s[1] == SHT_SYMTAB), None)
        if symtab is None:
            raise UnsupportedObject("no symbol table")
        _, _, _, _, offset, size, names, _, _, _ = self.sections[symtab]
        self.symbols = [SYMBOL.unpack_from(code, offset + at)
                        for at in range(0, size - SYMBOL.size + 1, SYMBOL.size)]
        self.names = self.sections[names]
        self.bases: dict[int, int] = {}  # section index -> its address once placed

    def name(self, symbol: tuple) -> str:
        start, end = self.names[4] + symbol[0], self.names[4] + self.names[5]
        stop = self.code.find(b"\0", start, end)
        if symbol[0] >= self.names[5] or stop < 0:
            raise UnsupportedObject(f"a symbol name at {symbol[0]} outside the name table")
        return self.code[start:stop].decode(errors="replace")

    def defined_globals(self) -> dict[str, int]:
        """{name: symbol index} of the global symbols defined in allocated sections."""
        found = {}
        for index, symbol in enumerate(self.symbols):
            binding, section = symbol[1] >> 4, symbol[3]
            if section == SHN_COMMON or symbol[1] & 0xF == STT_TLS:
                raise UnsupportedObject(f"COMMON or TLS symbol {self.name(symbol)!r}")
            if binding != STB_LOCAL and section != SHN_UNDEF and section < len(self.sections):
                found[self.name(symbol)] = index
        return found

    def address_of(self, index: int) -> int:
        _, _, _, section, value, _ = self.symbols[index]
        if section == SHN_ABS:
            return value
        if section not in self.bases or value > self.sections[section][5]:
            raise UnsupportedObject(f"symbol {index} is outside the loaded sections")
        return self.bases[section] + value

    def place(self, resolve) -> None:
        """Map the allocated sections, resolve what they use and relocate them."""
        layout, end = {}, 0
        for i, section in enumerate(self.sections):
            if section[2] & SHF_ALLOC:
                if section[2] & SHF_WRITE:  # kiln's kernels have none: no RW pages to keep
                    raise UnsupportedObject("a writable section")
                end = _round_up(end, max(section[8], 1))
                layout[i] = end
                end += section[5]
        undefined = sorted({self.name(s) for s in self.symbols
                            if s[3] == SHN_UNDEF and s[0] != 0})
        slots = _round_up(end, 16)
        size = slots + SLOT * len(undefined)
        base = _map(size)
        self.bases = {i: base + offset for i, offset in layout.items()}
        for i, offset in layout.items():
            _, kind, _, _, source, length, _, _, _, _ = self.sections[i]
            if kind != SHT_NOBITS:
                ctypes.memmove(base + offset, self.code[source:source + length], length)
        got, stubs = {}, {}
        for n, name in enumerate(undefined):
            target = resolve(name)
            got[name] = base + slots + SLOT * n
            stubs[name] = got[name] + 8
            ctypes.memmove(got[name], struct.pack("<Q", target) + STUB.pack(JMP_RIP, 0, target),
                           SLOT)
        for section in self.sections:
            if section[1] == SHT_RELA and section[7] in self.bases:
                self._relocate(section, got, stubs, resolve)
        _protect(base, _round_up(size, PAGE), PROT_READ | PROT_EXEC)

    def _relocate(self, rela: tuple, got: dict, stubs: dict, resolve) -> None:
        target_base, target_size = self.bases[rela[7]], self.sections[rela[7]][5]
        for at in range(rela[4], rela[4] + rela[5] - RELA.size + 1, RELA.size):
            offset, info, addend = RELA.unpack_from(self.code, at)
            kind = info & 0xFFFFFFFF
            if info >> 32 >= len(self.symbols) or offset + (8 if kind == R_X86_64_64 else 4) \
                    > target_size:
                raise UnsupportedObject(f"a relocation at {offset} outside its section or "
                                        f"symbol table")
            symbol = self.symbols[info >> 32]
            place = target_base + offset
            name = self.name(symbol) if symbol[3] == SHN_UNDEF else None
            value = resolve(name) if name is not None else self.address_of(info >> 32)
            if kind == R_X86_64_64:
                ctypes.memmove(place, struct.pack("<q", value + addend), 8)
                continue
            if kind in GOT_RELOCATIONS:
                if name is None:
                    raise UnsupportedObject("a GOT relocation to a defined symbol")
                value = got[name]
            elif kind == R_X86_64_PLT32 and name is not None and \
                    not _fits(value + addend - place):
                value = stubs[name]
            elif kind not in (R_X86_64_PC32, R_X86_64_PLT32):
                raise UnsupportedObject(f"relocation type {kind}")
            distance = value + addend - place
            if not _fits(distance):
                raise UnsupportedObject(f"a 32-bit relocation {distance:#x} bytes away")
            ctypes.memmove(place, struct.pack("<i", distance), 4)


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
