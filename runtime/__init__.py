"""Running native code: the CUDA driver today; JIT engines, kernel cache and thread pool
come with the native backend. Imports nothing else of the project."""
