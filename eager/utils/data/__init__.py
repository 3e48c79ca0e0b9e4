"""torch.utils.data: datasets, samplers and the DataLoader.

    dataset.py     Dataset, IterableDataset, TensorDataset, ConcatDataset, ChainDataset,
                   StackDataset, Subset, random_split
    sampler.py     Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler,
                   WeightedRandomSampler, BatchSampler
    collate.py     default_collate, default_convert
    dataloader.py  DataLoader: batches in the main process or in worker processes
    distributed.py DistributedSampler: each rank's share (eager.distributed)
    worker.py      the worker processes' loop, get_worker_info, and how batches cross
                   between processes
"""
from eager import _missing
from eager.utils.data.collate import default_collate, default_convert
from eager.utils.data.dataloader import DataLoader
from eager.utils.data.dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset,
                                      StackDataset, Subset, TensorDataset, random_split)
from eager.utils.data.distributed import DistributedSampler
from eager.utils.data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                                      SubsetRandomSampler, WeightedRandomSampler)
from eager.utils.data.worker import get_worker_info

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "StackDataset", "DataLoader",
           "Dataset", "DistributedSampler", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler",
           "default_collate", "default_convert", "get_worker_info", "random_split"]

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.utils.data", "eager.utils.data")
