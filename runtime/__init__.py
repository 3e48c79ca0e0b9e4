"""Running native code: the host JIT (jit), its kernel cache (cache), a thread pool for
native kernels (threads) and the CUDA driver (cuda). Imports nothing else of the project."""
