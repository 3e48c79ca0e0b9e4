"""torch.nn.modules.distance's names (the classes are activation.py's)."""
from eager.nn.modules.activation import CosineSimilarity, PairwiseDistance

__all__ = ["CosineSimilarity", "PairwiseDistance"]
