"""runtime/llvm/elf_object.py: what the ELF loader checks before it maps anything, on a real
object damaged one field at a time (elf_mutations.py). The loads that could crash a
process, of damaged entries through the kernel cache, run in a worker process
(test_runtime_cache_trust.py)."""
import pytest

from runtime.llvm import elf_loader
from runtime.llvm.elf_object import UnsupportedObject
from runtime.llvm.jit import HostJit
from elf_mutations import KERNEL, MUTATIONS
from runtime_kernels import (RELOCATIONS_KERNEL_RESULTS, object_code, relocations_kernel_results,
                             relocations_module)

pytestmark = pytest.mark.skipif(not elf_loader.supported(),
                                reason="the ELF loader runs on Linux on x86-64 only")
FUNCTIONS = [KERNEL, KERNEL + "_strlen"]


@pytest.fixture(scope="module")
def code():
    return object_code(HostJit(), relocations_module(KERNEL))


@pytest.fixture
def nothing_mapped(monkeypatch):
    def refuse(size):
        raise AssertionError(f"{size} bytes were mapped for an object that is refused")
    monkeypatch.setattr(elf_loader, "_map", refuse)


def test_the_undamaged_object_loads_and_runs(code):
    addresses = elf_loader.Loader().load(code, FUNCTIONS)
    assert relocations_kernel_results(addresses, KERNEL) == RELOCATIONS_KERNEL_RESULTS


@pytest.mark.parametrize("mutation", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_a_damaged_field_is_refused_before_anything_is_mapped(code, mutation, nothing_mapped):
    with pytest.raises(UnsupportedObject, match=mutation.problem):
        elf_loader.Loader().load(mutation.mutate(code), FUNCTIONS)


def test_an_object_lacking_a_function_it_should_define_is_refused(code, nothing_mapped):
    with pytest.raises(UnsupportedObject, match="defines no function named 'missing'"):
        elf_loader.Loader().load(code, FUNCTIONS + ["missing"])

