"""build-graph / convert-graph / info through the CLI on the toy CTC setup."""

import json
import re
import subprocess
import sys

import kaldifst
from helpers.graph_toy import LEXICON, write_toy


def cli(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def info_rows(text: str) -> dict[str, str]:
    """key -> value of the table `asrdecode info` prints."""
    return {k.strip(): v.strip() for k, v in re.findall(r"│ ([^│\n]+?)\s*│ ([^│\n]+?)\s*│", text)}


def test_build_graph_cached_info_and_convert(tmp_path):
    toy = write_toy(tmp_path / "toy")
    cfg = tmp_path / "g.yaml"
    cfg.write_text(
        f"arpa: {toy['arpa']}\nunits: {toy['units']}\nlexicon_type: file\nlexicon: {toy['lexicon']}\n"
        "blank: last\n"
    )
    out = tmp_path / "graph"
    first = cli("build-graph", "--config", str(cfg), "topology=normal", "--out", str(out))
    assert "False" in first.stdout  # not cached
    # each stage of the recipe is reported with its time, in order (stderr)
    done = re.findall(r"graph build: (\S+) done in [0-9.]+ s", first.stderr)
    assert done == ["G", "LG", "T∘LG", "write"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["topology"] == "normal"
    words = [line.split()[0] for line in (out / "words.txt").read_text().splitlines()]
    assert set(LEXICON) <= set(words)
    again = cli("build-graph", "--config", str(cfg), "topology=normal", "--out", str(out))
    assert "True" in again.stdout  # cached: same inputs and config
    assert "graph build:" not in again.stderr
    info = cli("info", str(out)).stdout
    # states, arcs, epsilon share and bytes counted on the OpenFst file with kaldifst's iterators
    tlg = kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(out / "TLG.fst")))
    ilabels = [a.ilabel for s in range(tlg.num_states) for a in kaldifst.ArcIterator(tlg, s)]
    n_arcs, n_eps, n_states = len(ilabels), ilabels.count(0), tlg.num_states
    # int32 offsets[S+1], split[S]; float32 final[S]; int32 ilabel/olabel/nextstate + float32 weight per arc
    n_bytes = 4 * (n_states + 1) + 4 * n_states + 4 * n_states + 16 * n_arcs
    assert 0 < n_eps < n_arcs
    rows = info_rows(info)
    assert rows["states"] == f"{n_states:,}" and rows["arcs"] == f"{n_arcs:,}"
    assert rows["epsilon arcs"] == f"{n_eps:,} ({100 * n_eps / n_arcs:.1f}%)"
    assert rows["size"].startswith(f"{n_bytes:,} bytes")
    conv = tmp_path / "conv"
    cli(
        "convert-graph",
        str(out / "TLG.fst"),
        str(out / "words.txt"),
        "--out",
        str(conv),
        "--format",
        "safetensors",
    )
    assert (conv / "graph.safetensors").is_file() and not (conv / "graph.pt").exists()
    conv_info = cli("info", str(conv)).stdout
    assert (
        f"{n_arcs:,}" in conv_info and f"{n_bytes:,} bytes" in conv_info and "graph.safetensors" in conv_info
    )


def test_build_graph_bad_key_and_bad_arpa_are_one_line(tmp_path):
    toy = write_toy(tmp_path / "toy")
    proc = cli("build-graph", "topolgy=normal", "--out", str(tmp_path / "g"), check=False)
    assert proc.returncode != 0 and "topology" in proc.stderr and "Traceback" not in proc.stderr
    toy["arpa"].write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0 a\n\\end\\\n")
    proc = cli(
        "build-graph",
        f"arpa={toy['arpa']}",
        f"units={toy['units']}",
        "lexicon_type=file",
        f"lexicon={toy['lexicon']}",
        "--out",
        str(tmp_path / "g"),
        check=False,
    )
    assert proc.returncode != 0 and "lm.arpa" in proc.stderr and "Traceback" not in proc.stderr
