"""torch.nn.attention.flex_attention: named, not provided (transformers imports BlockMask
and create_block_mask at import to annotate and build flex masks; it builds them only for
attn_implementation="flex_attention"). Making or calling one raises NotSupportedYet."""
from eager import _missing

_HERE = "torch.nn.attention.flex_attention"
_DEFAULT_SPARSE_BLOCK_SIZE = 128  # PyTorch's constant (a block mask's tile)
BlockMask = _missing.lacking_class(_HERE, "BlockMask")
AuxRequest = _missing.lacking_class(_HERE, "AuxRequest")
create_block_mask = _missing.not_supported(_HERE, "create_block_mask")
flex_attention = _missing.not_supported(_HERE, "flex_attention")
and_masks = _missing.not_supported(_HERE, "and_masks")
or_masks = _missing.not_supported(_HERE, "or_masks")

__getattr__ = _missing.module_getattr(_HERE, "eager.nn.attention.flex_attention")
