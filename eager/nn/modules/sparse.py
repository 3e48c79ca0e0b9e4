"""torch.nn.modules.sparse's names (Embedding is layers.py's)."""
from eager.nn.modules.layers import Embedding

__all__ = ["Embedding"]
