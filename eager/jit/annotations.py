"""torch.jit.annotations: the TorchScript type names that eager code annotates with.
`BroadcastingList1/2/3[float]` ("a number or a list of that many") is, outside
TorchScript, what PyTorch's is: subscripting it gives None, an annotation only."""
from typing import Any, Dict, List, Optional, Tuple, Union  # noqa: F401, UP035


class BroadcastingListCls:
    def __getitem__(self, types):
        return None


BroadcastingList1 = BroadcastingList2 = BroadcastingList3 = BroadcastingListCls()
