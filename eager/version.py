"""torch.version: what PyTorch's module of that name says about the build.

kiln is no build of PyTorch: `cuda`, `hip`, `rocm` and `xpu` (the toolkit versions
PyTorch was compiled with) are None, as in a CPU build; kiln's CUDA backend generates its
kernels at run time and needs only the driver (eager.cuda.is_available() says whether
there is one)."""
from eager.torch_version import __version__

__all__ = ["__version__", "debug", "cuda", "git_version", "hip", "rocm", "xpu"]

debug = False
cuda = None
git_version = "unknown"  # PyTorch's commit; kiln is no commit of PyTorch
hip = None
rocm = None
xpu = None
