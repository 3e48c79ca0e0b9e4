"""Payne-Hanek reduction by pi/2 for sin, cos and tan beyond Cody-Waite's range
(runtime/cpu/vmath_trig.py): x = n pi/2 + r, |r| <= pi/4, r a double-double, for every
finite double x, in integer arithmetic on the bits of 2/pi. It is plain LLVM IR (no
memory table, no library call), so the CPU, PTX and the CUDA emulator run the same code.

For x = m 2^e (m the 53-bit integer significand), x 2/pi mod 4 needs only the bits of
2/pi from the one worth 2^-(e-1) on: each earlier bit adds a multiple of 4. A window of
192 bits from there, shifted out of the words below, times m is exact in integers
(three 64x64-bit products in i128, whose high halves carry); the product has 190
fractional bits, of which the quadrant takes the next two and the fraction the first 128.
The bits of 2/pi beyond the window move the fraction by less than 2^-137; the doubles
closest to a multiple of pi/2 leave a fraction of about 2^-62 (x = 6381956970095103 *
2^797, Kahan and McDonald), so r keeps more than 70 correct bits everywhere."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.llvm.toolkit import Target, constant, define, fold_range

PI_OVER_2 = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)
"""pi/2 in three doubles (mpmath): each the rounding of what the ones before leave."""
TWO_OVER_PI_WORDS = (
    0xa2f9836e4e441529, 0xfc2757d1f534ddc0, 0xdb6295993c439041, 0xfe5163abdebbc561,
    0xb7246e3a424dd2e0, 0x06492eea09d1921c, 0xfe1deb1cb129a73e, 0xe88235f52ebb4484,
    0xe99c7026b45f7e41, 0x3991d639835339f4, 0x9c845f8bbdf9283b, 0x1ff897ffde05980f,
    0xef2f118b5a0a6d1f, 0x6d367ecf27cb09b7, 0x4f463f669e5fea2d, 0x7527bac7ebe5f17b,
    0x3d0739f78a5292ea, 0x6bfb5fb11f8d5d08, 0x56033046fc7b6bab)
"""The first 1216 bits of 2/pi after the binary point, 64 a word, most significant first:
    import mpmath; mpmath.mp.prec = 1400
    v = int(mpmath.floor(2 / mpmath.pi * 2 ** 1216))
    [hex(v >> 64 * (18 - i) & (2 ** 64 - 1)) for i in range(19)]
The largest double (e = 971) reads up to bit 1161."""
_WORDS = (0,) + TWO_OVER_PI_WORDS  # a zero word first: the window of |x| < 2^63 starts in it


def reduce_lanes(d, x):
    """reduce_large of each lane of x. On PTX the code is inlined per thread (the CUDA
    emulator runs no calls); on the CPU a loop over the lanes calls kiln.vmath.payne_hanek,
    one internal function a module, so LLVM compiles the reduction once however often
    sin is inlined into a kernel (its vector form inlined at every use made a float32
    sin kernel about 7 times slower to compile)."""
    b = d.b
    if Target.of(b.module).is_nvptx:
        return reduce_large(d, x)
    fn = _function(b.module, d)
    if d.lanes is None:
        result = b.call(fn, [x])
        return [b.extract_value(result, k) for k in range(3)]

    def lane(i, parts):  # a loop over the lanes: one call in the code, not one a lane
        result = b.call(fn, [b.extract_element(x, i)])
        return [b.insert_element(part, b.extract_value(result, k), i)
                for k, part in enumerate(parts)]
    start = [ir.Constant(ty, ir.Undefined) for ty in (d.ty, d.ty, d.ity)]
    return fold_range(b, 0, d.lanes, 1, start, lane, "payne_hanek")


def _function(module: ir.Module, d) -> ir.Function:
    """kiln.vmath.payne_hanek: double -> {hi, lo, n}, defined on first use."""
    name = "kiln.vmath.payne_hanek"
    fn = module.globals.get(name)
    if fn is None:
        f64, i64 = ir.DoubleType(), ir.IntType(64)
        fn, b = define(module, name, ir.FunctionType(ir.LiteralStructType([f64, f64, i64]),
                                                    [f64]),
                       linkage="internal", attributes=("nounwind", "noinline", "cold"))
        result = ir.Constant(fn.ftype.return_type, ir.Undefined)
        for k, value in enumerate(reduce_large(d.on(b, f64), fn.args[0])):
            result = b.insert_value(result, value, k)
        b.ret(result)
    return fn


def reduce_large(d, x):
    """(hi, lo, n) with x = n pi/2 + hi + lo, |hi + lo| <= pi/4 (n an integer of d's
    integer view, hi + lo a double-double), for a double _Math d and finite |x| >= 2^40
    (elsewhere the values are meaningless, but neither poison nor a trap: callers select
    them away)."""
    b = d.b
    i128 = d.shaped(ir.IntType(128))
    bits = d.bits(d.abs(x))
    m = b.or_(d.iand(bits, (1 << 52) - 1), d.i(1 << 52))
    e = d.isub(b.lshr(bits, d.i(52)), 1075)  # x = m 2^e
    start = d.iadd(e, 62)  # bit 2^-(e-1) of 2/pi, counted from 0 in _WORDS
    words = _words(d, d.ishr(start, 6), 4)
    shift = b.zext(d.iand(start, 63), i128)
    window = [_funnel(d, words[k], words[k + 1], shift) for k in range(3)]

    def wide(n): return b.zext(n, i128)
    def low(n): return b.trunc(n, d.ity)
    def high(n): return b.lshr(n, constant(i128, 64))
    m = wide(m)
    p0 = b.mul(m, wide(window[2]))
    p1 = b.add(b.mul(m, wide(window[1])), high(p0))
    p2 = b.add(b.mul(m, wide(window[0])), high(p1))  # its low half: bits 128 to 191
    p0, p1, p2 = low(p0), low(p1), low(p2)
    quadrant = b.lshr(p2, d.i(62))
    fraction = b.or_(b.shl(p2, d.i(2)), b.lshr(p1, d.i(62)))  # 2^-1 .. 2^-64
    tail = b.or_(b.shl(p1, d.i(2)), b.lshr(p0, d.i(62)))  # 2^-65 .. 2^-128
    # round to the nearest quadrant: the fraction read as signed lies in [-1/2, 1/2)
    n = d.iadd(quadrant, b.lshr(fraction, d.i(63)))
    hi, lo = _fixed_to_double_double(d, fraction, tail)
    hi, lo = d.dd_mul((hi, lo), (d.f(PI_OVER_2[0]), d.f(PI_OVER_2[1])))
    negative = b.icmp_signed("<", d.bits(x), d.i(0))
    return (d.select(negative, d.neg(hi), hi), d.select(negative, d.neg(lo), lo),
            b.select(negative, b.neg(n), n))


def _words(d, index, count: int) -> list:
    """_WORDS[index + k] for k < count (0s for an index no double reaches), picked by a
    chain of selects: the same code for every lane and thread, with no memory table."""
    b = d.b
    picked = [d.i(0)] * count
    for i in range(len(_WORDS) - count + 1):
        here = b.icmp_signed("==", index, d.i(i))
        picked = [b.select(here, d.i(_WORDS[i + k]), word) for k, word in enumerate(picked)]
    return picked


def _funnel(d, upper, lower, shift):
    """The 64 bits of upper:lower that start `shift` (0 to 63, as i128) bits into it."""
    b = d.b
    i128 = shift.type
    joined = b.or_(b.shl(b.zext(upper, i128), constant(i128, 64)), b.zext(lower, i128))
    return b.trunc(b.lshr(b.shl(joined, shift), constant(i128, 64)), d.ity)


def _fixed_to_double_double(d, fraction, tail):
    """fraction 2^-64 + tail 2^-128 (fraction signed, tail not) as a double-double: three
    parts of at most 53 bits, each converted exactly, then summed."""
    b = d.b
    top = d.to_float(d.ishr(fraction, 11))  # 2^-53 units
    middle = b.uitofp(b.or_(b.shl(d.iand(fraction, 0x7ff), d.i(42)), b.lshr(tail, d.i(22))),
                      d.ty)  # 2^-106 units
    bottom = b.uitofp(d.iand(tail, (1 << 22) - 1), d.ty)  # 2^-128 units
    hi, lo = d.two_sum(d.mul(top, 2.0 ** -53), d.mul(middle, 2.0 ** -106))
    return d.fast_two_sum(hi, d.add(lo, d.mul(bottom, 2.0 ** -128)))
