"""runtime/llvm/elf_loader.py: object code the host JIT emits, loaded without LLVM's engine
(the MCJIT engine is made only for what the loader does not take)."""
import ctypes

import numpy as np
import pytest

from runtime.llvm import elf_loader
from runtime.llvm.elf_object import SHT_RELA, ElfObject
from runtime.llvm.jit import HostJit
from runtime_kernels import (ADD_ONE, RELOCATIONS_KERNEL_RESULTS, add_one_module, object_code,
                             relocations_kernel_results, relocations_module, unique_name)

pytestmark = pytest.mark.skipif(not elf_loader.supported(),
                                reason="the ELF loader runs on Linux on x86-64 only")


@pytest.fixture
def jit(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return HostJit()


def test_a_loaded_kernel_runs_and_no_engine_is_made(jit):
    name = unique_name()
    address = jit.load(add_one_module(jit, name), [name])[name]
    x = np.zeros(8, np.float32)
    ADD_ONE(address)(x.ctypes.data, 2, 5)
    np.testing.assert_array_equal(x, [0, 0, 1, 1, 1, 0, 0, 0])
    assert "engine" not in jit.__dict__ and jit.loader.symbols[name] == address


def test_constants_calls_into_libc_and_external_addresses_are_relocated(jit):
    """A constant table (.rodata, PC-relative), a call to libc's strlen (out of 32-bit
    reach: through a stub) and strlen's address (through a GOT slot)."""
    name = unique_name("relocations")
    addresses = jit.load(relocations_module(name))
    assert relocations_kernel_results(addresses, name) == RELOCATIONS_KERNEL_RESULTS


def test_a_module_calls_a_function_an_earlier_module_defined(jit):
    first = unique_name()
    jit.load(add_one_module(jit, first))
    caller = unique_name("caller")
    text = f"""
declare void @"{first}"(ptr, i64, i64)
define void @"{caller}"(ptr %x) {{
  call void @"{first}"(ptr %x, i64 0, i64 3)
  ret void
}}
"""
    x = np.zeros(4, np.float32)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(jit.load(text)[caller])(x.ctypes.data)
    np.testing.assert_array_equal(x, [1, 1, 1, 0])


def test_an_object_the_loader_refuses_goes_to_the_engine_and_still_links(jit):
    """A writable global: the loader maps no read-write pages, so MCJIT loads it."""
    name = unique_name("counter")
    text = f"""
@count = internal global i64 0
define i64 @"{name}"() {{
  %n = load i64, ptr @count
  %next = add i64 %n, 1
  store i64 %next, ptr @count
  ret i64 %next
}}
"""
    with pytest.raises(elf_loader.UnsupportedObject, match="writable"):
        elf_loader.Loader().load(object_code(jit, text))
    counter = ctypes.CFUNCTYPE(ctypes.c_int64)(jit.load(text)[name])
    assert [counter(), counter()] == [1, 2] and "engine" in jit.__dict__
    assert jit.address(name) == jit.loader.symbols[name]


def test_a_name_defined_twice_is_refused(jit):
    name = unique_name()
    code = object_code(jit, add_one_module(jit, name))
    loader = elf_loader.Loader()
    loader.load(code)
    with pytest.raises(ValueError, match=name):
        loader.load(code)


def test_a_relocation_outside_its_section_is_refused_before_anything_is_written(jit):
    code = bytearray(object_code(jit, relocations_module(unique_name("relocations"))))
    obj = ElfObject(bytes(code))
    rela = next(s for s in obj.sections if s.kind == SHT_RELA and obj.sections[s.info].loaded)
    code[rela.offset:rela.offset + 8] = (1 << 40).to_bytes(8, "little")  # the first one's
    with pytest.raises(elf_loader.UnsupportedObject, match="outside its section"):
        elf_loader.Loader().load(bytes(code))
