"""A relocatable x86-64 ELF object read from its bytes and checked, before
runtime/llvm/elf_loader.py maps any of it.

The checks hold an object to what LLVM's ELF writer emits for kiln's kernels (each of the
1,156 objects that the native, small-GEMM, eager pointwise and vmath tests cached here
passes them), so that a damaged object, even one whose cache entry was hashed again, is
refused rather than loaded:

- sections: of the kinds LLVM writes for us, aligned to a power of two up to a page, laid
  out as LLVM lays them out: after the ELF header, one after another, each padded only to
  its alignment, the section header table last. So none overlaps another or leaves a gap
  (a relocation table that lost entries would leave code unrelocated). A NOBITS section
  is neither executable nor larger than MAX_IMAGE_BYTES, nor are the loaded ones together;
- symbols: one table, locals first as its header says, each name NUL-terminated inside
  its string table, each defined symbol inside its section (value and size), section
  symbols at 0, functions in executable sections, packed as LLVM packs them (16-byte
  aligned, no gap of 16 bytes), a global name defined once;
- relocations: at most one table per loaded section, using the symbol table, of the
  types the loader applies, against a symbol other than the null one, each writing inside
  the section it patches where LLVM left zeros (a RELA entry holds the addend, so the
  bytes it patches are 0), its target (the symbol's value plus the addend) inside the
  symbol's section, short of the 4 to 8 bytes that a PC-relative field sits before its
  instruction's end; a call, a read through the GOT or a use of a symbol from outside
  the object points at the symbol itself.

They bound what loading reads and writes, and every single-bit flip of the ELF header,
the section headers and the symbol table of the tests' relocations kernel is refused or
harmless. They cannot tell forged code from LLVM's: an addend or a symbol index changed
within bounds passes, and an object that passes runs as it is (runtime/llvm/cache_trust.py
says why that is trusted).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from runtime.llvm.cache_trust import (ELF_HEADER, MAX_ENTRY_BYTES, SECTION_HEADER,
                                      header_problem)

SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, section, value, size
RELA = struct.Struct("<QQq")  # Elf64_Rela: offset, info, addend
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOTE, SHT_NOBITS = 1, 2, 3, 4, 7, 8
SHT_X86_64_UNWIND, SHT_LLVM_ADDRSIG = 0x70000001, 0x6FFF4C03
SECTION_KINDS = frozenset({SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOTE,
                           SHT_NOBITS, SHT_X86_64_UNWIND, SHT_LLVM_ADDRSIG})
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_TLS = 0, 1, 2, 3, 4, 6
SYMBOL_TYPES = frozenset({STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE})
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL = 1, 2, 4, 9
R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 41, 42
GOT_RELOCATIONS = frozenset({R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX})
RELOCATION_TYPES = GOT_RELOCATIONS | {R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32}
CALLS_AND_GOT_READS = GOT_RELOCATIONS | {R_X86_64_PLT32}
PC_BIAS = 8  # a PC-relative field ends 0-4 bytes (an immediate) before its instruction
PAGE = 4096
FUNCTION_ALIGNMENT = 16  # LLVM's for x86-64 (kiln asks for no optsize)
TABLE_ALIGNMENT = 8  # of the section header table, where LLVM puts it
MAX_IMAGE_BYTES = MAX_ENTRY_BYTES  # the loaded sections of an entry the cache would read
ZEROS = {4: bytes(4), 8: bytes(8)}  # what a relocation patches, before it is applied


class UnsupportedObject(Exception):
    """Object code the ELF loader does not load: damaged, or using what it does not
    handle (another relocation type, writable sections, COMMON or TLS symbols); the message
    says what. The host JIT gives MCJIT such an object only when this process has just
    compiled it; one from the disk cache is compiled again."""


class Section(NamedTuple):
    """An Elf64_Shdr."""
    name: int
    kind: int
    flags: int
    address: int
    offset: int
    size: int
    link: int
    info: int
    alignment: int
    entry_size: int

    @property
    def loaded(self) -> bool:
        return bool(self.flags & SHF_ALLOC)

    @property
    def in_file(self) -> bool:
        """Whether the section has bytes in the file."""
        return self.kind != SHT_NOBITS and self.size > 0


class Symbol(NamedTuple):
    """An Elf64_Sym, its name read from the string table."""
    name: str
    binding: int
    type: int
    section: int
    value: int
    size: int

    @property
    def defined(self) -> bool:
        return self.section != SHN_UNDEF


Relocation = tuple[int, int, int, int]
"""An Elf64_Rela: the offset it patches in its section, its type, symbol index, addend
(a plain tuple: an object may have thousands, and a NamedTuple takes ~0.3 us to make)."""


class ElfObject:
    """An object's sections, symbols and relocations (by the section they patch); making
    one checks them all, raising UnsupportedObject with the first problem."""

    def __init__(self, code: bytes):
        problem = header_problem(code)
        if problem is not None:
            raise UnsupportedObject(problem)
        header = ELF_HEADER.unpack_from(code)
        self.code = code
        self.sections = _read_sections(code, table=header[6], count=header[12])
        self.symbols = _read_symbols(code, self.sections, _symbol_table(self.sections))
        self.relocations = {rela.info: _read_relocations(self, rela)
                            for rela in _relocation_tables(self.sections)}

    def defined_globals(self) -> dict[str, int]:
        """{name: symbol index} of the global symbols the object defines."""
        return {symbol.name: index for index, symbol in enumerate(self.symbols)
                if symbol.binding != STB_LOCAL and symbol.defined}

    def function(self, name: str) -> int:
        """The symbol index of the global function `name`; UnsupportedObject if the
        object defines none."""
        index = self.defined_globals().get(name)
        if index is None or self.symbols[index].type != STT_FUNC:
            raise UnsupportedObject(f"the object defines no function named {name!r}")
        return index


def _read_sections(code: bytes, table: int, count: int) -> list[Section]:
    sections = list(map(Section._make, SECTION_HEADER.iter_unpack(
        code[table:table + count * SECTION_HEADER.size])))
    if any(sections[0]):
        raise UnsupportedObject("section 0 is not the null section")
    for index in range(1, count):
        problem = _section_problem(sections[index], count)
        if problem is not None:
            raise UnsupportedObject(f"section {index} {problem}")
    _check_layout(code, table, sections)
    image = sum(section.size for section in sections if section.flags & SHF_ALLOC)
    if image > MAX_IMAGE_BYTES:
        raise UnsupportedObject(f"the loaded sections take {image} bytes, over "
                                f"{MAX_IMAGE_BYTES}")
    return sections


def _section_problem(section: Section, count: int) -> str | None:
    kind, flags, alignment = section.kind, section.flags, section.alignment
    if kind not in SECTION_KINDS:
        return f"is of type {kind:#x}, which LLVM does not write for kiln's kernels"
    if alignment & (alignment - 1) or alignment > PAGE:
        return f"asks for alignment {alignment}, not a power of two up to {PAGE}"
    if section.link >= count:
        return f"links to section {section.link} of {count}"
    if flags & SHF_ALLOC and flags & SHF_WRITE:  # kiln's kernels have none: no RW pages
        return "is writable"
    if kind == SHT_NOBITS and flags & SHF_EXECINSTR:
        return "is executable but has no bytes in the file (NOBITS)"
    if kind == SHT_NOBITS and section.size > MAX_IMAGE_BYTES:
        return f"has {section.size} bytes (NOBITS), over {MAX_IMAGE_BYTES}"
    return None


def _check_layout(code: bytes, table: int, sections: list[Section]) -> None:
    """The ELF header, the sections with bytes in the file and the section header table
    must follow one another without overlapping, each after no more padding than its
    alignment asks, and end the file."""
    pieces = [(0, ELF_HEADER.size, 1, HEADER_PIECE),
              (table, len(sections) * SECTION_HEADER.size, TABLE_ALIGNMENT, TABLE_PIECE)]
    pieces += [(s.offset, s.size, s.alignment or 1, i) for i, s in enumerate(sections)
               if s.kind != SHT_NOBITS and s.size]
    end, before = 0, HEADER_PIECE
    for offset, size, alignment, piece in sorted(pieces):
        if offset < end:
            raise UnsupportedObject(f"{_piece(piece)} at {offset} overlaps {_piece(before)}")
        if offset % alignment or offset - end >= alignment:
            raise UnsupportedObject(f"{_piece(piece)} at {offset} is not where LLVM puts it: "
                                    f"{offset - end} bytes after {_piece(before)}, aligned "
                                    f"to {alignment}")
        end, before = offset + size, piece
    if end != len(code):
        raise UnsupportedObject(f"{len(code) - end} bytes follow {_piece(before)}")


HEADER_PIECE, TABLE_PIECE = -2, -1  # the pieces of a file that are not sections


def _piece(index: int) -> str:
    return {HEADER_PIECE: "the ELF header", TABLE_PIECE: "the section header table"}.get(
        index, f"section {index}")


def _symbol_table(sections: list[Section]) -> Section:
    tables = [s for s in sections if s.kind == SHT_SYMTAB]
    if len(tables) != 1:
        raise UnsupportedObject(f"{len(tables)} symbol tables, not one")
    [table] = tables
    if table.entry_size != SYMBOL.size or table.size % SYMBOL.size:
        raise UnsupportedObject(f"a symbol table of {table.size} bytes in entries of "
                                f"{table.entry_size}, not {SYMBOL.size}")
    if sections[table.link].kind != SHT_STRTAB:
        raise UnsupportedObject(f"the symbol table's names are in section {table.link}, "
                                f"not a string table")
    return table


def _read_symbols(code: bytes, sections: list[Section], table: Section) -> list[Symbol]:
    names = sections[table.link]
    entries = SYMBOL.iter_unpack(code[table.offset:table.offset + table.size])
    if next(entries, None) != (0, 0, 0, 0, 0, 0):
        raise UnsupportedObject("the symbol table does not open with the null symbol")
    symbols = [Symbol("", STB_LOCAL, STT_NOTYPE, SHN_UNDEF, 0, 0)]
    for index, (name, info, _other, section, value, size) in enumerate(entries, 1):
        local = index < table.info  # a local's name is never looked up
        symbol = Symbol("" if local else _name(code, names, name), info >> 4, info & 0xF,
                        section, value, size)
        problem = _symbol_problem(symbol, sections, local)
        if problem is not None:
            raise UnsupportedObject(f"symbol {index} ({symbol.name!r}) {problem}")
        symbols.append(symbol)
    defined = [s.name for s in symbols[table.info:] if s.section != SHN_UNDEF]
    if len(set(defined)) < len(defined):
        twice = next(name for name in defined if defined.count(name) > 1)
        raise UnsupportedObject(f"the global {twice!r} is defined twice")
    _check_functions(symbols, sections)
    return symbols


def _check_functions(symbols: list[Symbol], sections: list[Section]) -> None:
    """LLVM lays a section's functions out one after another, each starting at a multiple
    of FUNCTION_ALIGNMENT, so the first starts at 0, each less than FUNCTION_ALIGNMENT
    bytes after the one before ends, and the last ends less than that before the section
    does: an entry point that a damaged symbol moves breaks this."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for symbol in symbols:
        if symbol.type == STT_FUNC:
            spans.setdefault(symbol.section, []).append((symbol.value, symbol.size))
    for section, functions in spans.items():
        end = 0
        for start, size in sorted(functions):
            if not size or start % FUNCTION_ALIGNMENT or not 0 <= start - end < \
                    FUNCTION_ALIGNMENT:
                raise UnsupportedObject(f"a function of {size} bytes at {start} of section "
                                        f"{section}, {start - end} bytes after the one "
                                        f"before: not where LLVM puts one")
            end = start + size
        if sections[section].size - end >= FUNCTION_ALIGNMENT:
            raise UnsupportedObject(f"section {section} goes on {sections[section].size - end} "
                                    f"bytes after its last function")


def _name(code: bytes, names: Section, at: int) -> str:
    end = code.find(b"\0", names.offset + at, names.offset + names.size)
    if at >= names.size or end < 0:
        raise UnsupportedObject(f"a symbol name at {at} outside its string table")
    return code[names.offset + at:end].decode(errors="replace")


def _symbol_problem(symbol: Symbol, sections: list[Section], local: bool) -> str | None:
    binding, kind, section = symbol.binding, symbol.type, symbol.section
    if section == SHN_COMMON or kind == STT_TLS:
        return "is a COMMON or TLS symbol"
    if kind not in SYMBOL_TYPES or binding not in (STB_LOCAL, STB_GLOBAL, STB_WEAK):
        return f"has type {kind} and binding {binding}"
    if local != (binding == STB_LOCAL):
        return "is out of place: the symbol table lists locals first"
    if not local and kind in (STT_FILE, STT_SECTION):
        return "is a global FILE or SECTION symbol"
    if section == SHN_ABS:
        return None if kind == STT_FILE else "is absolute (SHN_ABS)"
    if section == SHN_UNDEF:
        return "is undefined but local or nameless" if local or not symbol.name else None
    if section >= len(sections):
        return f"is in section {section} of {len(sections)}"
    home = sections[section]
    if symbol.value + symbol.size > home.size or (kind == STT_SECTION and symbol.value):
        return f"lies at {symbol.value} ({symbol.size} bytes) in {home.size} bytes"
    if kind == STT_FUNC and not home.flags & SHF_EXECINSTR:
        return f"is a function in section {section}, which is not executable"
    if not local and not home.flags & SHF_ALLOC:
        return f"is in section {section}, which is not loaded"
    return None


def _relocation_tables(sections: list[Section]) -> list[Section]:
    tables = [s for s in sections if s.kind == SHT_RELA]
    patched = [s.info for s in tables]
    for table in tables:
        if table.entry_size != RELA.size or table.size % RELA.size:
            raise UnsupportedObject(f"a relocation table of {table.size} bytes in entries "
                                    f"of {table.entry_size}, not {RELA.size}")
        if sections[table.link].kind != SHT_SYMTAB:
            raise UnsupportedObject(f"relocations using section {table.link}, not the "
                                    f"symbol table")
        if not 0 < table.info < len(sections) or not sections[table.info].in_file or \
                not sections[table.info].loaded:
            raise UnsupportedObject(f"relocations for section {table.info}, which is not a "
                                    f"loaded section with bytes in the file")
        if patched.count(table.info) > 1:
            raise UnsupportedObject(f"two relocation tables for section {table.info}")
    return tables


def _read_relocations(obj: ElfObject, table: Section) -> list[Relocation]:
    """The table's relocations in the order of the bytes they patch, each checked, no two
    patching the same bytes."""
    patched = obj.sections[table.info]
    relocations, end = [], 0
    for offset, info, addend in sorted(RELA.iter_unpack(
            obj.code[table.offset:table.offset + table.size])):
        relocation = (offset, info & 0xFFFFFFFF, info >> 32, addend)
        problem = "patches bytes another relocation patches" if offset < end else \
            _relocation_problem(relocation, obj, patched)
        if problem is not None:
            raise UnsupportedObject(f"a relocation at {offset} of section {table.info} "
                                    f"{problem}")
        relocations.append(relocation)
        end = offset + (8 if relocation[1] == R_X86_64_64 else 4)
    return relocations


def _relocation_problem(relocation: Relocation, obj: ElfObject, patched: Section
                        ) -> str | None:
    offset, kind, symbol, addend = relocation
    width = 8 if kind == R_X86_64_64 else 4
    if kind not in RELOCATION_TYPES:
        return f"has type {kind}, which the loader does not apply"
    if not 0 < symbol < len(obj.symbols):
        return f"uses symbol {symbol} of {len(obj.symbols)}"
    if offset + width > patched.size:
        return f"writes outside its section (of {patched.size} bytes)"
    place = patched.offset + offset
    if obj.code[place:place + width] != ZEROS[width]:
        return "patches bytes LLVM would have left 0"
    return _target_problem(kind, addend, obj.symbols[symbol], obj.sections)


def _target_problem(kind: int, addend: int, symbol: Symbol, sections: list[Section]
                    ) -> str | None:
    """Why a relocation of type `kind` adding `addend` to `symbol` points where it must
    not, or None. A call (PLT32) or a read through the GOT ends its instruction, so it
    points at the symbol itself (addend -4); so does any relocation against a symbol from
    outside the object. One against a defined symbol points inside its section: the
    value plus the addend is up to PC_BIAS bytes short of the target for PC-relative
    fields."""
    if kind in CALLS_AND_GOT_READS and addend != -4:
        return f"adds {addend} to a call or GOT read of {symbol.name!r}, not -4"
    if symbol.section == SHN_UNDEF:
        if addend != (0 if kind == R_X86_64_64 else -4):
            return f"adds {addend} to {symbol.name!r}, from outside the object"
        return None
    if kind in GOT_RELOCATIONS:
        return "reads a defined symbol through the GOT"
    if symbol.section == SHN_ABS:
        return "uses an absolute symbol"
    home = sections[symbol.section]
    if not home.flags & SHF_ALLOC:
        return f"points into section {symbol.section}, which is not loaded"
    target = symbol.value + addend
    low, high = (0, home.size) if kind == R_X86_64_64 else (-PC_BIAS, home.size - 4)
    if not low <= target <= high:
        return f"points at {target} of section {symbol.section}, of {home.size} bytes"
    return None
