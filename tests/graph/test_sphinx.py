"""HCLG for the pocketsphinx 5.1.1 en-us model (files from the installed pocketsphinx package)."""

import importlib.resources
import math
import struct
from pathlib import Path

import kaldifst
import numpy as np
import pytest

from asrdecode.graph import DeviceGraph
from asrdecode.graph.sphinx import SphinxGraphConfig, build_sphinx_hclg
from asrdecode.graph.symbols import read_symbols
from asrdecode.models.sphinx_io import read_mdef, read_tmat

PS_MODEL = Path(str(importlib.resources.files("pocketsphinx") / "model" / "en-us"))
MEMBERS = {
    "mdef": "en-us/mdef",
    "transition_matrices": "en-us/transition_matrices",
    "noisedict": "en-us/noisedict",
    "dict": "cmudict-en-us.dict",
}
WORDS = ["go", "forward", "ten", "meters", "back"]
ARPA = """\\data\\
ngram 1=7

\\1-grams:
-0.8 </s>
-99 <s>
-0.7 go
-0.9 forward
-0.9 ten
-1.0 meters
-1.1 back

\\end\\
"""


@pytest.fixture(scope="module")
def sphinx(tmp_path_factory):
    d = tmp_path_factory.mktemp("sphinx")
    model = d / "en-us"
    model.mkdir()
    for key, name in MEMBERS.items():
        data = (PS_MODEL / name).read_bytes()
        if key == "dict":  # only the words of the test LM keeps the graph tiny
            lines = data.decode().splitlines()
            keep = [ln for ln in lines if ln.split()[0].split("(")[0] in WORDS]
            (d / "words.dict").write_text("\n".join(keep) + "\n")
        else:
            (model / key).write_bytes(data)
    (d / "lm.arpa").write_text(ARPA)
    cfg = SphinxGraphConfig(model_dir=str(model), dictionary=str(d / "words.dict"), arpa=str(d / "lm.arpa"))
    meta = build_sphinx_hclg(cfg, d / "graph")
    return d, meta


def test_mdef_facts_and_tree_agree_with_phone_table(sphinx):
    d, meta = sphinx
    m = read_mdef(d / "en-us" / "mdef")
    assert len(m.ciphones) == 42 and m.n_sen == 5126 and m.n_phone - 42 == 137053
    assert meta["mdef"] == {"ciphones": 42, "triphones": 137053, "senones": 5126, "emitting_states": 3}
    # the cd_tree walk and each phone's own (wpos, base, left, right) record are independent
    data = (d / "en-us" / "mdef").read_bytes()
    hdr = struct.unpack_from("<i", data, 8)[0]
    pos = 12 + hdr
    counts = struct.unpack_from("<10i", data, pos)
    pos += 40
    start = pos
    for _ in range(counts[0]):
        pos = data.index(b"\0", pos) + 1
    pos = start + ((pos - start + 3) & ~3) + 8 * counts[8]
    attrs = np.frombuffer(data, dtype=np.uint8, count=12 * counts[1], offset=pos).reshape(-1, 12)[:, 8:]
    assert len(m.tree) == 137053
    assert all(tuple(int(x) for x in attrs[pid]) == key for key, pid in m.tree.items())
    assert m.sseq.max() < 5126


def test_transition_matrices_rows_are_distributions(sphinx):
    d, _ = sphinx
    tp = read_tmat(d / "en-us" / "transition_matrices")
    assert tp.shape == (42, 3, 4)
    assert np.allclose(tp.sum(-1), 1.0)
    assert (np.triu(np.ones((3, 4)), 0)[None] >= (tp > 0)).all()  # left-to-right only


def test_nearest_backs_off_to_other_word_position(sphinx):
    d, _ = sphinx
    m = read_mdef(d / "en-us" / "mdef")
    key = next((k for k in m.tree if k[0] == 0 and (1, k[1], k[2], k[3]) not in m.tree), None)
    assert key is not None
    _, c, lc, rc = key
    assert m.phone_id(c, lc, rc, 1) == -1
    assert m.phone_id_nearest(c, lc, rc, 1) == m.tree[key]  # 'b' missing -> 'i' (first other position)
    ci_only = m.phone_id_nearest(c, m.sil, m.sil, 3)
    assert ci_only == c or ci_only >= 42


def senones_for(m, phones_of_words: list[list[str]]) -> list[int]:
    """Senone sequence of a word string with cross-word triphones (silence at the edges)."""
    ci = {n: i for i, n in enumerate(m.ciphones)}
    seq = []
    flat = [(ci[p], w, k, len(ph)) for w, ph in enumerate(phones_of_words) for k, p in enumerate(ph)]
    for i, (c, _, k, n) in enumerate(flat):
        pos = 3 if n == 1 else 1 if k == 0 else 2 if k == n - 1 else 0
        lc = flat[i - 1][0] if i > 0 else m.sil
        rc = flat[i + 1][0] if i + 1 < len(flat) else m.sil
        pid = m.phone_id_nearest(c, lc, rc, pos)
        seq += [int(s) for s in m.sseq[m.ssid[pid]]]
    return seq


def test_kaldi_decoder_reads_sphinx_hclg(sphinx):
    import kaldi_decoder

    d, meta = sphinx
    assert meta["num_columns"] == 5126 and meta["words"]["with_pronunciation"] == len(WORDS)
    m = read_mdef(d / "en-us" / "mdef")
    prons = {}
    for line in (d / "words.dict").read_text().splitlines():
        f = line.split()
        prons.setdefault(f[0], f[1:])  # first pronunciation
    words = ["go", "forward", "ten", "meters"]
    frames = [s for s in senones_for(m, [prons[w] for w in words]) for _ in range(2)]
    lp = np.full((len(frames), 5126), math.log(1e-4), dtype=np.float32)
    lp[np.arange(len(frames)), frames] = math.log(0.5)
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(d / "graph" / "HCLG.fst")))
    dec = kaldi_decoder.FasterDecoder(fst, kaldi_decoder.FasterDecoderOptions(beam=30.0))
    dec.decode(kaldi_decoder.DecodableCtc(lp))
    ok, lat = dec.get_best_path()
    assert ok
    _, _, out, _ = kaldifst.get_linear_symbol_sequence(lat)
    table = read_symbols(d / "graph" / "words.txt")
    assert [table[o] for o in out] == words
    g = DeviceGraph.load(d / "graph" / "graph.pt")
    assert g.meta["kind"] == "HCLG" and g.max_ilabel <= 5126


def test_build_graph_kind_hclg_sphinx_is_cached(sphinx, tmp_path):
    from asrdecode.graph import GraphBuildConfig, build_graph, describe_graph

    d, _ = sphinx
    cfg = GraphBuildConfig(
        kind="hclg-sphinx",
        arpa=str(d / "lm.arpa"),
        acoustic_model=str(d / "en-us"),
        lexicon=str(d / "words.dict"),
    )
    events = []
    meta = build_graph(cfg, tmp_path / "g", on_stage=lambda name, event, s: events.append((name, event)))
    assert meta["cached"] is False and set(meta["inputs"]) >= {"mdef", "transition_matrices", "noisedict"}
    stages = ["G", "LG", "CLG", "H∘CLG", "determinize", "minimize", "write"]
    assert events == [(name, event) for name in stages for event in ("start", "done")]
    assert set(meta["seconds"]) == {*stages, "total"}
    assert build_graph(cfg, tmp_path / "g")["cached"] is True
    info = describe_graph(tmp_path / "g")
    assert info["kind"] == "HCLG" and info["words (vocabulary)"] == str(len(WORDS))


def test_edge_silence_is_required_free_and_transition_scale_applies(sphinx):
    """pocketsphinx's utterances begin and end with its silence words `<s>`/`</s>` (no insertion
    cost), and its transition and silence costs sit on the acoustic side (`transition_scale`).
    Every path of the HCLG starts by reading the silence HMM's first senone; decoded with
    kaldi-decoder, one more frame per silence HMM state at both edges costs exactly its acoustic
    cost plus the scaled self-loop costs of the silence HMM (no -ln(silprob))."""
    import kaldi_decoder

    d, _ = sphinx
    scale = 0.5
    cfg = SphinxGraphConfig(
        model_dir=str(d / "en-us"),
        dictionary=str(d / "words.dict"),
        arpa=str(d / "lm.arpa"),
        transition_scale=scale,
    )
    build_sphinx_hclg(cfg, d / "graph-scaled")
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(d / "graph-scaled" / "HCLG.fst")))
    table = read_symbols(d / "graph-scaled" / "words.txt")
    m = read_mdef(d / "en-us" / "mdef")
    tmat = read_tmat(d / "en-us" / "transition_matrices")[m.tmat[m.sil]]
    sil = [int(s) for s in m.sseq[m.ssid[m.sil]]]
    prons = {}
    for line in (d / "words.dict").read_text().splitlines():
        f = line.split()
        prons.setdefault(f[0], f[1:])
    words = ["go", "back"]
    frames = [s for s in senones_for(m, [prons[w] for w in words]) for _ in range(2)]
    edge = [s for s in sil for _ in range(2)]

    def decode(seq: list[int]) -> tuple[list[str], float]:
        lp = np.full((len(seq), 5126), math.log(1e-4), dtype=np.float32)
        lp[np.arange(len(seq)), seq] = math.log(0.5)
        dec = kaldi_decoder.FasterDecoder(fst, kaldi_decoder.FasterDecoderOptions(beam=40.0))
        dec.decode(kaldi_decoder.DecodableCtc(lp))
        ok, lat = dec.get_best_path()
        assert ok
        _, _, out, w = kaldifst.get_linear_symbol_sequence(lat)
        return [table[o] for o in out], w.value1 + w.value2

    longer = [s for s in sil for _ in range(3)]
    short_words, short = decode(edge + frames + edge)
    long_words, long = decode(longer + frames + longer)
    assert short_words == long_words == words
    self_loops = sum(-math.log(tmat[i, i]) for i in range(3))  # one more frame in each state
    expected = 2 * (len(sil) * -math.log(0.5) + scale * self_loops)
    assert long - short == pytest.approx(expected, abs=1e-3)

    g = DeviceGraph.load(d / "graph-scaled" / "graph.pt")
    a = g.arc_arrays()
    reached, todo, first_reads = {g.start}, [g.start], set()
    while todo:  # the start state's epsilon closure and the units its emitting arcs read
        s = todo.pop()
        for i in np.flatnonzero(a["src"] == s):
            if a["ilabel"][i]:
                first_reads.add(int(a["ilabel"][i]) - 1)
            elif int(a["nextstate"][i]) not in reached:
                reached.add(int(a["nextstate"][i]))
                todo.append(int(a["nextstate"][i]))
    assert first_reads == {sil[0]}
