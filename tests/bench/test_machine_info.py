"""What every benchmark records about the machine: the CPU's model and caches, not only its
architecture (ratios to a peer move with the CPU model)."""

import platform
from pathlib import Path

from asrdecode.bench.harness import cache_sizes, cpu_model, machine_info


def test_cpu_model_reads_the_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example CPU @ 2.0GHz\n\n")
    assert cpu_model(info) == "Example CPU @ 2.0GHz"
    info.write_text("processor\t: 0\n")  # no model name (some ARM kernels): the architecture
    assert cpu_model(info) == (platform.processor() or platform.machine())
    assert cpu_model(tmp_path / "missing") == (platform.processor() or platform.machine())


def test_machine_info_records_model_caches_and_load():
    info = machine_info((0.5, 0.4, 0.3))
    assert info["cpu"] == cpu_model()
    assert info["caches"] == cache_sizes()
    assert info["load_average_at_start"] == (0.5, 0.4, 0.3)
    if Path("/sys/devices/system/cpu/cpu0/cache/index2/size").is_file():
        assert "L2" in info["caches"]
