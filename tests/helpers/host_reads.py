"""A torch dispatch mode that records the ops a piece of code runs and which of them read tensor
data back to the host (or have data-dependent output shapes)."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class HostReads(TorchDispatchMode):
    """Records ops that read tensor data back to the host or have data-dependent output shapes."""

    SYNCING = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "item")

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.ops.append(name)
        if any(s in name for s in self.SYNCING):
            self.syncs.append(name)
        return func(*args, **(kwargs or {}))
