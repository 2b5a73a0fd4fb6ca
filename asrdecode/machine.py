"""Facts about the host CPU: its model name and per-core cache sizes. Benchmarks record them with
every figure (ratios to a peer move with the CPU model); the compiled searches read the L2 size to
decide whether prefetching a lookup table pays (`l2_cache_bytes`)."""

from __future__ import annotations

import functools
import platform
import resource
from pathlib import Path
from typing import Any

CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (`cpuinfo`), else the architecture: ratios to a peer such as
    pocketsphinx move with it (cache sizes differ between the models this shared machine runs on)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_sizes(root: Path = CPU_CACHES) -> dict[str, str]:
    """Per-core cache sizes by level ("L1d", "L2", ...) as sysfs writes them ("2048K"); empty where
    it is not readable."""
    sizes = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        sizes[name] = size
    return sizes


def size_bytes(size: str) -> int:
    """Bytes of a sysfs cache size ("2048K", "1M", "512"); 0 if it does not parse."""
    size = size.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
    digits = size[:-1] if scale > 1 else size
    return int(digits) * scale if digits.isdigit() else 0


@functools.cache
def l2_cache_bytes(root: Path = CPU_CACHES) -> int:
    """The per-core L2 cache in bytes; 0 where it is not known."""
    return size_bytes(cache_sizes(root).get("L2", ""))


def peak_memory_mb(device: Any) -> float:
    """This process's peak memory so far in MB: resident (CPU) or allocated on the GPU (a
    ``torch.device``)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if platform.system() != "Darwin" else rss / 2**20
