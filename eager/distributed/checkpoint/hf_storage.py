"""torch.distributed.checkpoint.hf_storage: DCP's safetensors readers and writers, named
and NotSupportedYet (see eager/distributed/checkpoint)."""
from eager import _missing

_HERE = "torch.distributed.checkpoint.hf_storage"
HuggingFaceStorageReader = _missing.lacking_class(_HERE, "HuggingFaceStorageReader")
HuggingFaceStorageWriter = _missing.lacking_class(_HERE, "HuggingFaceStorageWriter")
