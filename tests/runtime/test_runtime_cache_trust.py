"""What the kernel cache trusts (runtime/llvm/cache_trust.py): entries that are not regular files
of this user's, directories that others own or can write, and object code that is not an
ELF object for this machine, or that the ELF loader refuses, are refused. Whatever could
hang or crash the process is loaded by a worker process (runtime_cache_worker.py), which
checks the kernel it gets adds one; a forged entry holds a kernel that does nothing, so
loading it fails that check."""
import os
import stat
import struct

import llvmlite.ir as ir
import pytest

from runtime.llvm import cache
from runtime.llvm.cache_trust import MAX_ENTRY_BYTES
from runtime.llvm.jit import HostJit
import runtime_cache_worker as worker
from elf_mutations import MUTATIONS
from runtime_kernels import RELOCATIONS_KERNEL_RESULTS, add_one_module, object_code, unique_name

OTHER_UID = 54321


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kiln-cache"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("KILN_CACHE_DIR", str(directory))
    monkeypatch.delenv("KILN_CACHE_MAX_BYTES", raising=False)
    return directory


@pytest.fixture(scope="module")
def jit():
    return HostJit()


def entry_path(jit, name: str):
    return cache.cache_dir() / (jit.cache_key(add_one_module(jit, name)) + cache.SUFFIX)


def forged_entry(jit, name: str) -> bytes:
    """A well-formed entry for NAME's add-one kernel whose function does nothing."""
    i64 = ir.IntType(64)
    module = jit.new_module(name)
    kernel = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, i64]),
                         name)
    ir.IRBuilder(kernel.append_basic_block()).ret_void()
    key = jit.cache_key(add_one_module(jit, name))
    return cache.encode(key, cache.Entry((name,), object_code(jit, module)))


def plant_forged(path, jit, name, mode=0o600):
    path.write_bytes(forged_entry(jit, name))
    os.chmod(path, mode)


def as_root(reason: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"only root can {reason}")


def plant_fifo(path, jit, name):
    os.mkfifo(path, 0o600)


def plant_link_to_dev_zero(path, jit, name):
    path.symlink_to("/dev/zero")


def plant_link_to_forged_entry(path, jit, name):
    target = path.parent.parent / "elsewhere.kobj"
    plant_forged(target, jit, name)
    path.symlink_to(target)


def plant_device(path, jit, name):
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("making a device file needs CAP_MKNOD")


def plant_oversized(path, jit, name):
    with open(path, "wb") as f:
        f.truncate(MAX_ENTRY_BYTES + 1)  # sparse: takes no disk
    os.chmod(path, 0o600)


def plant_group_writable(path, jit, name):
    plant_forged(path, jit, name, mode=0o620)


def plant_owned_by_another_user(path, jit, name):
    as_root("give a file to another user")
    plant_forged(path, jit, name)
    os.chown(path, OTHER_UID, -1)


UNSAFE_ENTRIES = {
    "FIFO": (plant_fifo, "is not a regular file"),
    "symlink to /dev/zero": (plant_link_to_dev_zero, "is a symbolic link"),
    "symlink to a forged entry": (plant_link_to_forged_entry, "is a symbolic link"),
    "device file": (plant_device, "is not a regular file"),
    "oversized": (plant_oversized, f"is {MAX_ENTRY_BYTES + 1} bytes, over {MAX_ENTRY_BYTES}"),
    "forged, group-writable": (plant_group_writable,
                               "is writable by group or others (mode 0620)"),
    "forged, another user's": (plant_owned_by_another_user, f"is owned by uid {OTHER_UID},"),
}


@pytest.mark.parametrize("plant, reason", UNSAFE_ENTRIES.values(), ids=UNSAFE_ENTRIES.keys())
def test_an_entry_that_is_not_a_regular_file_only_we_can_write_is_rebuilt(jit, cache_dir,
                                                                           plant, reason):
    name = unique_name()
    path = entry_path(jit, name)
    plant(path, jit, name)
    result = worker.finish(worker.start("load", name, cache_dir=cache_dir))
    assert (result["refused"], result["misses"], result["disk_hits"]) == (1, 1, 0)
    [warning] = result["warnings"]
    assert warning.startswith(f"kiln's kernel cache entry {path} {reason}")
    status = path.lstat()
    assert stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid()
    assert stat.S_IMODE(status.st_mode) == 0o600
    key = jit.cache_key(add_one_module(jit, name))
    assert cache.decode(key, path.read_bytes()).functions == (name,)


def test_a_directory_where_an_entry_should_be_is_refused_and_its_descriptor_closed(
        cache_dir):
    store = cache.KernelCache()
    (cache_dir / ("a" * 64 + cache.SUFFIX)).mkdir()
    open_before = os.listdir("/proc/self/fd")
    with pytest.warns(RuntimeWarning, match="is not a regular file"):
        assert store.read("a" * 64) is None
    assert store.stats.refused == 1 and os.listdir("/proc/self/fd") == open_before


def give_to_another_user(directory):
    as_root("give a directory to another user")
    os.chown(directory, OTHER_UID, -1)


UNTRUSTED_DIRECTORIES = {
    "world-writable": lambda directory: os.chmod(directory, 0o777),
    "world-writable and sticky, like /tmp": lambda directory: os.chmod(directory, 0o1777),
    "group-writable": lambda directory: os.chmod(directory, 0o770),
    "another user's": give_to_another_user,
}


@pytest.mark.parametrize("spoil", UNTRUSTED_DIRECTORIES.values(),
                         ids=UNTRUSTED_DIRECTORIES.keys())
def test_a_directory_others_own_or_can_write_is_neither_loaded_nor_written(jit, cache_dir,
                                                                           spoil):
    name = unique_name()
    path = entry_path(jit, name)
    plant_forged(path, jit, name)
    spoil(cache_dir)
    result = worker.finish(worker.start("load", name, cache_dir=cache_dir))
    assert (result["refused"], result["misses"], result["disk_hits"]) == (1, 1, 0)
    [warning] = result["warnings"]
    assert f"kernel cache directory {cache_dir} is " in warning and "memory only" in warning
    assert [p.name for p in cache_dir.iterdir()] == [path.name]
    assert path.read_bytes() == forged_entry(jit, name)


def test_an_untrusted_directory_warns_once_and_stays_empty(jit, cache_dir):
    os.chmod(cache_dir, 0o777)
    store = cache.KernelCache()
    entry = cache.Entry(("f",), object_code(jit, add_one_module(jit, "f")))
    with pytest.warns(RuntimeWarning) as caught:
        store.write("a" * 64, entry)
        assert store.read("a" * 64) is None
        store.write("b" * 64, entry)
    assert [str(w.message).split(": ")[0] for w in caught] == [
        f"kiln's kernel cache directory {cache_dir} is writable by group or others "
        f"(mode 0777)"]
    assert list(cache_dir.iterdir()) == [] and store.stats.write_failures == 0


def test_the_directory_and_the_parents_it_makes_are_private(jit, tmp_path, monkeypatch):
    directory = tmp_path / "home" / "cache" / "kiln"
    monkeypatch.setenv("KILN_CACHE_DIR", str(directory))
    entry = cache.Entry(("f",), object_code(jit, add_one_module(jit, "f")))
    umask = os.umask(0o022)
    try:
        cache.KernelCache().write("a" * 64, entry)
    finally:
        os.umask(umask)
    made = [tmp_path / "home", tmp_path / "home" / "cache", directory]
    assert [stat.S_IMODE(path.stat().st_mode) for path in made] == [0o700] * 3
    assert stat.S_IMODE((directory / ("a" * 64 + cache.SUFFIX)).stat().st_mode) == 0o600


def cut_in_half(code: bytes) -> bytes:
    return code[: len(code) // 2]


def garbage(code: bytes) -> bytes:
    return bytes(range(256)) * 8


@pytest.mark.parametrize("spoil", [cut_in_half, garbage], ids=["cut in half", "garbage"])
def test_object_code_spoilt_under_a_recomputed_hash_is_rebuilt_not_handed_to_llvm(
        jit, cache_dir, spoil):
    name = unique_name()
    path = entry_path(jit, name)
    key = jit.cache_key(add_one_module(jit, name))
    code = object_code(jit, add_one_module(jit, name))
    path.write_bytes(cache.encode(key, cache.Entry((name,), spoil(code))))
    os.chmod(path, 0o600)
    result = worker.finish(worker.start("load", name, cache_dir=cache_dir))
    assert (result["rebuilt_corrupt"], result["misses"], result["disk_hits"]) == (1, 1, 0)
    assert cache.decode(key, path.read_bytes()).object_code == code


def patched(offset: int, layout: str, value: int):
    def patch(code: bytes) -> bytes:
        spoilt = bytearray(code)
        struct.pack_into("<" + layout, spoilt, offset, value)
        return bytes(spoilt)
    return patch


def in_section(index: int, offset: int, layout: str, value: int):
    """Patch a field of section header `index`."""
    def patch(code: bytes) -> bytes:
        table = struct.unpack_from("<Q", code, 0x28)[0]
        return patched(table + 64 * index + offset, layout, value)(code)
    return patch


OBJECT_DAMAGE = {
    "cut in half": (cut_in_half, "ends past the object code"),
    "garbage": (garbage, "not ELF"),
    "shorter than an ELF header": (lambda code: code[:40], "shorter than an ELF header"),
    "32-bit": (patched(4, "B", 1), "not 64-bit little-endian"),
    "big-endian": (patched(5, "B", 2), "not 64-bit little-endian"),
    "a shared object": (patched(0x10, "H", 3), "not a relocatable object"),
    "for another machine": (patched(0x12, "H", 40), "is not this machine"),
    "odd header size": (patched(0x34, "H", 52), "ELF header sizes"),
    "no sections": (patched(0x3C, "H", 0), "without section headers"),
    "names past the sections": (patched(0x3E, "H", 0xFFFF), "section names in section"),
    "section table past the end": (patched(0x28, "Q", 1 << 40), "section header table"),
    "a section past the end": (in_section(1, 0x20, "Q", 1 << 40), "section 1 ends past"),
    "a link past the sections": (in_section(1, 0x28, "I", 999), "links to section 999"),
}


@pytest.mark.parametrize("damage, problem", OBJECT_DAMAGE.values(), ids=OBJECT_DAMAGE.keys())
def test_object_code_that_is_not_an_elf_object_for_this_machine_is_corrupt(jit, damage,
                                                                           problem):
    code = object_code(jit, add_one_module(jit, "checked"))
    assert cache.decode("k", cache.encode("k", cache.Entry(("checked",), code))).object_code \
        == code
    with pytest.raises(cache.CorruptEntry, match=problem):
        cache.decode("k", cache.encode("k", cache.Entry(("checked",), damage(code))))


def test_an_entry_hashed_again_over_a_damaged_object_is_rebuilt_and_never_reaches_mcjit(
        cache_dir):
    """The relocations kernel's entry, its object damaged and its hash recomputed, loaded
    by a fresh engine in one worker process (a crash fails the test; the worker's stderr
    names the case): each of elf_mutations' targeted mutations (a relocation's offset,
    symbol, type or addend, a symbol's name, value, section or kind, section headers,
    the section header table's place and size) is refused by the ELF loader and compiled
    again, the entry replaced; 24 seeded random byte flips of the ELF header, section
    headers and symbol table are either that or harmless (the kernel computes what it
    should); MCJIT is never made. Eight flips of the relocation table are loaded but not
    run where they pass: an addend or symbol index changed within its section's bounds
    is well-formed code computing something else, which no structural check can tell
    from LLVM's (runtime/llvm/cache_trust.py: such a file is trusted because only this user
    could have written it)."""
    outcomes = worker.finish(worker.start("mutations", "2027", cache_dir=cache_dir))
    targeted = {case: outcomes[case] for case in MUTATIONS}
    assert {case: o for case, o in targeted.items() if o["outcome"] != "rebuilt"} == {}
    assert {case: o for case, o in outcomes.items() if o["engine"] or o["outcome"] not in (
        "rebuilt", "loaded") or o["results"] not in (RELOCATIONS_KERNEL_RESULTS, None)} == {}
    run = [o for o in outcomes.values() if o["results"] is not None]
    assert len(outcomes) - len(run) <= worker.RANDOM_FLIPS["relocations"]
