"""eager.Generator and the default generator: seeds, streams of their own, saved state."""
import pytest

import eager


def test_manual_seed_returns_the_generator_and_repeats_its_numbers():
    g = eager.Generator()
    assert g.manual_seed(42) is g and g.initial_seed() == 42
    first = eager.randn(4, generator=g).tolist() + eager.randperm(6, generator=g).tolist()
    g.manual_seed(42)
    assert eager.randn(4, generator=g).tolist() + eager.randperm(6, generator=g).tolist() == first
    assert eager.manual_seed(3) is eager.default_generator and eager.initial_seed() == 3


def test_a_generator_is_a_stream_of_its_own():
    eager.manual_seed(0)
    plain = eager.rand(3).tolist()
    eager.manual_seed(0)
    eager.rand(5, generator=eager.Generator().manual_seed(9))  # does not touch the default
    assert eager.rand(3).tolist() == plain
    eager.nn.init.normal_(eager.empty(3), generator=eager.Generator().manual_seed(1))
    eager.manual_seed(0)
    assert eager.rand(3).tolist() == plain


def test_state_saved_and_restored_gives_the_same_numbers_again():
    state = eager.get_rng_state()
    assert state.dtype == eager.int64 and state.dim() == 1
    ahead = eager.randint(0, 100, (8,)).tolist()
    eager.set_rng_state(state)
    assert eager.randint(0, 100, (8,)).tolist() == ahead
    g = eager.Generator().manual_seed(5)
    saved = g.get_state()
    values = eager.rand(2, generator=g).tolist()
    assert eager.rand(2, generator=g.set_state(saved)).tolist() == values


def test_seeds_are_64_bit_and_bad_states_or_generators_are_named():
    g = eager.Generator()
    assert g.manual_seed(-1).initial_seed() == 2 ** 64 - 1
    assert 0 <= g.seed() < 2 ** 64
    with pytest.raises(TypeError, match="1-D int64 tensor get_state"):
        g.set_state(eager.zeros(3))
    with pytest.raises(RuntimeError, match="not a state get_state"):
        g.set_state(eager.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="generator must be an eager.Generator, not int"):
        eager.rand(2, generator=7)


def test_importing_eager_does_not_load_numpys_random_module():
    """The default generator makes numpy's at its first draw (~5 ms of `import eager`)."""
    import subprocess
    import sys
    code = ("import sys, eager; print('numpy.random' in sys.modules); "
            "eager.rand(1); print('numpy.random' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "True"]
