"""torch.utils.model_zoo: `load_url`, which is torch.hub.load_state_dict_from_url (no
downloads in kiln: the file must already be in the hub's cache directory), and the hub's
progress bar `tqdm`."""
from eager.hub import load_state_dict_from_url as load_url
from eager.hub import tqdm  # noqa: F401 - torchvision imports it from here

__all__ = ["load_url"]
