"""kiln's compiler: capture into the IR, optimise, lower through llvmlite.

Not built yet: `compile` says so plainly rather than pretending to compile.
"""


def compile(fn=None, **options):  # noqa: A001 - PyTorch's name
    raise NotImplementedError("kiln's compiler is not built yet: compile() arrives with graph "
                              "capture (IR and graph capture issue); run the function eagerly")
