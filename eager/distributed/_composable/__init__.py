"""torch.distributed._composable: see fsdp.py."""
