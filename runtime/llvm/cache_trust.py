"""What the kernel cache trusts, and the checks that hold it to that.

Whoever can write the cache directory can run native code in every kiln process that reads
it, so the disk tier loads only what the user running the process wrote and nobody else
could have:

- The directory must be owned by this user (the effective uid) and not writable by group
  or others. It is checked once per directory, when a cache first uses it, and created
  0700 (with any parents it has to create) when missing. A directory that fails is neither
  read nor written: that process keeps its kernels in memory only, after one warning. A
  symbolic link to the directory is followed and the directory it names checked; the path
  leading to it is trusted, as any file under $HOME is.
- An entry file is opened without following a symbolic link and without blocking
  (O_NOFOLLOW | O_NONBLOCK) and read only if the open file is a regular file owned by this
  user, not writable by group or others, and at most MAX_ENTRY_BYTES long. A FIFO, device,
  socket, symlink, directory or oversized file is refused and rebuilt.
- The header's SHA-256 catches damage, not forgery: whoever can write the file can
  recompute it. LLVM's object loader does not check what it is given and crashes the
  process on a truncated or garbage object, so `object_problem` checks the structure
  first: a relocatable 64-bit little-endian ELF object for this machine whose section
  header table and sections lie inside its bytes. The ELF loader checks the rest
  (runtime/llvm/elf_object.py), and what it refuses is compiled again, never given to MCJIT.
  An object that passes is still native code run as it is; it is loaded because only
  this user could have put it there.
- PTX entries (runtime/cuda/nvptx.py) are text that the CUDA driver's JIT parses and checks
  itself; `ptx_problem` still refuses anything but the PTX that LLVM's NVPTX backend
  writes: ASCII without NUL bytes, opening with its .version, .target and
  .address_size 64 directives, and defining at least one kernel (.entry).
"""
from __future__ import annotations

import errno
import os
import platform
import re
import stat
import struct
from pathlib import Path

# The largest entry a run of the whole test suite writes is under 0.5 MB (a GEMM kernel);
# a file past 64 MiB is not one of ours, and reading it would only cost memory.
MAX_ENTRY_BYTES = 64 << 20

ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
ELF_MAGIC = b"\x7fELF"
ELFCLASS64, ELFDATA2LSB, ET_REL, SHT_NOBITS = 2, 1, 1, 8
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}  # EM_X86_64, EM_AARCH64
ELF_MACHINE = ELF_MACHINES.get(platform.machine())  # this machine's
PTX_HEAD = re.compile(r"\.version \d+\.\d+\n\.target sm_\d+[a-z]?\n\.address_size 64\n")
PTX_ENTRY = re.compile(r"^\.visible \.entry (\w+)\(", re.MULTILINE)  # a kernel, its name


class UntrustedEntry(Exception):
    """A cache file that is not a regular file of this user's, or too big, to be read; the
    message says which."""


def ownership_problem(status: os.stat_result) -> str | None:
    """Why a file or directory with this status could have been written by someone other
    than this user, or None."""
    if status.st_uid != os.geteuid():
        return f"owned by uid {status.st_uid}, not by this process's uid {os.geteuid()}"
    if status.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def make_private_directories(directory: Path) -> None:
    """Create `directory` and whichever of its parents are missing with mode 0700 (the umask
    can only take bits away); directories that exist are left as they are."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another process made it first


def directory_problem(directory: Path) -> str | None:
    """Why entries in `directory` must not be trusted, or None; creates it first when
    missing. OSError if it cannot be created or is not a directory."""
    make_private_directories(directory)
    status = os.stat(directory)
    if not stat.S_ISDIR(status.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
    return ownership_problem(status)


def read_entry_file(path: Path) -> bytes:
    """The bytes of the entry file at `path`: FileNotFoundError if there is none,
    UntrustedEntry if it is anything but a regular file of this user's that nobody else
    can write, of at most MAX_ENTRY_BYTES."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UntrustedEntry("is a symbolic link")
        raise UntrustedEntry(f"cannot be opened: {error.strerror}")
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UntrustedEntry(f"is not a regular file (mode {status.st_mode:o})")
        problem = ownership_problem(status)
        if problem is not None:
            raise UntrustedEntry(f"is {problem}")
        if status.st_size > MAX_ENTRY_BYTES:
            raise UntrustedEntry(f"is {status.st_size} bytes, over {MAX_ENTRY_BYTES}")
        with open(descriptor, "rb", closefd=False) as f:
            data = f.read(MAX_ENTRY_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_ENTRY_BYTES:
        raise UntrustedEntry(f"grew past {MAX_ENTRY_BYTES} bytes while being read")
    return data


def object_problem(code: bytes) -> str | None:
    """Why `code` is not structurally a relocatable 64-bit little-endian ELF object for this
    machine whose section header table and sections lie inside `code`, or None. Checks
    the layout only: what the sections hold is not looked at."""
    problem = header_problem(code)
    if problem is not None:
        return problem
    _, _, _, _, _, _, table, _, _, _, _, _, sections, _ = ELF_HEADER.unpack_from(code)
    for index in range(sections):
        (_name, kind, _flags, _address, offset, size, link, _info, _alignment,
         _entry_size) = SECTION_HEADER.unpack_from(code, table + index * SECTION_HEADER.size)
        if kind != SHT_NOBITS and offset + size > len(code):
            return f"section {index} ends past the object code's {len(code)} bytes"
        if link >= sections:
            return f"section {index} links to section {link} of {sections}"
    return None


def header_problem(code: bytes) -> str | None:
    """Why the ELF header of `code` is not one of a relocatable 64-bit little-endian object
    for this machine whose section header table lies inside `code`, or None."""
    if len(code) < ELF_HEADER.size:
        return f"object code of {len(code)} bytes is shorter than an ELF header"
    (ident, kind, machine, _version, _entry, _program_headers, table, _flags, header_size,
     _program_header_size, _program_header_count, section_header_size, sections,
     names_section) = ELF_HEADER.unpack_from(code)
    if ident[:4] != ELF_MAGIC:
        return f"object code starts {ident[:4]!r}, not ELF"
    if (ident[4], ident[5]) != (ELFCLASS64, ELFDATA2LSB):
        return f"ELF class {ident[4]} and data encoding {ident[5]}, not 64-bit little-endian"
    if kind != ET_REL:
        return f"ELF type {kind}, not a relocatable object"
    if machine != ELF_MACHINE:
        return f"ELF machine {machine} is not this machine ({platform.machine()})"
    if (header_size, section_header_size) != (ELF_HEADER.size, SECTION_HEADER.size):
        return f"ELF header sizes {header_size} and {section_header_size}, not 64 and 64"
    if sections == 0:
        return "ELF object without section headers"
    if names_section >= sections:
        return f"section names in section {names_section} of {sections}"
    if table + sections * SECTION_HEADER.size > len(code):
        return (f"section header table ({sections} at {table}) ends past the object code's "
                f"{len(code)} bytes")
    return None


def ptx_problem(code: bytes) -> str | None:
    """Why `code` is not PTX as LLVM's NVPTX backend writes it, or None: ASCII text
    without NUL bytes whose first directives, after its comment lines, are .version,
    .target sm_NN and .address_size 64, defining at least one kernel. Checks the form
    only: the driver's JIT checks the rest when it loads the module."""
    try:
        text = code.decode("ascii")
    except UnicodeDecodeError as error:
        return f"PTX with a byte that is not ASCII at {error.start}"
    if "\0" in text:
        return "PTX with a NUL byte"
    body = "".join(line + "\n" for line in text.splitlines()
                   if line.strip() and not line.startswith("//"))
    if not PTX_HEAD.match(body):
        return "PTX that does not open with .version, .target sm_NN and .address_size 64"
    if not PTX_ENTRY.search(body):
        return "PTX that defines no kernel (.entry)"
    return None
