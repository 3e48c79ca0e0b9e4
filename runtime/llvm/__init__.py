"""The LLVM toolkit and JIT under every CPU and CUDA kernel generator.

    toolkit.py         IR building blocks: types, splats, intrinsics, loops with masked tails
    passes.py          LLVM's optimisation pipeline
    target.py          the CPU to generate for (the host's, or KILN_CPU's)
    jit.py             IR -> machine code -> callable addresses, through the kernel cache
    cache.py           the kernel cache, in memory and on disk ($KILN_CACHE_DIR)
    cache_trust.py     what a disk entry must be before it is read
    elf_object.py      an object file's sections, symbols and relocations, checked
    elf_loader.py      objects loaded and relocated without MCJIT
    compile_service.py background compile workers (compile_worker.py)
"""
