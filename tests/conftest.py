"""Test-wide settings: compiled kernels are cached in a temporary directory, never in
the user's ~/.cache/kiln."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_kernel_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("kiln-cache")))
    mp.setenv("KILN_AUTOTUNE", "0")
    yield
    mp.undo()
