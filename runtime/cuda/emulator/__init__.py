"""The parts of runtime/cuda/emulator/launch.py: values (how LLVM values are held, the data
layout), memory (regions, checked loads and stores), operations (what each instruction
and math intrinsic computes), collectives (barriers, shuffles, votes), program (a kernel
translated into Python closures)."""
