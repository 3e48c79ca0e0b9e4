"""Running native code: the host JIT (jit), its kernel cache (cache), a thread pool for
native kernels (threads, pool) and the CUDA driver (cuda); llvm_ir is the toolkit every
emitter of LLVM IR builds on, here and in compiler/. Imports nothing else of the project."""
