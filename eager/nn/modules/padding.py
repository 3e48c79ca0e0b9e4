"""torch.nn.modules.padding's names (the classes are normalization.py's)."""
from eager.nn.modules.normalization import (  # noqa: F401 - re-exported (__all__)
                                            CircularPad1d, CircularPad2d, CircularPad3d,
                                            ConstantPad1d, ConstantPad2d, ConstantPad3d,
                                            ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                                            ReplicationPad1d, ReplicationPad2d,
                                            ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)

__all__ = [f"{kind}Pad{d}d" for kind in ("Circular", "Constant", "Reflection", "Replication",
                                         "Zero") for d in (1, 2, 3)]
