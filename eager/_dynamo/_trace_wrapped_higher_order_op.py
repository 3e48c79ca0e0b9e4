"""torch._dynamo._trace_wrapped_higher_order_op: transformers imports
TransformGetItemToIndex, a TorchFunctionMode it enters only around torch.vmap; kiln has
neither, so making one raises NotSupportedYet naming it."""
from eager import _missing

TransformGetItemToIndex = _missing.lacking_class("torch._dynamo._trace_wrapped_higher_order_op",
                                                 "TransformGetItemToIndex")
