"""runtime/fastcall.py and fastcall_ir.py: native functions called as Python builtins, on
one built here: `add_words(x, y)` adds self's two words to x's first two int64 elements and
returns y."""
import sys

import numpy as np
import pytest

from runtime import addresses, fastcall, fastcall_ir, launchers

pytestmark = pytest.mark.skipif(not fastcall.available(),
                                reason="runtime.fastcall needs CPython with a GIL")


def _add_words(words):
    import llvmlite.ir as ir

    from runtime.llvm.jit import host_jit
    jit = host_jit()
    module = jit.new_module("fastcall_test_add_words")
    entry = fastcall_ir.Entry(module, "fastcall_test_add_words")
    b = entry.b
    x, _ = entry.arrays(2)
    target = b.bitcast(x, fastcall_ir.I64.as_pointer())
    for index, word in enumerate(entry.words(2)):
        slot = b.gep(target, [ir.Constant(fastcall_ir.I64, index)])
        b.store(b.add(b.load(slot), word), slot)
    entry.give(1)
    address = jit.load(module)["fastcall_test_add_words"]
    return fastcall.builtin(address, "add_words", words)


def test_a_builtin_reads_arrays_and_its_words_and_returns_a_new_reference():
    add_words = _add_words((5, -7))
    x, y = np.array([1, 2, 3], np.int64), np.zeros(4)
    before = sys.getrefcount(y)
    result = add_words(x[1:], y)  # a view: its own data pointer
    assert result is y and sys.getrefcount(y) == before + 1
    del result
    assert sys.getrefcount(y) == before
    assert x.tolist() == [1, 7, -4]
    assert add_words.__name__ == "add_words"


def test_the_wrong_number_of_arguments_is_an_error_that_names_the_function():
    add_words = _add_words((0, 0))
    x = np.zeros(2, np.int64)
    for args in ((x,), (x, x, x), ()):
        with pytest.raises(TypeError, match=r"fastcall_test_add_words\(\) takes 2 arrays"):
            add_words(*args)
    assert x.tolist() == [0, 0]


def test_the_array_layout_is_the_one_numpy_reports():
    x = np.arange(10.0)[3:]
    assert addresses.ARRAY_DATA_OFFSET > 0
    import ctypes
    found = ctypes.c_void_p.from_address(id(x) + addresses.ARRAY_DATA_OFFSET).value
    assert found == x.__array_interface__["data"][0]


def _recorder_kernel() -> int:
    """A fastcall_ir.KERNEL that writes what it was called with into the first data
    pointer's memory: the second data pointer, offsets, strides, then the four ranges."""
    import llvmlite.ir as ir

    from runtime.llvm.jit import host_jit
    from runtime.llvm.toolkit import I8P, I64, define
    jit = host_jit()
    module = jit.new_module("fastcall_test_recorder")
    fn, b = define(module, "fastcall_test_recorder", fastcall_ir.KERNEL)
    table = b.bitcast(fn.args[0], I8P.as_pointer())
    out = b.bitcast(b.load(table), I64.as_pointer())
    second = b.load(b.gep(table, [ir.Constant(I64, 1)]))
    values = [b.ptrtoint(second, I64), b.ptrtoint(fn.args[1], I64),
              b.ptrtoint(fn.args[2], I64), *fn.args[3:]]
    for index, value in enumerate(values):
        b.store(value, b.gep(out, [ir.Constant(I64, index)]))
    b.ret_void()
    return jit.load(module)["fastcall_test_recorder"]


def test_a_launcher_calls_a_kernel_over_every_row_with_the_pointers_given():
    launch = launchers.launcher(_recorder_kernel(), 2, offsets=1111, strides=2222, rows=33,
                               inner=44)
    record = np.zeros(7, np.int64)
    other = np.zeros(3)[1:]  # the output: an array, its own data pointer read
    argument = record.ctypes.data
    assert launch(argument, other) == argument
    assert record.tolist() == [other.ctypes.data, 1111, 2222, 0, 33, 0, 44]
    with pytest.raises(TypeError, match=r"kiln_launch_2\(\) takes 1 ints and 1 arrays"):
        launch(argument)


def test_the_address_reader_gives_numpys_data_pointer_as_a_new_int():
    read = launchers.address_reader()
    base = np.arange(10.0)
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    for a in (base, base[3:], base[::-2], frozen, np.empty(0), np.zeros((3, 0))):
        assert read(a) == a.__array_interface__["data"][0]
    before = sys.getrefcount(base)
    assert read(base) == read(base) and sys.getrefcount(base) == before
    with pytest.raises(TypeError, match=r"kiln_address\(\) takes 1 arrays"):
        read(base, base)


def test_tensors_read_their_addresses_natively_once_a_kernel_launched(monkeypatch):

    import eager
    from runtime.cpu import launch
    launch._read_addresses_natively()
    assert addresses._native_address is launchers.address_reader()
    x = eager.arange(12.0).reshape(3, 4)[1:, ::2]
    assert x.data_ptr() == x.numpy().__array_interface__["data"][0]
    calls = []
    monkeypatch.setattr(addresses, "_native_address", lambda a: calls.append(a) or 7)
    assert eager.ones(3).data_ptr() == 7 and len(calls) == 1
