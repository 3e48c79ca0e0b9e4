"""Checks for a machine with an NVIDIA GPU, as one prepared run (issue 15): kiln's CUDA
kernels against numpy there, and timed against PyTorch. Each check is a function of the
driver (runtime.cuda.current.driver()) that returns a dict of figures for the JSON report.

    python -m benchmarks.gpu_check [--json PATH] [--size full|small]

    run_tests          the CUDA tests that use a device (pytest -m gpu on the CUDA test
                       files), in a subprocess with this process's environment
    check_sgemm        kiln's SGEMM (runtime/cuda/codegen/gemm.py, default tiles) checked
                       against numpy float64 and timed at 4096^3 against cuBLAS fp32
                       (PyTorch's torch.mm with TF32 off); target: at least 0.7x
    check_elementwise  a fused elementwise chain (runtime/cuda/codegen/kernel_ir.py's
                       kernel, through compiler.lower) checked against numpy float64 and
                       timed against the device-to-device copy's bandwidth; target: at
                       least 0.8x

The exit status is 1 when a test or a result is wrong (the speed targets are reported,
not enforced), 2 when there is no device. Under KILN_CUDA=emulate everything runs on the
emulated device (runtime/cuda/emulated.py) at `--size small`: its times are the host's,
so the script is known to work end to end before it meets a GPU.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np

import eager  # noqa: F401 - declares the op records (the GEMM store's activations)
from runtime.cuda.codegen.gemm import CudaGemmRequest, gemm_kernel
from runtime.cpu.gemm.api import activation_reference
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from runtime.cuda import nvptx

SGEMM_TARGET = 0.7  # of cuBLAS fp32
ELEMENTWISE_TARGET = 0.8  # of the device-to-device copy's bandwidth
SIZES = {  # the checks' arguments at each --size
    "full": {"sgemm": dict(size=4096, repeats=20),
             "elementwise": dict(elements=1 << 26, repeats=20)},
    "small": {"sgemm": dict(size=32, repeats=1, edge_sizes=(37, 35, 19)),
              "elementwise": dict(elements=4099, repeats=1)},
}
ROOT = Path(__file__).resolve().parents[1]
_POINTERS = frozenset({"a", "b", "c", "out", "bias", "residual"})


def device_arch(driver, ordinal: int = 0) -> str:
    """The PTX architecture for the device (runtime.cuda.nvptx.arch_for)."""
    return nvptx.arch_for(driver.compute_capability(ordinal))


class _Launcher:
    """One kiln GEMM kernel loaded on the device, with device copies of numpy arrays."""

    def __init__(self, driver, request: CudaGemmRequest, arch: str):
        self.driver, self.request = driver, request
        kernel = gemm_kernel(request)
        self.module = driver.load_module(kernel.ptx(arch))
        self.function = driver.function(self.module, kernel.name)
        self.buffers: list[int] = []

    def device(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        pointer = self.driver.alloc(max(array.nbytes, 16))
        self.buffers.append(pointer)
        if array.nbytes:
            self.driver.copy_to_device(pointer, array.ctypes.data, array.nbytes)
        return pointer

    def to_host(self, pointer: int, like: np.ndarray) -> np.ndarray:
        result = np.empty_like(like)
        self.driver.copy_to_host(result.ctypes.data, pointer, result.nbytes)
        return result

    def arguments(self, values: dict) -> list:
        scalar = ctypes.c_float if self.request.dtype == "float32" else ctypes.c_double
        kinds = {"alpha": scalar, "beta": scalar, "scale": scalar}
        return [(ctypes.c_uint64 if name in _POINTERS else kinds.get(name, ctypes.c_int64))(
            values[name]) for name in self.request.arguments()]

    def launch(self, m: int, n: int, args: list) -> None:
        self.driver.launch(self.function, self.request.tiles.grid_for(m, n),
                           (self.request.tiles.threads, 1, 1), args)

    def close(self) -> None:
        for pointer in self.buffers:
            self.driver.free(pointer)
        self.driver.unload_module(self.module)


def _error_ratio(out, exact, magnitude, k: int, dtype) -> float:
    """The largest |out - exact| as a fraction of the bound (k + 8) eps magnitude."""
    bound = (k + 8) * np.finfo(dtype).eps * magnitude + np.finfo(dtype).tiny
    return float(np.max(np.abs(out - exact) / bound, initial=0.0))


def _check_epilogue_edges(driver, arch: str, m: int, n: int, k: int) -> float:
    """An odd-sized product with every epilogue part (unaligned loads, C in place):
    its error as a fraction of the bound."""
    rng = np.random.default_rng(0)
    request = CudaGemmRequest("float32", False, True, EpilogueSpec("col", "gelu", True))
    a, b = (rng.standard_normal(shape, np.float32) for shape in ((m, k), (n, k)))
    c, residual = (rng.standard_normal((m, n), np.float32) for _ in range(2))
    bias = rng.standard_normal(n, np.float32)
    kernel = _Launcher(driver, request, arch)
    try:
        pointers = {name: kernel.device(x) for name, x in
                    (("a", a), ("b", b), ("c", c), ("bias", bias), ("residual", residual))}
        values = dict(pointers, m=m, n=n, k=k, alpha=0.5, lda=k, ldb=k, beta=-1.0, ldc=n,
                      out=pointers["c"], ldo=n, scale=2.0, bias_stride=1, ldr=n)
        kernel.launch(m, n, kernel.arguments(values))
        out = kernel.to_host(pointers["c"], c)
    finally:
        kernel.close()
    x = 0.5 * (a.astype(np.float64) @ b.T.astype(np.float64)) - c + bias
    magnitude = 0.5 * np.abs(a) @ np.abs(b.T) + np.abs(c) + np.abs(bias)
    exact = 2.0 * activation_reference("gelu")(x) + residual
    return _error_ratio(out, exact, 2.4 * magnitude + np.abs(exact) + np.abs(residual), k,
                        np.float32)


def _time_ms(driver, run, repeats: int) -> float:
    """Milliseconds per call of run(), timed with CUDA events after two warm-up calls."""
    run()
    run()
    start, end = driver.event_create(), driver.event_create()
    try:
        driver.event_record(start)
        for _ in range(repeats):
            run()
        driver.event_record(end)
        driver.event_synchronize(end)
        return driver.event_elapsed_ms(start, end) / repeats
    finally:
        driver.event_destroy(start)
        driver.event_destroy(end)


def _cublas_ms(a: np.ndarray, b: np.ndarray, repeats: int):
    """(ms per torch.mm in fp32 with TF32 off, None) or (None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no GPU"
    torch.backends.cuda.matmul.allow_tf32 = False
    x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    out = torch.empty((a.shape[0], b.shape[1]), device="cuda")
    for _ in range(2):
        torch.mm(x, y, out=out)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        torch.mm(x, y, out=out)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats, None


def check_sgemm(driver, size: int = 4096, repeats: int = 20, ordinal: int = 0,
                edge_sizes: tuple = (1000, 999, 997)) -> dict:
    """kiln's SGEMM at size^3 (default tiles, 16-byte loads): its result on 64 rows
    against numpy float64, an odd-sized product with the whole epilogue, its speed in
    GFLOP/s and the ratio to cuBLAS fp32."""
    driver.activate(ordinal)
    arch = device_arch(driver, ordinal)
    request = CudaGemmRequest("float32", aligned=True)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((size, size), np.float32) for _ in range(2))
    out = np.empty_like(a)
    kernel = _Launcher(driver, request, arch)
    try:
        pointers = {name: kernel.device(x) for name, x in (("a", a), ("b", b), ("out", out))}
        args = kernel.arguments(dict(pointers, m=size, n=size, k=size, alpha=1.0, lda=size,
                                     ldb=size, beta=0.0, c=pointers["out"], ldc=size,
                                     ldo=size, scale=1.0))
        seconds = _time_ms(driver, lambda: kernel.launch(size, size, args), repeats) / 1e3
        out = kernel.to_host(pointers["out"], out)
        registers = driver.function_attribute(kernel.function, "registers")
    finally:
        kernel.close()
    rows = rng.choice(size, min(size, 64), replace=False)
    exact = a[rows].astype(np.float64) @ b.astype(np.float64)
    error = _error_ratio(out[rows], exact, np.abs(a[rows]) @ np.abs(b) + np.abs(exact),
                         size, np.float32)
    flops = 2.0 * size ** 3
    cublas_ms, why_not = _cublas_ms(a, b, repeats)
    result = {"size": size, "arch": arch, "kernel": request.name, "registers": registers,
              "error_of_bound": error, "epilogue_error_of_bound":
              _check_epilogue_edges(driver, arch, *edge_sizes), "kiln_ms": seconds * 1e3,
              "kiln_gflops": flops / seconds / 1e9, "target_of_cublas": SGEMM_TARGET}
    if cublas_ms is None:
        result["cublas"] = why_not
    else:
        result.update(cublas_ms=cublas_ms, cublas_gflops=flops / cublas_ms / 1e6,
                      of_cublas=cublas_ms / (seconds * 1e3))
    result["passed"] = (error <= 1 and result["epilogue_error_of_bound"] <= 1
                        and result.get("of_cublas", SGEMM_TARGET) >= SGEMM_TARGET)
    return result


def _chain(x, y):
    return ((x * y + 1.5).sigmoid() - y).abs()


def _chain_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x.astype(np.float64), y.astype(np.float64)
    return np.abs(1 / (1 + np.exp(-(x * y + 1.5))) - y)


def check_elementwise(driver, elements: int = 1 << 26, repeats: int = 20,
                      ordinal: int = 0) -> dict:
    """|sigmoid(x * y + 1.5) - y| over `elements` float32s as one fused CUDA kernel
    (runtime/cuda/codegen/kernel_ir.py, made by compiler.lower): its result against
    numpy float64 (within 2e-6 relative, 1e-6 absolute, as the emulator's tests), its
    bandwidth (3 x 4 bytes an element) against a device-to-device copy of one operand
    (2 x 4 bytes an element), both timed with CUDA events."""
    import compiler
    driver.activate(ordinal)
    arch = device_arch(driver, ordinal)
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(elements, np.float32) for _ in range(2))
    (launch,) = compiler.lower(_chain, eager.tensor(x), eager.tensor(y),
                               target="cuda").cuda_kernels
    module = driver.load_module(launch.ptx(arch))
    pointers = []
    try:
        function = driver.function(module, launch.name)
        for host in (x, y, np.empty_like(x)):
            pointers.append(driver.alloc(host.nbytes))
            driver.copy_to_device(pointers[-1], host.ctypes.data, host.nbytes)
        args = [ctypes.c_uint64(pointer) for pointer in pointers]
        kiln_ms = _time_ms(driver, lambda: driver.launch(function, launch.grid, launch.block,
                                                         args), repeats)
        out = np.empty_like(x)
        driver.copy_to_host(out.ctypes.data, pointers[2], out.nbytes)
        copy_ms = _time_ms(driver, lambda: driver.copy_device(pointers[2], pointers[0],
                                                              x.nbytes), repeats)
    finally:
        for pointer in pointers:
            driver.free(pointer)
        driver.unload_module(module)
    exact = _chain_reference(x, y)
    error = float(np.max(np.abs(out - exact) / (1e-6 + 2e-6 * np.abs(exact)), initial=0.0))
    kiln_gbps, copy_gbps = 3 * x.nbytes / kiln_ms / 1e6, 2 * x.nbytes / copy_ms / 1e6
    return {"elements": elements, "arch": arch, "kernel": launch.name,
            "kernel_source": "runtime/cuda/codegen/kernel_ir.py via compiler.lower",
            "grid": list(launch.grid), "block": list(launch.block),
            "error_of_tolerance": error, "kiln_ms": kiln_ms, "kiln_gbps": kiln_gbps,
            "copy_ms": copy_ms, "copy_gbps": copy_gbps, "of_copy": kiln_gbps / copy_gbps,
            "target_of_copy": ELEMENTWISE_TARGET, "passed": error <= 1 and
            kiln_gbps / copy_gbps >= ELEMENTWISE_TARGET}


_OUTCOMES = {"failure": "failures", "error": "errors", "skipped": "skipped"}  # JUnit's tags


def cuda_test_files() -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/*/test_*cuda*.py"))


def run_tests() -> dict:
    """pytest -m gpu on the CUDA test files (the tests that use a device; the rest run
    on every machine) in a subprocess; its counts from pytest's JUnit XML."""
    with tempfile.TemporaryDirectory(prefix="kiln-gpu-check-") as folder:
        report = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                   f"--junitxml={report}", *cuda_test_files()]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        suite = ElementTree.parse(report).getroot() if report.exists() else None
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    if suite is not None:
        for case in suite.iter("testcase"):
            counts["tests"] += 1
            outcome = next((_OUTCOMES[child.tag] for child in case
                            if child.tag in _OUTCOMES), None)
            if outcome is not None:
                counts[outcome] += 1
            if outcome in ("failures", "errors"):
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    return {"command": " ".join(command[1:]), "returncode": done.returncode,
            "seconds": seconds, **counts,
            "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": failed, "output_tail": done.stdout[-2000:] + done.stderr[-2000:],
            "ok": done.returncode == 0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="small: tiny problems, for the emulated device")
    options = parser.parse_args(argv)
    from runtime.cuda import current
    from runtime.cuda import driver as cuda
    try:
        driver = current.driver()
    except cuda.CudaUnavailable as missing:
        return _finish(options, {"device": {"unavailable": str(missing)}, "correct": False}, 2)
    driver.activate(0)
    report = {"size": options.size, "device": {
        "name": driver.device_name(0), "capability": list(driver.compute_capability(0)),
        "total_memory": driver.total_memory(0), "driver": type(driver).__name__}}
    print(f"device: {report['device']['name']} ({report['device']['driver']})")
    report["tests"] = run_tests()
    print(f"tests: {report['tests']['passed']} passed, {report['tests']['failures']} failed, "
          f"{report['tests']['errors']} errors, {report['tests']['skipped']} skipped")
    report["sgemm"] = check_sgemm(driver, **SIZES[options.size]["sgemm"])
    print(f"sgemm: {report['sgemm']['kiln_gflops']:.4g} GFLOP/s, error "
          f"{report['sgemm']['error_of_bound']:.3f} of its bound")
    report["elementwise"] = check_elementwise(driver, **SIZES[options.size]["elementwise"])
    print(f"elementwise: {report['elementwise']['kiln_gbps']:.4g} GB/s, "
          f"{report['elementwise']['of_copy']:.3g}x the copy's, error "
          f"{report['elementwise']['error_of_tolerance']:.3f} of its tolerance")
    report["correct"] = (report["tests"]["ok"] and report["sgemm"]["error_of_bound"] <= 1
                         and report["sgemm"]["epilogue_error_of_bound"] <= 1
                         and report["elementwise"]["error_of_tolerance"] <= 1)
    report["targets_met"] = {
        "sgemm_of_cublas": report["sgemm"].get("of_cublas", report["sgemm"].get("cublas")),
        "elementwise_of_copy": report["elementwise"]["of_copy"],
        "met": report["sgemm"]["passed"] and report["elementwise"]["passed"]}
    return _finish(options, report, 0 if report["correct"] else 1)


def _finish(options, report: dict, status: int) -> int:
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"correct: {report['correct']}" + (f" (see {options.json})" if options.json else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
