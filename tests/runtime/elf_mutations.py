"""Damage to a real object's ELF structure, for the ELF loader's tests: MUTATIONS changes
one field each (of a relocation, a symbol, a section header or the ELF header) of the
object of runtime_kernels.relocations_module(KERNEL), each with what the loader
(runtime/llvm/elf_object.py) says about it; `random_flips` xors seeded random bytes of its
headers and tables."""
import random
import struct
from typing import Callable, NamedTuple

from runtime.llvm.cache_trust import ELF_HEADER, SECTION_HEADER
from runtime.llvm.elf_object import (RELA, SHF_EXECINSTR, SHF_WRITE, SHN_ABS, SHT_NOBITS,
                                     SHT_RELA, SHT_SYMTAB, SYMBOL, STB_GLOBAL, STT_TLS,
                                     R_X86_64_PC32, R_X86_64_PLT32, ElfObject)

KERNEL = "mutated"  # the function relocations_module defines; also KERNEL_strlen
THREE_GIB = 3 << 30


class Layout:
    """Where one object's fields are: its section header table, its code section (.text),
    their relocation table, the symbol table, a data section, the kernel's symbol, and
    of its relocations of each type the entry and the offset it patches."""

    def __init__(self, code: bytes):
        obj = ElfObject(code)
        self.table = ELF_HEADER.unpack_from(code)[6]
        self.count = len(obj.sections)
        self.text = next(i for i, s in enumerate(obj.sections) if s.flags & SHF_EXECINSTR)
        self.rela = next(i for i, s in enumerate(obj.sections)
                         if s.kind == SHT_RELA and s.info == self.text)
        self.symtab = next(i for i, s in enumerate(obj.sections) if s.kind == SHT_SYMTAB)
        self.data = next(i for i, s in enumerate(obj.sections)
                         if s.loaded and i != self.text)
        self.kernel = obj.sections[self.symtab].offset + \
            SYMBOL.size * obj.defined_globals()[KERNEL]
        rela = obj.sections[self.rela]
        entries = list(RELA.iter_unpack(code[rela.offset:rela.offset + rela.size]))
        self.relocation = {info & 0xFFFFFFFF: rela.offset + RELA.size * n
                           for n, (_, info, _) in enumerate(entries)}
        self.patched = {info & 0xFFFFFFFF: offset for offset, info, _ in entries}
        self.symbol_count = len(obj.symbols)

    def section(self, index: int, field: int) -> int:
        """The offset of a field (its byte offset in Elf64_Shdr) of section `index`."""
        return self.table + SECTION_HEADER.size * index + field


def patch(*changes: tuple[Callable[[Layout], int], str, Callable[[Layout, int], int]]):
    """A mutation setting fields of the object: each change sets the field at
    `at(layout)` (its struct layout given) to `value(layout, its value now)`, `layout`
    being the undamaged object's."""
    def mutate(code: bytes) -> bytes:
        layout, spoilt = Layout(code), bytearray(code)
        for at, field, value in changes:
            where = at(layout)
            now = struct.unpack_from("<" + field, code, where)[0]
            struct.pack_into("<" + field, spoilt, where, value(layout, now))
        return bytes(spoilt)
    return mutate


def to(value: int):
    return lambda layout, now: value


def section_field(section: Callable[[Layout], int], field: int):
    return lambda layout: layout.section(section(layout), field)


# Elf64_Shdr fields
SH_TYPE, SH_FLAGS, SH_OFFSET, SH_SIZE, SH_LINK, SH_INFO, SH_ALIGN, SH_ENTSIZE = \
    0x04, 0x08, 0x18, 0x20, 0x28, 0x2C, 0x30, 0x38
TEXT, RELA_TEXT, SYMTAB, DATA = (lambda layout: layout.text, lambda layout: layout.rela,
                                 lambda layout: layout.symtab, lambda layout: layout.data)


def relocation(kind: int, field: int):
    """A field of the first relocation of type `kind` (offset 0, type 8, symbol 12,
    addend 16)."""
    return lambda layout: layout.relocation[kind] + field


def kernel_symbol(field: int):
    """A field of the kernel's symbol (name 0, info 4, section 6, value 8)."""
    return lambda layout: layout.kernel + field


class Mutation(NamedTuple):
    mutate: Callable[[bytes], bytes]
    problem: str  # a regular expression for the loader's message


MUTATIONS = {
    "relocation offset past its section": Mutation(
        patch((relocation(R_X86_64_PC32, 0), "Q", to(1 << 40))), "writes outside its section"),
    "relocation offset onto another relocation's bytes": Mutation(
        patch((relocation(R_X86_64_PC32, 0), "Q",
               lambda layout, now: layout.patched[R_X86_64_PLT32])),
        "patches bytes another relocation patches"),
    "relocation offset onto code": Mutation(
        patch((relocation(R_X86_64_PC32, 0), "Q", lambda layout, now: now - 1)),
        "patches bytes LLVM would have left 0"),
    "relocation symbol past the table": Mutation(
        patch((relocation(R_X86_64_PC32, 12), "I", to(999))), "uses symbol 999 of"),
    "relocation against the null symbol": Mutation(
        patch((relocation(R_X86_64_PC32, 12), "I", to(0))), "uses symbol 0 of"),
    "relocation type the loader does not apply": Mutation(
        patch((relocation(R_X86_64_PC32, 8), "I", to(10))), "has type 10"),
    "relocation addend far past its section": Mutation(
        patch((relocation(R_X86_64_PC32, 16), "q", to(1 << 20))), "points at 1048576 of"),
    "relocation addend before its section": Mutation(
        patch((relocation(R_X86_64_PC32, 16), "q", to(-64))), "points at -64 of"),
    "call addend": Mutation(
        patch((relocation(R_X86_64_PLT32, 16), "q", to(0))),
        "adds 0 to a call or GOT read of 'strlen', not -4"),
    "symbol name outside the string table": Mutation(
        patch((kernel_symbol(0), "I", to(0xFFFFFF))), "a symbol name at 16777215 outside"),
    "symbol name changed": Mutation(
        patch((kernel_symbol(0), "I", lambda layout, now: now + 1)),
        f"defines no function named '{KERNEL}'"),
    "symbol value past its section": Mutation(
        patch((kernel_symbol(8), "Q", to(1 << 20))), "lies at 1048576"),
    "symbol value a byte into its function": Mutation(
        patch((kernel_symbol(8), "Q", to(1))), "not where LLVM puts one"),
    "symbol in a section past the table": Mutation(
        patch((kernel_symbol(6), "H", to(200))), "is in section 200 of"),
    "absolute symbol": Mutation(patch((kernel_symbol(6), "H", to(SHN_ABS))), "is absolute"),
    "thread-local symbol": Mutation(
        patch((kernel_symbol(4), "B", to(STB_GLOBAL << 4 | STT_TLS))), "COMMON or TLS"),
    "globals listed as locals": Mutation(
        patch((section_field(SYMTAB, SH_INFO), "I", lambda layout, now: layout.symbol_count)),
        "out of place"),
    "code an executable NOBITS section of 3 GiB": Mutation(
        patch((section_field(TEXT, SH_TYPE), "I", to(SHT_NOBITS)),
              (section_field(TEXT, SH_SIZE), "Q", to(THREE_GIB))),
        "executable but has no bytes in the file"),
    "data a NOBITS section of 3 GiB": Mutation(
        patch((section_field(DATA, SH_TYPE), "I", to(SHT_NOBITS)),
              (section_field(DATA, SH_SIZE), "Q", to(THREE_GIB))),
        f"has {THREE_GIB} bytes \\(NOBITS\\), over"),
    "code past the end of the file": Mutation(
        patch((section_field(TEXT, SH_OFFSET), "Q", to(1 << 40))),
        "is not where LLVM puts it"),
    "code grown over the next section": Mutation(
        patch((section_field(TEXT, SH_SIZE), "Q", lambda layout, now: now + 16)), "overlaps"),
    "code shrunk": Mutation(
        patch((section_field(TEXT, SH_SIZE), "Q", lambda layout, now: now - 16)),
        "is not where LLVM puts it"),
    "code writable": Mutation(
        patch((section_field(TEXT, SH_FLAGS), "Q", lambda layout, now: now | SHF_WRITE)),
        "is writable"),
    "code aligned to 3": Mutation(patch((section_field(TEXT, SH_ALIGN), "Q", to(3))),
                                  "asks for alignment 3"),
    "relocations for section 0": Mutation(
        patch((section_field(RELA_TEXT, SH_INFO), "I", to(0))), "relocations for section 0,"),
    "relocations for a missing section": Mutation(
        patch((section_field(RELA_TEXT, SH_INFO), "I", to(99))),
        "relocations for section 99,"),
    "relocations for a section that is not loaded": Mutation(
        patch((section_field(RELA_TEXT, SH_INFO), "I", lambda layout, now: layout.symtab)),
        "which is not a loaded section"),
    "relocations using another table": Mutation(
        patch((section_field(RELA_TEXT, SH_LINK), "I", lambda layout, now: layout.text)),
        "not the symbol table"),
    "relocation table of another type": Mutation(
        patch((section_field(RELA_TEXT, SH_TYPE), "I", to(5))), "is of type 0x5"),
    "relocation table short of an entry": Mutation(
        patch((section_field(RELA_TEXT, SH_SIZE), "Q", lambda layout, now: now - RELA.size)),
        "is not where LLVM puts it"),
    "symbol entries of 16 bytes": Mutation(
        patch((section_field(SYMTAB, SH_ENTSIZE), "Q", to(16))), "in entries of 16"),
    "section link past the sections": Mutation(
        patch((section_field(SYMTAB, SH_LINK), "I", to(999))), "links to section 999 of"),
    "section header table past the end": Mutation(
        patch((lambda layout: 0x28, "Q", to(1 << 40))), "section header table"),
    "section header table 8 bytes on": Mutation(
        patch((lambda layout: 0x28, "Q", lambda layout, now: now + 8)), "ends past"),
    "one section fewer": Mutation(
        patch((lambda layout: 0x3C, "H", lambda layout, now: now - 1)), "links to section"),
    "one section more": Mutation(
        patch((lambda layout: 0x3C, "H", lambda layout, now: now + 1)),
        "section header table"),
}


def random_flips(code: bytes, seed: int, count: int, tables: str) -> list[tuple[str, bytes]]:
    """`count` copies of `code`, each with one byte xored with a random non-zero byte and a
    label saying which: with `tables` "headers", a byte of the ELF header, of the section
    header table or of the symbol table; with "relocations", of the relocation table."""
    layout, rng = Layout(code), random.Random(seed)
    obj = ElfObject(code)
    symbols, relocations = obj.sections[layout.symtab], obj.sections[layout.rela]
    regions = {"headers": [("ELF header", 0, ELF_HEADER.size),
                           ("section header table", layout.table,
                            layout.table + SECTION_HEADER.size * layout.count),
                           ("symbol table", symbols.offset, symbols.offset + symbols.size)],
               "relocations": [("relocation table", relocations.offset,
                                relocations.offset + relocations.size)]}[tables]
    flips = []
    for _ in range(count):
        what, start, end = rng.choice(regions)
        at, mask = rng.randrange(start, end), rng.randrange(1, 256)
        spoilt = bytearray(code)
        spoilt[at] ^= mask
        flips.append((f"{what}: byte {at - start} ^ {mask:#04x}", bytes(spoilt)))
    return flips
