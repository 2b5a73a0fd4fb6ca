"""Count the torch operations a piece of decoder code launches and the host synchronisations among
them, on any device (a `TorchDispatchMode`; ``torch.cuda.set_sync_debug_mode`` only works on CUDA).

A *host synchronisation* is an operation whose result the host must wait for on a GPU:

* a device value read as a Python number (``item()``, ``int(t)``, ``bool(t)``: ``_local_scalar_dense``);
* an output whose size depends on the data (``nonzero``, ``unique*``, ``masked_select``, boolean-mask
  indexing, ``repeat_interleave`` without ``output_size``, ``bincount``);
* a blocking device-to-host copy (``_to_copy`` / ``copy_`` to the CPU without ``non_blocking``).

On a CPU run the last kind is counted for explicit copies (``t.to("cpu", copy=True)``); ``tolist()``
and ``numpy()`` of a CPU tensor do not reach the dispatcher, so code that wants its reads counted
goes through such a copy first (the WFST core does).

    with DispatchCounter() as c:
        search.step(...)
    c.ops, c.syncs, c.sync_ops  # totals and a Counter of the sync-inducing op names
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_ALWAYS_SYNC = {
    "aten._local_scalar_dense",
    "aten.nonzero",
    "aten.nonzero_static",
    "aten._unique",
    "aten._unique2",
    "aten.unique_dim",
    "aten.unique_consecutive",
    "aten.unique_dim_consecutive",
    "aten.masked_select",
    "aten.bincount",
}
_IGNORED = {"aten.detach", "aten.lift_fresh"}  # metadata-only wrappers


def _is_cpu(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def sync_reason(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The name under which `func(*args, **kwargs)` counts as a host sync, or None."""
    name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
    if name in _ALWAYS_SYNC:
        return name
    if (
        name == "aten.index"
        and len(args) > 1
        and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)
    ):
        return "aten.index(bool mask)"
    if name == "aten.repeat_interleave" and kwargs.get("output_size") is None and len(args) < 4:
        return "aten.repeat_interleave(no output_size)"
    if name == "aten._to_copy" and _is_cpu(kwargs.get("device")) and not kwargs.get("non_blocking", False):
        return "aten._to_copy(to host)"
    if name == "aten.copy_" and len(args) >= 2:
        dst, src = args[0], args[1]
        non_blocking = bool(args[2]) if len(args) > 2 else bool(kwargs.get("non_blocking", False))
        if dst.device.type == "cpu" and src.device.type != "cpu" and not non_blocking:
            return "aten.copy_(to host)"
    return None


class DispatchCounter(TorchDispatchMode):
    """Counts every dispatched aten op (`ops`, `op_names`) and the host syncs among them (`syncs`,
    `sync_ops`); see the module docstring for what counts as a sync."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.syncs = 0
        self.op_names: Counter[str] = Counter()
        self.sync_ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        if name not in _IGNORED:
            self.ops += 1
            self.op_names[name] += 1
            reason = sync_reason(func, args, kwargs)
            if reason is not None:
                self.syncs += 1
                self.sync_ops[reason] += 1
        return func(*args, **kwargs)
