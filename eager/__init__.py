"""kiln's eager runtime, spelled like PyTorch: `import eager as torch`.

Tensors, the op registry and dispatcher, autograd, a numpy CPU backend and the
profiler. The compiler (llvmlite, networkx) is imported only when compile() is used.
The modules read in layers, bottom-up: docs/ARCHITECTURE.md, "eager, layer by layer".

What a script may not use is imported on first use (module __getattr__ below):
`eager.nn`, `eager.optim`, `eager.utils`, `eager.cuda`, `eager.distributed`, `eager.testing`,
`eager.library`, `eager.distributions`, `eager.serialization` and its `eager.save` /
`eager.load` are module attributes all the same; so is `eager.ops` (torch.ops).
"""
# ruff: noqa: F401 - this module's imports are its public names
import importlib

from eager import _missing
from eager import autograd as autograd
from eager import _C, dispatcher, kernels, composite, _tensor_methods  # noqa: F401
from eager._ops import ops
from eager import out_argument  # noqa: F401 - out= on every op
from eager import profiler as profiler
from eager import version as version
from eager.torch_version import __version__  # "2.13.0+kiln.0.1.0": the API kiln follows
from eager.autograd import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                            set_grad_enabled)
from eager.device import device, get_default_device
from eager.factories import (BFloat16Tensor, BoolTensor, ByteTensor, CharTensor,
                             DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor,
                             ShortTensor, Generator, arange, default_generator, empty, empty_like,
                             from_numpy, full, full_like, get_rng_state, initial_seed,
                             linspace, manual_seed, ones, ones_like, rand, rand_like, randint,
                             randn, randn_like, randperm, seed, set_default_dtype, set_rng_state,
                             tensor, zeros, zeros_like)
from eager.tensor import Size, Tensor
from eager.functional import *  # noqa: F401,F403
from eager.derived import (all, allclose, any, argsort, equal, flip, fliplr, flipud,  # noqa: A004
                           isclose, kthvalue, lerp, logical_not, logical_or,
                           logical_xor, multinomial, roll, sort, topk, tril, triu, unbind)
from eager.derived_shapes import *  # noqa: F401,F403 - repeat_interleave, narrow, movedim, ...
from eager.memory_formats import (channels_last, channels_last_3d, clone, contiguous_format,
                                  memory_format, preserve_format)
from eager.derived_shapes import concatenate, moveaxis, swapaxes, swapdims  # noqa: F401
from eager.derived_math import *  # noqa: F401,F403 - cumsum, logsumexp, norm, isnan, ...
from eager.derived_math import einsum, eye, searchsorted  # noqa: F401
from eager.written_back import *  # noqa: F401,F403 - reciprocal_, clamp_min_ ...
from eager.functional import __all__ as _functional_all
from eager.type_info import finfo, iinfo
from eager import amp as amp
from eager.amp import (GradScaler, autocast, autocast_decrement_nesting,
                       autocast_increment_nesting, clear_autocast_cache,
                       get_autocast_cpu_dtype, get_autocast_dtype, get_autocast_gpu_dtype,
                       is_autocast_available, is_autocast_cache_enabled,
                       is_autocast_cpu_enabled, is_autocast_enabled,
                       set_autocast_cache_enabled, set_autocast_cpu_dtype,
                       set_autocast_cpu_enabled, set_autocast_dtype, set_autocast_enabled,
                       set_autocast_gpu_dtype)
from runtime.threads import num_threads as get_num_threads, set_num_threads  # noqa: F401
from eager.storage import UntypedStorage, asarray, frombuffer
from eager.layouts import (jagged, layout, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc,
                           sparse_csr, strided)
from ir.dtypes import (bool_ as bool, bfloat16, float16, float32, float64,  # noqa: A004
                       int8, int16, int32, int64, uint8, get_default_dtype)
from ir.dtypes import (complex32, complex64, complex128,  # named; no kernels
                       float4_e2m1fn_x2, float8_e4m3fn, float8_e4m3fnuz,  # yet (ir/dtypes.py)
                       float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, uint16, uint32, uint64)
from ir.dtypes import DType as dtype

float = float32  # noqa: A001 - PyTorch's aliases
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
cfloat = complex64
cdouble = complex128
chalf = complex32


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def compile(fn=None, **options):  # noqa: A001 - PyTorch's name
    """Compile a function or module with kiln's compiler (imported on first use)."""
    import compiler
    return compiler.compile(fn, **options)

_SUBMODULES = ("nn", "optim", "utils", "cpu", "cuda", "distributed", "testing", "serialization", "hub",
               "jit", "onnx", "fx", "compiler", "ao", "_custom_ops", "library",
               "distributions", "special")
_FROM_MODULE = {"load": "eager.serialization", "save": "eager.serialization",
                "pixel_shuffle": "eager.nn.functional", "pixel_unshuffle": "eager.nn.functional"}
# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
_missing_name = _missing.module_getattr("torch", "eager")
_missing.stand_in_for_lacking_tensor_names(Tensor)  # after every module adding methods


def __getattr__(name: str):
    """The lazy names above (importing a submodule makes it an attribute of this
    package, so each is looked up here once); any other is one kiln lacks."""
    if name in _SUBMODULES:
        return importlib.import_module(f"eager.{name}")
    if name in _FROM_MODULE:
        value = globals()[name] = getattr(importlib.import_module(_FROM_MODULE[name]), name)
        return value
    return _missing_name(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES) | set(_FROM_MODULE))
