"""runtime/pool.py: the native thread pool, driven through native test functions built
here (a record is a few i64 slots; see `items`)."""
import multiprocessing
import os
import threading
import time

import llvmlite.ir as ir
import numpy as np
import pytest

from runtime import pool as native_pool

pytestmark = pytest.mark.skipif(not native_pool.available(),
                                reason="runtime.pool needs Linux on x86-64")
I64 = ir.IntType(64)


def _items():
    """Two native item functions, fn(record, worker):
    count:  record[0] += 1 (atomically), record[1] = worker, then `record[2]` pause
            instructions (work that takes time)
    copy:   record[1] = *(i64 *)record[0] (reads a value another item wrote)"""
    from runtime.llvm.jit import host_jit
    jit = host_jit()
    module = jit.new_module("pool_test_items")
    pause = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
    functions = {}
    for name in ("count", "copy"):
        fn = ir.Function(module, native_pool.ITEM, f"pool_test_{name}")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        record = b.bitcast(fn.args[0], I64.as_pointer())
        slot = lambda i: b.gep(record, [ir.Constant(I64, i)])  # noqa: E731
        if name == "count":
            b.atomic_rmw("add", slot(0), ir.Constant(I64, 1), "seq_cst")
            b.store(fn.args[1], slot(1))
            with b.if_then(b.icmp_signed(">", b.load(slot(2)), ir.Constant(I64, 0))):
                counter = b.alloca(I64)
                b.store(b.load(slot(2)), counter)
                head = b.append_basic_block("head")
                body = b.append_basic_block("body")
                done = b.append_basic_block("done")
                b.branch(head)
                b.position_at_end(head)
                left = b.load(counter)
                b.cbranch(b.icmp_signed(">", left, ir.Constant(I64, 0)), body, done)
                b.position_at_end(body)
                b.call(pause, [])
                b.store(b.sub(left, ir.Constant(I64, 1)), counter)
                b.branch(head)
                b.position_at_end(done)
        else:
            source = b.inttoptr(b.load(slot(0)), I64.as_pointer())
            b.store(b.load_atomic(source, "acquire", 8), slot(1))
        b.ret_void()
        functions[name] = f"pool_test_{name}"
    addresses = jit.load(module)
    return {name: addresses[symbol] for name, symbol in functions.items()}


ITEMS = _items() if native_pool.available() else {}


def records(count: int, pauses: int = 0) -> np.ndarray:
    table = np.zeros((count, 3), np.int64)
    table[:, 2] = pauses
    return table


def listed(function: str, table: np.ndarray) -> tuple:
    return ITEMS[function], table.ctypes.data, len(table), table.strides[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_record_runs_once(threads):
    table = records(1000)
    native_pool.run_items(None, listed("count", table), threads)
    assert (table[:, 0] == 1).all()
    assert set(table[:, 1]) <= set(range(threads))


def test_second_list_starts_after_the_first_is_done():
    for _ in range(20):
        first = records(64, pauses=200)
        then = records(64)
        then[:, 0] = first.ctypes.data + np.arange(64) * first.strides[0]  # each reads one
        native_pool.run_items(listed("count", first), listed("copy", then), 2)
        assert (first[:, 0] == 1).all() and (then[:, 1] == 1).all()


def test_workers_take_part_when_there_is_work():
    table = records(400, pauses=20000)  # about 20 ms of work in all
    native_pool.run_items(None, listed("count", table), 2)
    assert (table[:, 0] == 1).all()
    assert set(table[:, 1]) == {0, 1}


def test_callers_on_several_threads_share_the_pool():
    tables = [records(300, pauses=100) for _ in range(4)]
    threads = [threading.Thread(target=native_pool.run_items,
                                args=(None, listed("count", t), 2)) for t in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all((t[:, 0] == 1).all() for t in tables)


def test_an_idle_pool_sleeps():
    native_pool.run_items(None, listed("count", records(10)), 2)
    time.sleep(native_pool.YIELD_CYCLES / 1e8)  # past the spinning and yielding
    before = os.times()
    time.sleep(0.5)
    after = os.times()
    used = after.user - before.user + after.system - before.system
    assert used < 0.1, f"the pool's workers used {used:.2f} s of CPU while idle"


def _in_child(queue):
    table = records(100)
    native_pool.run_items(None, listed("count", table), 2)
    queue.put(bool((table[:, 0] == 1).all()))


def test_a_forked_child_gets_a_pool_of_its_own():
    native_pool.run_items(None, listed("count", records(10)), 2)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=5)


def test_the_current_cell_holds_the_latest_pool_for_native_code():
    import ctypes
    made = native_pool.pool(2)
    cell = ctypes.c_int64.from_address(native_pool.current_cell())
    assert cell.value == native_pool.pool(1).address == made.address
