"""torch.nn.modules.pooling's names (the classes are conv.py's)."""
from eager.nn.modules.conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d,
                                   AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d)

__all__ = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool1d",
           "AvgPool2d", "MaxPool1d", "MaxPool2d"]
