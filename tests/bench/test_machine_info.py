"""What every benchmark records about the machine: the CPU's model and caches, not only its
architecture (ratios to a peer move with the CPU model)."""

from pathlib import Path

import pytest

from asrdecode.bench.harness import cache_sizes, cpu_model, machine_info


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="needs Linux's /proc/cpuinfo")
def test_cpu_model_is_the_model_name():
    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    assert cpu_model() == (names[0] if names else cpu_model())


def test_machine_info_records_model_caches_and_load():
    info = machine_info((0.5, 0.4, 0.3))
    assert info["cpu"] == cpu_model()
    assert info["caches"] == cache_sizes()
    assert info["load_average_at_start"] == (0.5, 0.4, 0.3)
    if Path("/sys/devices/system/cpu/cpu0/cache/index2/size").is_file():
        assert "L2" in info["caches"]
