"""The host facts the kernels adapt to: cache sizes as sysfs writes them, in bytes."""

from pathlib import Path

from asrdecode.machine import cache_sizes, l2_cache_bytes, size_bytes


def fake_caches(root: Path, levels: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(levels):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


def test_size_bytes_reads_sysfs_units():
    assert size_bytes("2048K") == 2 << 20
    assert size_bytes("1M") == 1 << 20
    assert size_bytes("512") == 512
    assert size_bytes("") == 0
    assert size_bytes("big") == 0


def test_l2_from_a_cache_folder(tmp_path):
    root = fake_caches(
        tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K")]
    )
    assert cache_sizes(root) == {"L1d": "48K", "L1i": "32K", "L2": "2048K"}
    assert l2_cache_bytes(root) == 2 << 20
    assert l2_cache_bytes(tmp_path / "missing") == 0  # unknown: the searches prefetch
