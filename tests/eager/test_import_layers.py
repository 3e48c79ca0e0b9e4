"""eager/ has layers, read bottom-up: each module imports only modules listed before it in
LAYERS, and it does so at module level. A method that needs a higher layer is attached
from above (eager/_tensor_methods.py sets Tensor.backward, Tensor.to, ...), and a lower
layer that must call up takes a function registered with it (the dispatcher's number
wrapper and recorder). Every import is read from the source with ast, inside functions too.
"""
from __future__ import annotations

from tests.imports import ROOT, imports, module_name

LAYERS = [
    ("base: PyTorch's names and version, devices, argument checks, shape arithmetic "
     "(no tensors yet)", [
        "eager._torch_tensor_names", "eager._torch_names", "eager._torch_signatures",
        "eager._missing",
        "eager.torch_version", "eager.version", "eager.device", "eager.arguments",
        "eager.shapes", "eager.layouts"]),
    ("core: the dispatcher and profiler, Tensor and Storage, backends, factories", [
        "eager.dispatcher", "eager._ops", "eager._custom_ops", "eager.profiler", "eager._C", "eager._formatting", "eager.tensor",
        "eager.backends.mps", "eager.backends", "eager.factories"]),
    ("kernels: op records, CPU and Meta kernels per op family, composite kernels", [
        "eager.kernels._common", "eager.kernels.decomposed", "eager.kernels.gradients",
        "eager.kernels.elementwise", "eager.kernels.unary", "eager.kernels.trig",
        "eager.kernels.rounding", "eager.kernels.binary", "eager.kernels.ternary",
        "eager.kernels.indexing", "eager.kernels.membership", "eager.kernels.reduction", "eager.kernels.products", "eager.kernels.moments", "eager.kernels.gated", "eager.kernels.norms", "eager.kernels.normalization", "eager.kernels.group_norm",
        "eager.kernels.shape", "eager.kernels.windows",
        "eager.kernels.copies", "eager.kernels.linalg", "eager.kernels", "eager.composite"]),
    ("backends: eager's generated CPU kernels (runtime/cpu's generators) and its CUDA "
     "backend, each registered for the ops it takes over", [
        "eager.backends.row_ops", "eager.backends.native", "eager.backends.native.rows",
        "eager.backends.native.pointwise", "eager.backends.native.windows",
        "eager.backends.native.copies",
        "eager.backends.native.gemm", "eager.backends.native.optim",
        "eager.backends.native.membership",
        "eager.backends.cuda.device", "eager.backends.cuda.elementwise",
        "eager.backends.cuda.pointwise", "eager.backends.cuda.widened",
        "eager.backends.cuda.argreduce",
        "eager.backends.cuda.reductions", "eager.backends.cuda.composed",
        "eager.backends.cuda.matmul", "eager.backends.cuda.joins",
        "eager.backends.cuda.indexed", "eager.backends.cuda.indexing",
        "eager.backends.cuda"]),
    ("autograd: grad mode, nodes, derivative rules, Autograd kernels, the engine", [
        "eager.autograd.grad_mode", "eager.autograd.function", "eager.autograd.derivatives",
        "eager.autograd.kernels", "eager.autograd.engine", "eager.autograd.gradcheck",
        "eager.autograd.custom_function", "eager.autograd.graph", "eager.autograd"]),
    ("api: PyTorch's namespace and Tensor's op methods", [
        "eager.type_info", "eager.indexing", "eager._tensor_methods", "eager.out_argument",
        "eager.functional",
        "eager.derived",
        "eager.derived_shapes", "eager.memory_formats", "eager.derived_math", "eager.special",
        "eager.written_back", "eager.storage",
        "eager.amp.autocast_mode", "eager.amp.grad_scaler", "eager.amp",
        "eager.cpu", "eager.cuda",
        "eager.testing", "eager.library"]),
    ("libraries: distributed, nn, optim, utils and distributions", [
        "eager.distributed.process_group", "eager.distributed.collectives", "eager.distributed",
        "eager.distributed.tensor.placement_types", "eager.distributed.tensor",
        "eager.distributed.tensor._utils", "eager.distributed.device_mesh",
        "eager.distributed._functional_collectives", "eager.distributed.checkpoint",
        "eager.distributed.checkpoint.hf_storage", "eager.distributed.checkpoint.state_dict",
        "eager.nn.parameter", "eager.nn.utils.fusion", "eager.nn.init", "eager.nn._activations", "eager.nn._nll", "eager.nn._losses",
        "eager.nn._normalization", "eager.nn._convolution", "eager.nn._sampling",
        "eager.nn._flash_attention", "eager.nn.functional",
        "eager.nn.utils",
        "eager.nn.modules.utils", "eager.nn.modules.module", "eager.nn.modules.container",
        "eager.nn.modules.layers", "eager.nn.modules.conv", "eager.nn.modules.loss",
        "eager.nn.modules.normalization", "eager.nn.modules.sampling",
        "eager.nn.modules.recurrent",
        "eager.nn.modules.transformer", "eager.nn.modules.activation",
        # torch.nn.modules' names for the classes above, where PyTorch defines them
        "eager.nn.modules.linear", "eager.nn.modules.batchnorm",
        "eager.nn.modules.instancenorm", "eager.nn.modules.dropout", "eager.nn.modules.sparse",
        "eager.nn.modules.flatten", "eager.nn.modules.rnn", "eager.nn.modules.pooling",
        "eager.nn.modules.padding", "eager.nn.modules.fold", "eager.nn.modules.distance",
        "eager.nn.modules.pixelshuffle", "eager.nn.modules.upsampling",
        "eager.nn.modules", "eager.nn.parallel.distributed", "eager.nn.parallel",
        "eager.nn.attention", "eager.nn.attention.flex_attention", "eager.nn",
        "eager.distributed.fsdp", "eager.distributed._composable",
        "eager.distributed._composable.fsdp",
        "eager.serialization_files", "eager.serialization_pickle",
        "eager.serialization_torch_globals", "eager.serialization_torch",
        "eager.serialization_torch_save", "eager.serialization",
        "eager.optim.optimizer", "eager.optim.sgd",
        "eager.optim.adam", "eager.optim.adaptive", "eager.optim.lr_scheduler", "eager.optim",
        "eager.hub", "eager.utils.model_zoo", "eager.onnx.symbolic_helper", "eager.onnx",
        "eager.onnx.symbolic_opset9", "eager.onnx.symbolic_opset11",
        "eager.onnx.symbolic_opset16", "eager.onnx.symbolic_opset18", "eager.jit.annotations",
        "eager.jit", "eager.fx", "eager.compiler", "eager._dynamo", "eager._dynamo.utils",
        "eager._dynamo._trace_wrapped_higher_order_op", "eager.ao.quantization", "eager.ao", "eager.utils.data.dataset", "eager.utils.data.sampler", "eager.utils.data.collate",
        "eager.utils.data.worker", "eager.utils.data.dataloader", "eager.utils.data.distributed",
        "eager.utils.data", "eager.utils._pytree", "eager.utils.checkpoint",
        "eager.utils",
        "eager.distributions.utils", "eager.distributions.constraints",
        "eager.distributions.distribution", "eager.distributions._linalg",
        "eager.distributions.normal", "eager.distributions.uniform",
        "eager.distributions.bernoulli", "eager.distributions.categorical",
        "eager.distributions.multivariate_normal", "eager.distributions.independent",
        "eager.distributions.kl", "eager.distributions"]),
    ("the package, its walkthrough and the torch alias; docs/MISSING.md's reading of "
     "kiln's whole API", ["eager", "eager.tour", "eager.alias", "eager._missing_signatures"]),
]

ALLOWED = {
    # (importer, imported): why the import goes up a layer or waits inside a function
    ("eager", "compiler"): "eager.compile() loads the compiler on first use: `import eager` "
                           "must not load llvmlite or networkx",
    ("eager.backends", "runtime.cuda.current"): "the CUDA driver is looked for only when a "
                                                "CUDA tensor is asked for",
    ("eager.backends", "runtime.cuda.driver"): "(CudaUnavailable, with the driver)",
    ("eager.backends", "eager.backends.cuda"): "the CUDA backend registers its kernels the "
                                               "first time a CUDA tensor is asked for",
    ("eager.optim.optimizer", "eager.backends.native.optim"):
        "the fused optimiser kernels load on the first step: `import eager` must not load "
        "llvmlite",
    ("eager.kernels.reduction", "eager.backends.native.rows"):
        "the generated row kernels load at the first float reduction or softmax of "
        "NATIVE_ELEMENTS or more: `import eager` must not load llvmlite",
    ("eager.kernels.elementwise", "eager.backends.native.pointwise"):
        "the generated pointwise kernels load at the first float pointwise op with an "
        "operand of NATIVE_ELEMENTS or more: `import eager` must not load llvmlite",
    ("eager.kernels.linalg", "eager.backends.native.gemm"):
        "kiln's GEMM loads at the first float mm or bmm of GEMM_MACS or more: `import "
        "eager` must not load llvmlite",
    ("eager.kernels.windows", "eager.backends.native.windows"):
        "the generated im2col loads at the first float im2col of _NATIVE_ELEMENTS or "
        "more: `import eager` must not load llvmlite",
    ("eager.kernels.copies", "eager.backends.native.copies"):
        "the generated strided copy loads at the first cat of CAT_NATIVE_BYTES or more: "
        "`import eager` must not load llvmlite",
    ("eager.backends.native.copies", "runtime.llvm.toolkit"): "the IR toolkit (llvmlite) "
        "loads only to build a kernel: one from the disk cache loads without it",
    ("eager.kernels.membership", "eager.backends.native.membership"):
        "the generated isin scan loads at the first isin of a small test set: `import "
        "eager` must not load llvmlite",
    ("eager.backends.native.rows", "runtime.cpu.kernels"): "the IR builder (llvmlite) "
        "loads only to build a kernel: one from the disk cache loads without it",
    ("eager.backends.native.rows", "runtime.llvm.jit"): "the JIT loads with the first kernel",
    ("eager.backends.native.windows", "runtime.llvm.target"): "the CPU's vector width is "
                                                             "read with the first kernel",
    ("eager.backends.native.windows", "runtime.llvm.toolkit"): "the IR toolkit (llvmlite) "
        "loads only to build a kernel: one from the disk cache loads without it",
    ("eager.backends.native.membership", "runtime.llvm.target"): "the CPU's vector width "
                                                                 "is read with the first kernel",
    ("eager.backends.native.membership", "runtime.llvm.toolkit"): "the IR toolkit (llvmlite) "
        "loads only to build a kernel: one from the disk cache loads without it",
    ("eager.amp.grad_scaler", "eager.cuda"): "a CUDA GradScaler asks whether CUDA is there "
                                             "when it is made: `import eager` does not load "
                                             "eager.cuda",
    ("eager.cuda", "runtime.cuda.current"): "the CUDA driver and device memory are looked "
                                            "at only when asked",
    ("eager.cuda", "runtime.cuda.driver"): "(CudaUnavailable, with the driver)",
    ("eager._missing", "eager._torch_names"): "PyTorch's names (a 40 KB table) load when a "
                                              "name kiln lacks is first asked for",
    ("eager._missing", "eager._torch_tensor_names"): "Tensor's stand-ins are made once "
                                                     "every module has added its methods",
    ("eager._missing", "eager._missing_signatures"): "docs/MISSING.md's sections from "
        "PyTorch's signatures read all of kiln's API, when the doc is written or checked",
}

ORDER = [m for _, modules in LAYERS for m in modules]
POSITION = {m: i for i, m in enumerate(ORDER)}


def _eager_imports():
    """(importer, imported, line, inside a function?) over every eager module."""
    for path in sorted((ROOT / "eager").rglob("*.py")):
        importer = module_name(path)
        for imported, line, in_function in imports(path):
            if imported.partition(".")[0] in ("eager", "ir", "runtime", "compiler", "benchmarks"):
                yield importer, imported, line, in_function


def _loaded_with(importer: str, imported: str) -> list[str]:
    """`imported` and the packages Python runs first to import it, leaving out those that
    contain `importer` (a package's own modules import each other freely)."""
    parts = imported.split(".")
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m not in own]


def test_every_eager_module_has_one_place_in_the_layers():
    modules = {module_name(p) for p in (ROOT / "eager").rglob("*.py")}
    assert len(ORDER) == len(set(ORDER)), "a module is listed twice"
    assert sorted(modules - set(ORDER)) == [], "add these modules to LAYERS"
    assert sorted(set(ORDER) - modules) == [], "these modules in LAYERS no longer exist"


def test_no_module_imports_one_listed_after_it():
    upward = [f"{importer} imports {imported} (line {line})"
              for importer, imported, line, _ in _eager_imports()
              if (importer, imported) not in ALLOWED
              and any(POSITION.get(m, -1) >= POSITION[importer]
                      for m in _loaded_with(importer, imported) if m.startswith("eager"))]
    assert upward == []


def test_imports_inside_functions_are_only_the_listed_ones():
    """A module lower in the order is imported at the top of the file; one higher up is not
    imported at all (its layer attaches what it adds)."""
    inside = [f"{importer} imports {imported} inside a function (line {line})"
              for importer, imported, line, in_function in _eager_imports()
              if in_function and (importer, imported) not in ALLOWED]
    assert inside == []


def test_eager_loads_no_other_project_package_but_ir_and_runtime_at_import():
    others = [f"{importer} imports {imported} (line {line})"
              for importer, imported, line, in_function in _eager_imports()
              if not in_function and imported.partition(".")[0] not in ("eager", "ir",
                                                                          "runtime")]
    assert others == []


def test_every_allowed_import_is_still_made():
    """So the list shrinks as imports are untied: an entry no import needs must go."""
    made = {(importer, imported) for importer, imported, _, _ in _eager_imports()}
    assert sorted(set(ALLOWED) - made) == []


def test_import_eager_defers_the_libraries_and_still_gives_them_as_attributes():
    """`import eager` (its time is a benchmark) loads no nn, optim, utils, cuda,
    distributed, testing, serialization, graph IR, json or PyTorch name table; each is
    there when asked for."""
    import subprocess
    import sys
    deferred = ["eager.nn", "eager.optim", "eager.utils", "eager.cuda", "eager.distributed",
                "eager.testing", "eager.serialization", "eager._torch_names", "ir.graph",
                "ir.parser", "ir.verifier", "json"]
    code = ("import sys, eager; print(sorted(m for m in %r if m in sys.modules)); "
            "print(eager.nn.Linear.__name__, eager.optim.SGD.__name__, eager.save.__name__, "
            "eager.load.__name__, eager.cuda.is_available(), eager.testing.assert_close.__name__, "
            "eager.utils.data.DataLoader.__name__, eager.serialization.__name__, "
            "eager.distributed.get_world_size.__name__); "
            "from eager import nn; import ir; print(nn.ReLU.__name__, ir.verify.__name__)"
            % deferred)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.splitlines() == [
        "[]", "Linear SGD save load False assert_close DataLoader eager.serialization "
        "get_world_size",
        "ReLU verify"]
