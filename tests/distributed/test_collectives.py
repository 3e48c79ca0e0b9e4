"""eager.distributed's collectives under `mpiexec -n 2` and `-n 3`, against numpy
(programs/collectives.py), and what the package does without a process group."""
import pytest

import eager
import eager.distributed as dist
from tests.distributed.mpi import launch, requires_mpi, succeeded


@requires_mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_matches_numpy_on_every_rank(ranks):
    out = succeeded(launch("collectives", ranks))
    for rank in range(ranks):
        assert f"rank {rank} of {ranks}: collectives match numpy" in out


def test_importing_eager_distributed_does_not_start_mpi():
    import subprocess
    import sys
    code = "import eager, eager.distributed, sys; print('mpi4py.MPI' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_collectives_without_a_process_group_say_so():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(eager.ones(2))
    with pytest.raises(ValueError, match="init_process_group"):
        dist.get_rank()
