"""sin, cos, tan and sinc on CUDA tensors (a GPU where the driver finds one, else the
emulated device): their kernels reduce every argument themselves, huge ones by
Payne-Hanek (runtime/cpu/vmath_payne_hanek.py), so the values are the CPU's (numpy's
there) within vmath's bound, up to the largest finite values, with inf and nan giving
nan."""
import numpy as np
import pytest

import compiler
import eager
import test_cuda_tensors
from tests.compiler.value_checks import not_native

gpu = test_cuda_tensors.gpu  # the autouse fixture: a GPU, else an emulated device

ARGUMENTS = [0.0, -0.0, 0.5, -3.0, 100.25, 1e5, 2.0 ** 40, -1e22, 1e30, 3.0e38,
             6381956970095103 * 2.0 ** 797, -1e300, 1.7976931348623157e308, np.inf, -np.inf,
             np.nan]
"""Small and large arguments, the float32 ones beyond its range becoming inf; the double
nearest a multiple of pi/2 (Kahan and McDonald)."""


def _native_cpu(name, x):
    """`name` of x through the compiler's generated CPU code (vmath: eager's CPU sin,
    cos and tan are numpy's)."""
    cf = compiler.compile(lambda t: getattr(t, name)(), backend="native")
    tensor = eager.tensor(x)
    lowered = compiler.lower(cf, tensor)  # (its kernels compiled here, not in workers)
    out = cf(tensor).numpy()
    assert not not_native(cf, lowered), not_native(cf, lowered)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", ["sin", "cos", "tan", "sinc"])
def test_trig_on_cuda_tensors_equals_the_cpu_for_small_and_huge_arguments(name, dtype):
    """Bit for bit the CPU's generated code (the same IR), and near numpy's (whose
    float64 cos of the Kahan-McDonald double is 8 ulp off: hence the tolerance)."""
    with np.errstate(over="ignore"):
        x = np.array(ARGUMENTS, dtype)
    cuda = getattr(eager.tensor(x, device="cuda"), name)()
    assert cuda.is_cuda and cuda.dtype.np == dtype
    got = cuda.cpu().numpy()
    native = _native_cpu(name, x)
    assert np.array_equal(got, native, equal_nan=True), (got, native)
    assert np.array_equal(np.signbit(got[x == 0]), np.signbit(native[x == 0]))
    with np.errstate(invalid="ignore"):
        numpy = getattr(eager.tensor(x), name)().numpy()
    np.testing.assert_allclose(got, numpy, rtol=1e-6 if dtype is np.float32 else 1e-14,
                               atol=0, equal_nan=True)
