"""runtime.cpu.vmath against numpy: the max ulp error of every function on a dense
float32 sweep and a wide float64 sample, special values as numpy gives them, every vector
width agreeing bit for bit with the scalar code, and no libm call in the machine code.

Each function runs in a JIT-compiled kernel `void f(T* x, [T* y,] T* out, i64 n)`: a
vector loop calling vmath.emit on <W x T>, then a scalar tail calling it on T."""
import ctypes
import functools
import math
import re

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.cpu import vmath
from runtime.llvm.jit import host_jit, vector_width

# Asserted bounds (ulp), a little above the maxima measured on denser sweeps (vmath's
# docstring). float64 erf is checked against math.erf, whose own error is included.
MAX_ULP = {"exp": (1.25, 1.25), "expm1": (1.75, 2.25), "log": (1.0, 1.0), "log1p": (1.0, 1.0),
           "tanh": (1.0, 1.0), "sigmoid": (1.75, 1.75), "erf": (1.25, 1.25), "sqrt": (0.5, 0.5),
           "rsqrt": (0.75, 0.75), "pow": (0.75, 1.5), "sin": (0.5, 1.0), "cos": (0.5, 1.0),
           "tan": (0.5, 2.25), "exp2": (0.5, 1.25), "sinh": (0.5, 2.5), "cosh": (0.5, 1.75),
           "asinh": (0.5, 1.75), "acosh": (0.5, 1.75), "atanh": (0.5, 2.0), "atan": (0.5, 1.0),
           "atan2": (0.5, 1.5), "asin": (0.5, 2.25), "acos": (0.5, 1.75)}
IR_TYPES = {np.float32: ir.FloatType(), np.float64: ir.DoubleType()}
NATIVE = {np.float32: vector_width(), np.float64: vector_width() // 2}
WIDTHS = {dtype: tuple(dict.fromkeys((NATIVE[dtype], *others)))
          for dtype, others in ((np.float32, (8, 4, 0)), (np.float64, (4, 2, 0)))}
"""Lanes of the kernels built for each dtype, the target's native width first, each once
(16, 8, 4, 0 with AVX-512; 8, 4, 0 with AVX2); 0 is a kernel with only the scalar loop."""


TWO_ARGUMENTS = ("pow", "atan2")


def _arity(name):
    return 2 if name in TWO_ARGUMENTS else 1


def _define_kernel(module, fname, name, elem, width):
    """void fname(T* in..., T* out, i64 n): out[i] = name(in...[i]) for i < n."""
    arity, i64 = _arity(name), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [elem.as_pointer()] * (arity + 1)
                                             + [i64]), fname)
    *ins, out, n = fn.args
    entry, head, body, tail_head, tail, done = (fn.append_basic_block(label) for label in (
        "entry", "head", "body", "tail_head", "tail", "done"))
    b = ir.IRBuilder(entry)
    n_vec = b.mul(b.sdiv(n, i64(max(width, 1))), i64(width))
    b.branch(head)

    align = 8 if isinstance(elem, ir.DoubleType) else 4  # numpy's buffers: no more

    def run(index, ty):
        def at(ptr):
            return b.bitcast(b.gep(ptr, [index]), ty.as_pointer())
        y = vmath.emit(b, name, *[b.load(at(p), align=align) for p in ins])
        b.store(y, at(out), align=align)

    b.position_at_end(head)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    b.cbranch(b.icmp_signed("<", i, n_vec), body, tail_head)
    b.position_at_end(body)
    if width:
        run(i, ir.VectorType(elem, width))
    i.add_incoming(b.add(i, i64(width)), body)
    b.branch(head)
    b.position_at_end(tail_head)
    j = b.phi(i64)
    j.add_incoming(n_vec, head)
    b.cbranch(b.icmp_signed("<", j, n), tail, done)
    b.position_at_end(tail)
    run(j, elem)
    j.add_incoming(b.add(j, i64(1)), tail)
    b.branch(tail_head)
    b.position_at_end(done)
    b.ret_void()


@functools.cache
def _compiled():
    """One JIT module holding a kernel per (function, dtype, width); returns its assembly
    and a map from (name, dtype, width) to the callable."""
    jit = host_jit()
    module = jit.new_module("test_vmath")
    fnames = {}
    for name in vmath.NAMES + tuple(vmath.PARTIAL):
        for dtype, widths in WIDTHS.items():
            for width in widths:
                fname = f"test_vmath_{name}_{dtype.__name__}_w{width}"
                _define_kernel(module, fname, name, IR_TYPES[dtype], width)
                fnames[name, dtype, width] = fname
    compiled = jit.add(module)
    kernels = {}
    for key, fname in fnames.items():
        signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (_arity(key[0]) + 1),
                                     ctypes.c_int64)
        kernels[key] = signature(jit.address(fname))
    return jit.assembly(compiled), kernels


def run(name, dtype, *args, width=None):
    """vmath's `name` over numpy arrays, through the kernel of the given width."""
    kernel = _compiled()[1][name, dtype, NATIVE[dtype] if width is None else width]
    args = [np.ascontiguousarray(a, dtype=dtype).ravel() for a in np.broadcast_arrays(*args)]
    out = np.empty_like(args[0])
    kernel(*[a.ctypes.data for a in args], out.ctypes.data, out.size)
    return out


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)


REFERENCE = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
             "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf,
             "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "pow": np.power,
             "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp2": np.exp2, "sinh": np.sinh,
             "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
             "atan": np.arctan, "atan2": np.arctan2, "asin": np.arcsin, "acos": np.arccos}


def reference(name, dtype, *args):
    """`name` in float64 for float32 arguments, in x87 long double for float64 ones."""
    wide = np.float64 if dtype is np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        return REFERENCE[name](*[np.asarray(a).astype(wide) for a in args]).astype(wide)


def ulp_errors(got, ref, dtype):
    """|got - ref| in ulps of dtype at ref (the subnormal ulp below the normal range); 0
    where got is ref rounded to dtype, inf where one is nan and the other not or where
    they are zeros of different signs."""
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        _, exponent = np.frexp(ref)
        ulp = np.ldexp(np.ones_like(ref), np.maximum(exponent - 1, info.minexp) - info.nmant)
        err = np.abs(got.astype(ref.dtype) - ref) / ulp
    err[(got == rounded) | (np.isnan(got) & np.isnan(ref))] = 0
    err[np.isnan(err) | ((got == 0) & (rounded == 0) & (np.signbit(got) != np.signbit(ref)))] \
        = np.inf
    return err


def max_ulp(name, dtype, *args):
    """Worst error of vmath's `name` on `args`, and the arguments where it occurs."""
    got = run(name, dtype, *args)
    err = ulp_errors(got, reference(name, dtype, *args), dtype)
    worst = int(np.argmax(err))
    return float(err[worst]), [np.ravel(a)[worst] for a in args]


def _neighbours(magnitudes, dtype, count):
    """`count` consecutive values of dtype on each side of each magnitude, both signs."""
    uint = np.uint32 if dtype is np.float32 else np.uint64
    bits = np.asarray(magnitudes, dtype=dtype).view(uint).astype(np.int64)
    near = (bits[:, None] + np.arange(-count, count + 1)).ravel().clip(0).astype(uint)
    return np.concatenate([near.view(dtype), -near.view(dtype)])


EDGES = [0.0, 1.0, 2.0 ** -126, 2.0 ** -1022, 0.29, 0.5625, 0.7071, 0.84375, 1.25, 1.4142,
         1 / 0.35, 3.875, 6.0, 9.01, 17.33, 19.06, 37.4, 87.33, 88.72, 103.97, 104.0, 708.4,
         709.78, 745.13, 746.0, 0.7854, 1.5708, 3.1416, 2.0 ** 40, 1e22]
"""Magnitudes where a function changes method, range or rounding (thresholds of
underflow, overflow and saturation, subnormals, 1, exp's bound below which it is 0,
sin's and cos's pi/4, pi/2, pi and the bound of their reduction, vmath_trig.TRIG_REDUCED)."""


@functools.cache
def sweep(dtype):
    """float32: every 1021st bit pattern and 4096 values each side of EDGES; float64:
    random bit patterns, uniform and log-uniform samples and 2000 values around EDGES."""
    if dtype is np.float32:
        parts = [np.arange(0, 2 ** 32, 1021, dtype=np.uint64).astype(np.uint32).view(dtype),
                 _neighbours(EDGES, dtype, 4096)]
    else:
        rng = np.random.default_rng(0)
        magnitudes = np.exp2(rng.uniform(-70, 11, 300_000))
        parts = [rng.integers(0, 2 ** 64, 300_000, dtype=np.uint64).view(dtype),
                 rng.uniform(-40, 40, 200_000), magnitudes * rng.choice([-1, 1], magnitudes.size),
                 _neighbours(EDGES, dtype, 2000)]
    x = np.concatenate(parts).astype(dtype)
    return x[~np.isnan(x)]


@functools.cache
def pow_sweep(dtype):
    """(x, y) pairs: y scaled so x^y spans the whole range through overflow and underflow,
    x next to 1 with huge y, negative x with integer y, and random bit patterns."""
    rng = np.random.default_rng(1)
    uint, top = (np.uint32, 0x7f800000) if dtype is np.float32 else (np.uint64, 0x7ff << 52)
    range_ = 160 if dtype is np.float32 else 1100
    x = rng.integers(1, top, 300_000, dtype=uint).view(dtype)
    y = rng.uniform(-1, 1, x.size) * range_ / np.maximum(np.abs(np.log2(x.astype(float))), 1)
    eps = np.finfo(dtype).eps
    near_one = 1 + eps * rng.integers(-2000, 2000, 100_000)
    big_y = rng.uniform(-1, 1, near_one.size) * range_ / eps / 2000
    negative = -np.exp2(rng.uniform(-20, 20, 100_000))
    integers = rng.integers(-40, 40, negative.size).astype(float)
    bits_x, bits_y = (rng.integers(0, 2 ** (8 * np.dtype(dtype).itemsize), (2, 200_000),
                                   dtype=uint).view(dtype))
    with np.errstate(invalid="ignore"):  # nan bit patterns
        xs = np.concatenate([x, near_one, negative, bits_x]).astype(dtype)
        ys = np.concatenate([y, big_y, integers, bits_y]).astype(dtype)
    keep = ~(np.isnan(xs) | np.isnan(ys))
    return xs[keep], ys[keep]


SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0,
           1e-40, -1e-40, 1e-310, -1e-310, 1e30, -1e30, 1e300, -1e300, 100.0, -100.0, 1000.0,
           -1000.0]
PARAMS = [pytest.param(name, dtype, id=f"{name}-{dtype.__name__}")
          for name in vmath.NAMES for dtype in IR_TYPES]


@pytest.mark.parametrize("name, dtype", PARAMS)
def test_accuracy_on_the_sweep(name, dtype):
    args = pow_sweep(dtype) if name in TWO_ARGUMENTS else (sweep(dtype),)
    worst, where = max_ulp(name, dtype, *args)
    assert worst <= MAX_ULP[name][dtype is np.float64], f"{worst} ulp at {name}{tuple(where)}"


@pytest.mark.parametrize("name, dtype", PARAMS)
def test_special_values_are_numpys(name, dtype):
    """Exactly numpy's where that is nan, an infinity, a zero (with its sign) or +-1, and
    within the bound elsewhere."""
    with np.errstate(all="ignore"):
        x = np.array(SPECIAL, dtype=dtype)
    args = [a.ravel() for a in np.meshgrid(x, x)] if name in TWO_ARGUMENTS else (x,)
    got, ref = run(name, dtype, *args), reference(name, dtype, *args)
    with np.errstate(all="ignore"):
        want = ref.astype(dtype)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got)
                                                                        & np.isnan(want))
    exact = np.isnan(want) | np.isinf(want) | np.isin(want, [0.0, 1.0, -1.0])
    wrong = exact & ~same
    assert not wrong.any(), [(*[a[i] for a in args], got[i], want[i])
                             for i in np.flatnonzero(wrong)]
    assert ulp_errors(got, ref, dtype).max() <= MAX_ULP[name][dtype is np.float64]


@pytest.mark.parametrize("name, dtype", PARAMS)
def test_every_width_and_the_scalar_code_agree(name, dtype):
    args = [a[::37] for a in pow_sweep(dtype)] if name in TWO_ARGUMENTS else \
        (sweep(dtype)[::37],)
    native = run(name, dtype, *args).view(np.uint8)
    for width in WIDTHS[dtype][1:]:
        assert np.array_equal(run(name, dtype, *args, width=width).view(np.uint8), native), width


def _nonpositive(dtype):
    """exp_nonpositive's domain: the sweep's values made <= 0, every value around its
    subnormal results and its lowest bound, -0.0, -inf and nan."""
    edges = [0.0, 87.33, 100.0, 103.28, 103.97, 104.0, 109.9, 200.0, 708.4, 745.13, 746.0,
             752.8, 1600.0]
    with np.errstate(over="ignore"):
        specials = np.array([-0.0, 0.0, -np.inf, np.nan, -1e30, -1e300], dtype)
    x = np.concatenate([-np.abs(sweep(dtype)), -_neighbours(edges, dtype, 4096)[::2],
                        specials])
    return x[~(x > 0)]


@pytest.mark.parametrize("dtype", IR_TYPES, ids=lambda d: d.__name__)
def test_exp_nonpositive_is_exp_bit_for_bit_on_its_domain(dtype):
    """Subnormal results, exact +0 below the lowest bound, 1 at zero, nan for nan: at
    every width, as exp gives them."""
    x = _nonpositive(dtype)
    want = run("exp", dtype, x)
    uint = np.uint32 if dtype is np.float32 else np.uint64
    tiny = np.finfo(dtype).tiny
    assert ((want > 0) & (want < tiny)).sum() > 1000  # subnormal results are checked
    for width in WIDTHS[dtype]:
        got = run("exp_nonpositive", dtype, x, width=width)
        assert np.array_equal(np.isnan(got), np.isnan(x))
        keep = ~np.isnan(x)
        differ = got.view(uint)[keep] != want.view(uint)[keep]
        assert not differ.any(), (width, x[keep][differ][:5], got[keep][differ][:5])


@pytest.mark.parametrize("dtype", IR_TYPES, ids=lambda d: d.__name__)
def test_exp_nonpositive_is_within_exps_bound_and_zero_where_exp_rounds_to_zero(dtype):
    x = _nonpositive(dtype)
    x = x[~np.isnan(x)]
    got = run("exp_nonpositive", dtype, x)
    assert ulp_errors(got, reference("exp", dtype, x), dtype).max() <= MAX_ULP["exp"][
        dtype is np.float64]
    below = x < (-103.98 if dtype is np.float32 else -745.14)  # e^x < half the least
    assert below.sum() > 1000 and (got[below].view(np.uint8) == 0).all()  # +0.0


LIBM = re.compile(r"\b(exp|expm1|log|log1p|tanh|erf|pow|sqrt|fma|sinf|cosf|sin|cos|tan)f?@")
"""A libm symbol as the JIT's large code model references it (expf@GOT, then call *%rbx)."""


def _calls(assembly):
    return re.findall(r"^\s*call\w*\s+(.*)$", assembly, re.MULTILINE)


OWN_CALLS = {"kiln.vmath.payne_hanek"}
"""The only calls: sin's, cos's and tan's reduction of huge arguments, kiln's own
function in the same module (runtime/cpu/vmath_payne_hanek.py), not the C library."""


def test_no_libm_calls_in_the_machine_code():
    assembly = _compiled()[0]
    assert set(_calls(assembly)) <= OWN_CALLS and not LIBM.search(assembly)
    assert all(re.search(rf"^{re.escape(name)}:", assembly, re.MULTILINE) for name in OWN_CALLS)


def test_the_machine_code_uses_the_targets_registers_and_no_wider():
    """Under KILN_CPU=haswell (8 lanes) no zmm register appears: the target reached the
    code generator."""
    registers = ("xmm", "ymm", "zmm")
    native = {4: 0, 8: 1, 16: 2}[NATIVE[np.float32]]
    assembly = _compiled()[0]
    assert registers[native] in assembly
    assert not [wider for wider in registers[native + 1:] if wider in assembly]


def test_the_call_check_sees_llvms_own_vector_exp():
    module = host_jit().new_module("test_vmath_llvm_exp")
    vec = ir.VectorType(ir.FloatType(), 16)
    fn = ir.Function(module, ir.FunctionType(vec, [vec]), "test_vmath_llvm_exp")
    llvm_exp = ir.Function(module, ir.FunctionType(vec, [vec]), "llvm.exp.v16f32")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.call(llvm_exp, fn.args))
    assembly = host_jit().assembly(llvm.parse_assembly(str(module)))
    assert len(_calls(assembly)) == 16 and LIBM.search(assembly)


def test_a_module_holds_one_helper_per_function_and_type():
    jit = host_jit()
    module = jit.new_module("test_vmath_helpers")
    types = [ir.FloatType(), ir.DoubleType(), ir.VectorType(ir.FloatType(), 4),
             ir.VectorType(ir.DoubleType(), 8)]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [t.as_pointer() for t in types]),
                     "test_vmath_helpers")
    b = ir.IRBuilder(fn.append_basic_block())
    for ptr in fn.args:
        for _ in range(2):
            x = b.load(ptr)
            b.store(vmath.emit(b, "tanh", vmath.emit(b, "exp", x)), ptr)
    b.ret_void()
    helpers = [f.name for f in module.functions if f.name.startswith("kiln.vmath.")]
    assert len(helpers) == len(set(helpers))
    assert {"kiln.vmath.exp.f32", "kiln.vmath.tanh.v8f64", "kiln.vmath.expm1.v4f32"} <= \
        set(helpers)
    jit.add(module)  # internal helpers don't clash with those of the kernels' module
    assert jit.address("test_vmath_helpers")


def test_emit_rejects_unknown_names_and_mixed_types():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.DoubleType(),
                                                              ir.IntType(32)]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    x, y, n = fn.args
    with pytest.raises(ValueError, match="cbrt"):
        vmath.emit(b, "cbrt", x)
    with pytest.raises(TypeError):
        vmath.emit(b, "pow", x, y)
    with pytest.raises(TypeError):
        vmath.emit(b, "exp", n)
    with pytest.raises(TypeError):
        vmath.emit(b, "exp", x, x)
