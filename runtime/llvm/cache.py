"""The kernel cache: compiled object code kept in memory for this process and on disk for
the next one; CUDA kernels' PTX is kept the same way (runtime/cuda/nvptx.py's ptx_cache, its
entries checked as PTX text rather than as ELF objects), in the same directory and under
the same size cap.

A kernel is keyed by a hash of its LLVM IR text (or of a spec naming what its IR holds,
runtime/llvm/jit.py's load_spec), the target (triple, CPU name and features), the LLVM
version and a version of the code (kiln's, or a hash of the code generators' source), so a
change to any of them compiles afresh. The memory tier maps a key to whatever the engine
made of the entry (function addresses); the disk tier holds one file per key under
`$KILN_CACHE_DIR` (default `~/.cache/kiln`; with no home, HOME unset or empty and no passwd
entry, there is no disk tier, after one warning):

    header  magic 'KILNOBJ1' | meta length u32 | object length u64 | SHA-256 of the rest
    meta    JSON: {"key": ..., "functions": [...]}
    object  the bytes of `TargetMachine.emit_object`

A file that is short, has a bad header, a hash mismatch, another key's meta or object code
that is not structurally an ELF object for this machine (for PTX: not the PTX text
kiln emits), or that the loader refuses (get_or_build's CorruptEntry from `load`), is
never handed to LLVM (or the CUDA driver) (which could crash the process on garbage);
it is rebuilt and rewritten. What the cache trusts,
and why, is in runtime/llvm/cache_trust.py: entries are read only from a directory and files
that this user owns and nobody else can write, and only from regular files of a bounded
size. Writes go to a temporary file in the same directory and are renamed over the
entry, so readers see an old entry, a new one or none, and processes racing to write
the same entry only replace identical bytes. They are not fsynced (2-5 ms an entry
here, on every kernel a cold process compiles): what a crash can leave, an empty or
partly written file under the entry's name, fails the header's length or SHA-256 and is
rebuilt like any damaged entry. The directory is kept under
`$KILN_CACHE_MAX_BYTES` (default 256 MiB, read when a cache is made) by removing the least
recently used entries; a hit sets an entry's mtime, because atime is unreliable (noatime,
relatime mounts).

    python -m runtime.llvm.cache info     # directory, entries, bytes
    python -m runtime.llvm.cache clear    # remove every entry
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pwd
import struct
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

from runtime.llvm.cache_trust import (UntrustedEntry, directory_problem,
                                      make_private_directories, object_problem,
                                      read_entry_file)

PayloadCheck = Callable[[bytes], str | None]  # why object code must not be loaded, or None

FORMAT = "kiln-cpu-object-1"
MAGIC = b"KILNOBJ1"
HEADER = struct.Struct("<8sIQ32s")
SUFFIX = ".kobj"
TMP_PREFIX = ".tmp-"
DEFAULT_MAX_BYTES = 256 << 20
STALE_TMP_SECONDS = 3600  # a temporary file this old belongs to a writer that died

Value = TypeVar("Value")


class CorruptEntry(Exception):
    """A cache file that must not be loaded; the message says what is wrong with it."""


@dataclass(frozen=True)
class Entry:
    """What a cache file holds: the names of the functions the object code defines, and
    the object code; and whether it was read from a file (which the cache trusts only as
    far as runtime/llvm/cache_trust.py says) rather than just built."""
    functions: tuple[str, ...]
    object_code: bytes
    from_disk: bool = field(default=False, compare=False)


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    rebuilt_corrupt: int = 0  # also counted in misses
    refused: int = 0  # entries not read because of what or where they are; also in misses
    evictions: int = 0
    write_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CacheInfo:
    directory: Path | None
    entries: int
    bytes: int
    max_bytes: int


def cache_dir() -> Path | None:
    """`$KILN_CACHE_DIR`, or `~/.cache/kiln`; None where that names a home there is none
    of (home_directory). Read at every use, so tests can point it elsewhere at any time."""
    configured = os.environ.get("KILN_CACHE_DIR") or "~/.cache/kiln"
    if configured == "~" or configured.startswith("~/"):
        home = home_directory()
        return home / configured[2:] if home is not None else None
    try:
        return Path(configured).expanduser()  # ~user
    except RuntimeError:  # a user without a passwd entry
        return None


def home_directory() -> Path | None:
    """`$HOME`, or this user's passwd entry's where HOME is unset or empty (Python would
    take an empty HOME for /); None where neither names one, as in a container running a
    uid that has no passwd entry."""
    home = os.environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return None
    return Path(home) if home else None


def max_bytes() -> int:
    """`$KILN_CACHE_MAX_BYTES`, or 256 MiB."""
    configured = os.environ.get("KILN_CACHE_MAX_BYTES")
    if not configured:
        return DEFAULT_MAX_BYTES
    if not configured.strip().isdigit():
        raise ValueError(f"KILN_CACHE_MAX_BYTES must be a whole number of bytes, 0 or more; "
                         f"got {configured!r}")
    return int(configured)


@functools.cache
def kiln_version() -> str:
    """kiln's version from its installed metadata, else from the checkout's
    pyproject.toml, else 'unknown'. (importlib.metadata costs ~15 ms to import, so only
    its users pay it: CPU kernels' keys carry jit.generator_version instead.)"""
    import importlib.metadata
    try:
        return importlib.metadata.version("kiln")
    except importlib.metadata.PackageNotFoundError:
        pass
    import tomllib
    try:
        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def kernel_key(ir_text: str, *, triple: str, cpu: str, features: str, version: str,
               llvm_version: str = "", kind: str = FORMAT) -> str:
    """Hex SHA-256 naming the object code that `ir_text` compiles to on this target;
    `kind` names what an entry holds (CPU object code, PTX), so kinds never share a key."""
    parts = [kind, triple, cpu, features, version, llvm_version, ir_text]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def encode(key: str, entry: Entry) -> bytes:
    meta = json.dumps({"key": key, "functions": list(entry.functions)}).encode()
    digest = hashlib.sha256(meta + entry.object_code).digest()
    return HEADER.pack(MAGIC, len(meta), len(entry.object_code), digest) + meta \
        + entry.object_code


def decode(key: str, data: bytes, check: PayloadCheck = object_problem) -> Entry:
    """The entry in `data`, or CorruptEntry if it is not exactly a valid entry for `key`
    whose object code passes `check` (by default cache_trust.object_problem: an ELF
    object for this machine)."""
    if len(data) < HEADER.size:
        raise CorruptEntry(f"{len(data)} bytes is shorter than the header")
    magic, meta_length, object_length, digest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptEntry(f"bad magic {magic!r}")
    if len(data) != HEADER.size + meta_length + object_length:
        raise CorruptEntry(f"{len(data)} bytes where the header says "
                           f"{HEADER.size + meta_length + object_length}")
    body = data[HEADER.size:]
    if hashlib.sha256(body).digest() != digest:
        raise CorruptEntry("SHA-256 of the contents does not match the header")
    try:
        meta = json.loads(body[:meta_length])
        functions = tuple(meta["functions"])
        stored_key = meta["key"]
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptEntry(f"unreadable meta: {error}")
    if stored_key != key:
        raise CorruptEntry(f"holds key {stored_key!r}")
    problem = check(body[meta_length:])
    if problem is not None:
        raise CorruptEntry(problem)
    return Entry(functions, body[meta_length:], from_disk=True)


class KernelCache(Generic[Value]):
    """Memory and disk tiers around a build step. One per engine: the memory tier holds
    values (addresses) that only mean something in that engine. `check` says why an
    entry's object code must not be loaded, or None (decode's default: ELF objects).

    Each key has its own lock while it is read or built, so concurrent requests for a key
    build it once and different keys build at once in different threads (`load` must be
    safe to call from several threads: the JIT serialises its linking).
    The size cap is read here, so a bad `$KILN_CACHE_MAX_BYTES` fails before anything is
    compiled; each directory is checked (runtime/llvm/cache_trust.py) when first used.
    """

    def __init__(self, directory: Path | str | None = None,
                 check: PayloadCheck = object_problem):
        self._directory = Path(directory) if directory is not None else None
        self._check = check
        self._memory: dict[str, Value] = {}
        self._lock = threading.RLock()  # guards _building, stats and _trusted
        self._building: dict[str, threading.RLock] = {}  # a lock per key being looked up
        self._trusted: dict[Path, bool] = {}
        self.max_bytes = max_bytes()
        self.stats = CacheStats()

    @property
    def directory(self) -> Path | None:
        return self._directory if self._directory is not None else cache_dir()

    def path(self, key: str) -> Path | None:
        """The file of `key`'s entry; None where there is no cache directory (cache_dir),
        after a warning, the process's first."""
        directory = self.directory
        if directory is None:
            _warn_without_directory()
            return None
        return directory / (key + SUFFIX)

    def get_or_build(self, key: str, build: Callable[[], Entry],
                     load: Callable[[Entry], Value]) -> Value:
        """The value for `key`: from memory; else `load` of the disk entry; else `load`
        of `build()`, which is then written to disk. A disk entry that `load` refuses
        (CorruptEntry) is built and written again, like a damaged one."""
        if key in self._memory:
            self._count("memory_hits")
            return self._memory[key]
        with self._lock:
            key_lock = self._building.setdefault(key, threading.RLock())
        try:
            with key_lock:
                if key in self._memory:
                    self._count("memory_hits")
                    return self._memory[key]
                entry = self.read(key)
                if entry is not None:
                    try:
                        value = load(entry)
                        self._count("disk_hits")
                    except CorruptEntry:
                        self._count("rebuilt_corrupt")
                        entry = None
                if entry is None:
                    self._count("misses")
                    entry = build()
                    self.write(key, entry)
                    value = load(entry)
                self._memory[key] = value
                return value
        finally:
            with self._lock:
                self._building.pop(key, None)

    def _count(self, statistic: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.stats, statistic, getattr(self.stats, statistic) + n)

    def read(self, key: str) -> Entry | None:
        """The disk entry for `key`, or None if there is none, it is refused (counted in
        stats.refused; a refused file in a trusted directory also warns, as nothing kiln
        writes is ever refused) or it is corrupt (counted in stats.rebuilt_corrupt); the
        caller then builds and writes it again."""
        path = self.path(key)
        if path is None:
            return None
        try:
            if not self._trusts(path.parent):
                if os.path.lexists(path):
                    self._count("refused")
                return None
            data = read_entry_file(path)
        except UntrustedEntry as refusal:
            self._count("refused")
            warnings.warn(f"kiln's kernel cache entry {path} {refusal}: it is rebuilt, not "
                          f"loaded", RuntimeWarning)
            return None
        except OSError:
            return None
        try:
            entry = decode(key, data, self._check)
        except CorruptEntry:
            self._count("rebuilt_corrupt")
            return None
        _touch(path)
        return entry

    def write(self, key: str, entry: Entry) -> None:
        """Atomically write the entry, then evict down to the size cap; nothing is written
        to an untrusted directory. A cache that cannot be written (read-only, disk full)
        only costs a rebuild next time."""
        path = self.path(key)
        if path is None:
            return
        try:
            if not self._trusts(path.parent):
                return
            _write_atomically(path, encode(key, entry))
        except OSError:
            self._count("write_failures")
            return
        self._count("evictions", evict(path.parent, self.max_bytes, keep=path))

    def _trusts(self, directory: Path) -> bool:
        """Whether entries in `directory` may be read and written, decided on its first use
        (creating it 0700 if missing); the first refusal warns. OSError if it cannot be
        created or is not a directory, and then it is asked again next time."""
        with self._lock:  # a directory is checked, and warned about, once
            if directory not in self._trusted:
                problem = directory_problem(directory)
                if problem is not None:
                    warnings.warn(f"kiln's kernel cache directory {directory} is {problem}: its "
                                  f"entries are not loaded and this process keeps the kernels "
                                  f"it compiles in memory only", RuntimeWarning)
                self._trusted[directory] = problem is None
            return self._trusted[directory]


@functools.cache  # once per process: every cache lacks the same home
def _warn_without_directory() -> None:
    configured = os.environ.get("KILN_CACHE_DIR")
    why = (f"KILN_CACHE_DIR={configured!r} names a home directory there is none of"
           if configured else f"HOME is unset or empty and uid {os.getuid()} has no passwd "
                              f"entry")
    warnings.warn(f"kiln's kernel cache has no directory: {why}, so this process keeps the "
                  f"kernels it compiles in memory only (KILN_CACHE_DIR names a directory "
                  f"for them)", RuntimeWarning)


def _write_atomically(path: Path, data: bytes) -> None:
    import tempfile  # ~1 ms to import, paid by processes that write entries only
    make_private_directories(path.parent)
    descriptor, temporary = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        _remove(Path(temporary))
        raise


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> int:
    """Bytes freed by removing `path`; 0 if another process removed it first."""
    try:
        size = path.stat().st_size
        path.unlink()
        return size
    except OSError:
        return 0


def _entries(directory: Path) -> list[tuple[Path, os.stat_result]]:
    found = []
    try:
        paths = list(directory.iterdir())
    except OSError:
        return found
    for path in paths:
        if path.suffix == SUFFIX and not path.name.startswith(TMP_PREFIX):
            try:
                found.append((path, path.stat()))
            except OSError:
                pass
    return found


def evict(directory: Path, limit: int, keep: Path | None = None) -> int:
    """Remove least recently used entries (oldest mtime first) until the entries total at
    most `limit` bytes, never `keep` (the entry just written); also remove temporary files
    left by writers that died. Returns how many entries were removed."""
    now = time.time()
    for path in directory.glob(TMP_PREFIX + "*"):
        try:
            if now - path.stat().st_mtime > STALE_TMP_SECONDS:
                path.unlink()
        except OSError:
            pass
    entries = sorted(_entries(directory), key=lambda item: item[1].st_mtime)
    total = sum(stat.st_size for _, stat in entries)
    removed = 0
    for path, stat in entries:
        if total <= limit:
            break
        if path == keep:
            continue
        if _remove(path):
            removed += 1
        total -= stat.st_size
    return removed


def info(directory: Path | str | None = None) -> CacheInfo:
    """What the disk cache holds now (nothing where there is no directory: cache_dir)."""
    directory = Path(directory) if directory is not None else cache_dir()
    entries = _entries(directory) if directory is not None else []
    return CacheInfo(directory, len(entries), sum(stat.st_size for _, stat in entries),
                     max_bytes())


def clear(directory: Path | str | None = None) -> int:
    """Remove every cache entry (and temporary file) from the disk cache; returns how many
    entries were removed. Other files in the directory are left alone. Kernels already
    loaded into an engine stay loaded: MCJIT cannot unload them."""
    directory = Path(directory) if directory is not None else cache_dir()
    if directory is None:
        return 0
    for path in directory.glob(TMP_PREFIX + "*"):
        _remove(path)
    return sum(1 for path, _ in _entries(directory) if _remove(path))


def main(argv: list[str] | None = None) -> int:
    import argparse  # here: the command line only, not the kernel cache's users
    parser = argparse.ArgumentParser(prog="python -m runtime.llvm.cache",
                                     description="Inspect or empty kiln's kernel cache.")
    parser.add_argument("command", choices=["info", "clear"])
    args = parser.parse_args(argv)
    if args.command == "clear":
        directory = cache_dir()
        before = info(directory)
        removed = clear(directory)
        print(f"removed {removed} entries ({before.bytes} bytes) from {directory}")
    else:
        now = info()
        print(f"directory: {now.directory}\nentries:   {now.entries}\n"
              f"bytes:     {now.bytes} (cap {now.max_bytes})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
