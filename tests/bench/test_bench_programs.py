"""Every benchmark program of `asrdecode bench` imports and parses its options through the CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from asrdecode.cli import BENCHMARKS, main


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_bench_program_help(name):
    result = CliRunner().invoke(main, ["bench", name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"usage: asrdecode bench {name}" in result.output


def test_bench_lists_its_programs():
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    assert all(name in result.output for name in BENCHMARKS)
