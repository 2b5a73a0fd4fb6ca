"""build_graph inputs: cache, gzip ARPA, one-line errors for bad files, generated lexicons."""

import gzip
import json
import math
import tarfile
from pathlib import Path

import kaldifst
import pytest
from helpers.graph_toy import ARPA, toy_config, write_toy

from asrdecode.errors import GraphError
from asrdecode.graph import DeviceGraph, GraphBuildConfig, build_graph
from asrdecode.graph.symbols import read_symbols
from asrdecode.graph.units import check_units_agree, read_units_entries, read_units_file, resolve_units
from asrdecode.lm.arpa import check_arpa


def test_cache_skips_rebuild_and_config_change_rebuilds(tmp_path):
    paths = write_toy(tmp_path / "in")
    cfg = toy_config(paths, topology="compact")
    meta = build_graph(cfg, tmp_path / "g")
    assert meta["cached"] is False and meta["inputs"]["arpa"]["sha256"]
    mtime = (tmp_path / "g" / "graph.pt").stat().st_mtime_ns
    again = build_graph(cfg, tmp_path / "g")
    assert again["cached"] is True
    assert (tmp_path / "g" / "graph.pt").stat().st_mtime_ns == mtime
    # same content under another name (gzip) -> different checksum -> rebuild, same graph
    with gzip.open(tmp_path / "lm.arpa.gz", "wt") as fh:
        fh.write(ARPA)
    gz = build_graph(
        toy_config({**paths, "arpa": tmp_path / "lm.arpa.gz"}, topology="compact"), tmp_path / "g"
    )
    assert gz["cached"] is False
    assert gz["sizes"]["TLG"] == meta["sizes"]["TLG"]
    other = build_graph(toy_config(paths, topology="minimal"), tmp_path / "g")
    assert other["cached"] is False and other["topology"] == "minimal"
    saved = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert saved["topology"] == "minimal" and set(saved["seconds"]) >= {"total"}


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda t: t.replace("ngram 2=4", "ngram 2=5"), r"lm.arpa:\d+: .*declares ngram 2=5"),
        (lambda t: t.replace("-0.3 ab ba", "-0.x ab ba"), r"lm.arpa:15: '-0.x' is not a number"),
        (lambda t: t.replace("\\end\\\n", ""), r"lm.arpa:\d+: missing \\end\\"),
        (lambda t: t.replace("-0.4 c c", "-0.4 c c -0.1"), r"lm.arpa:17: a 2-gram line"),
        (lambda t: t.replace("\\data\\", "data"), r"no \\data\\ section"),
    ],
)
def test_malformed_arpa_is_one_line_error(tmp_path, mutate, match):
    paths = write_toy(tmp_path / "in")
    paths["arpa"].write_text(mutate(ARPA))
    with pytest.raises(GraphError, match=match) as err:
        build_graph(toy_config(paths), tmp_path / "g")
    assert "\n" not in str(err.value)


def test_check_arpa_reads_counts_and_vocab(tmp_path):
    (tmp_path / "lm.arpa").write_text(ARPA)
    s = check_arpa(tmp_path / "lm.arpa")
    assert s.counts == {1: 6, 2: 4} and s.order == 2
    assert s.vocab == ["</s>", "<s>", "ab", "ba", "c", "cab"]


def test_lexicon_problems(tmp_path):
    paths = write_toy(tmp_path / "in")
    paths["lexicon"].write_text("ab a b\n\nba b a\n")
    with pytest.raises(GraphError, match=r"lexicon.txt:2: empty lexicon line"):
        build_graph(toy_config(paths), tmp_path / "g")
    paths["lexicon"].write_text("ab a b\nba b a\nzz a\nc q\nc c\n")
    meta = build_graph(toy_config(paths), tmp_path / "g")
    assert meta["dropped_lexicon_words"] == {"word not in the LM": 1, "unit not in the model": 1}
    assert meta["words"]["with_pronunciation"] == 3 and meta["words"]["without_pronunciation"] == 1
    paths["lexicon"].write_text("ab\n")
    with pytest.raises(GraphError, match=r"lexicon.txt:1: word 'ab' has no units"):
        build_graph(toy_config(paths), tmp_path / "g2")


def test_units_files(tmp_path):
    p = tmp_path / "tokens.txt"
    p.write_text("<blk> 0\na 1\nb 2\n#0 3\n")
    units = resolve_units(read_units_file(p), "auto")
    assert units.blank_column == 0 and units.id_of() == {"a": 2, "b": 3}
    p.write_text("a 0\nb 0\n")
    with pytest.raises(GraphError, match="tokens.txt:2: id 0 is used twice"):
        read_units_file(p)
    nemo = resolve_units(["a", "b"], "auto")  # no blank entry: NeMo's blank-last
    assert nemo.blank_column == 2 and nemo.blank_ilabel == 3
    with pytest.raises(GraphError, match="not the first column"):
        resolve_units(["a", "<blk>"], "first")


def test_char_lexicon_with_word_separator(tmp_path):
    """Character model (units from a model list, blank last, ' ' between words)."""
    rename = {"ab": "xy", "ba": "yx", "c": "z", "cab": "zxy"}
    arpa = "\n".join(" ".join(rename.get(f, f) for f in line.split(" ")) for line in ARPA.splitlines()) + "\n"
    (tmp_path / "lm.arpa").write_text(arpa)
    cfg = GraphBuildConfig(
        arpa=str(tmp_path / "lm.arpa"),
        unit_list=[" ", "x", "y", "z"],
        lexicon_type="chars",
        word_separator=" ",
        topology="compact",
    )
    meta = build_graph(cfg, tmp_path / "g")
    assert meta["blank_column"] == 4 and meta["words"]["with_pronunciation"] == 4
    tlg = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(tmp_path / "g" / "TLG.fst")))
    words = read_symbols(tmp_path / "g" / "words.txt")
    col = {" ": 0, "x": 1, "y": 2, "z": 3, "_": 4}
    for spec, expected in [("xy_ yx", ["xy", "yx"]), ("xyyx", ["xy", "yx"]), ("zxy z", ["zxy", "z"])]:
        acc = kaldifst.make_linear_acceptor([col[ch] + 1 for ch in spec])
        ok, _, out, w = kaldifst.get_linear_symbol_sequence(
            kaldifst.shortest_path(kaldifst.compose(acc, tlg))
        )
        assert ok and [words[o] for o in out] == expected, spec
        assert math.isfinite(w.value)
    g = DeviceGraph.load(tmp_path / "g" / "graph.pt")
    units_txt = read_symbols(tmp_path / "g" / "units.txt")
    assert units_txt[1] == "<space>" and units_txt[5] == "<blk>" and g.max_ilabel == 5


def test_bpe_lexicon_from_sentencepiece(tmp_path):
    import sentencepiece as spm

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ab ba c cab\n" * 50 + "abc bac cba\n" * 20)
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "bpe"),
        vocab_size=12,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    (tmp_path / "lm.arpa").write_text(ARPA)
    cfg = GraphBuildConfig(
        arpa=str(tmp_path / "lm.arpa"),
        unit_list=pieces,
        lexicon_type="bpe",
        sentencepiece_model=str(tmp_path / "bpe.model"),
        topology="minimal",
    )
    build_graph(cfg, tmp_path / "g")
    tlg = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(tmp_path / "g" / "TLG.fst")))
    words = read_symbols(tmp_path / "g" / "words.txt")
    ids = sp.encode("ab ba")  # pieces of the two words, in column order = piece id
    acc = kaldifst.make_linear_acceptor([i + 1 for i in ids])
    ok, _, out, _ = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(kaldifst.compose(acc, tlg)))
    assert ok and [words[o] for o in out] == ["ab", "ba"]


NEMO = Path(__file__).resolve().parent.parent / "fixtures" / "nemo" / "ctc_bpe.nemo"


def test_units_and_bpe_spelling_from_nemo_model(tmp_path):
    """Units = the model's vocabulary with blank last (column 128 -> ilabel 129); BPE lexicon from
    the tokenizer inside the .nemo; checked against sentencepiece run directly on the words."""
    import sentencepiece as spm

    unigrams = "-1.0 </s>\n-99 <s>\n-0.5 forward\n-0.6 ten\n-0.7 meters\n"
    arpa = "\\data\\\nngram 1=5\n\n\\1-grams:\n" + unigrams + "\n\\end\\\n"
    (tmp_path / "lm.arpa").write_text(arpa)
    cfg = GraphBuildConfig(
        arpa=str(tmp_path / "lm.arpa"), model=str(NEMO), lexicon_type="bpe", topology="normal"
    )
    meta = build_graph(cfg, tmp_path / "g")
    assert meta["blank_column"] == 128 and meta["blank_ilabel"] == 129 and meta["num_columns"] == 129
    assert meta["inputs"]["model"]["sha256"]
    with tarfile.open(NEMO) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("_tokenizer.model"))
        (tmp_path / "sp.model").write_bytes(tar.extractfile(member).read())
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    ids = sp.encode("ten meters forward")
    tlg = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(tmp_path / "g" / "TLG.fst")))
    frames = []
    for i in ids:  # normal topology: a blank between all tokens
        frames += [i + 1, 129]
    acc = kaldifst.make_linear_acceptor(frames)
    ok, _, out, _ = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(kaldifst.compose(acc, tlg)))
    words = read_symbols(tmp_path / "g" / "words.txt")
    assert ok and [words[o] for o in out] == ["ten", "meters", "forward"]
    # a tokens.txt that disagrees with the model is a one-line error naming the unit
    vocab = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab[5] = "XX"
    (tmp_path / "tokens.txt").write_text("".join(f"{v} {i}\n" for i, v in enumerate(vocab)))
    bad = GraphBuildConfig(
        arpa=str(tmp_path / "lm.arpa"),
        model=str(NEMO),
        units=str(tmp_path / "tokens.txt"),
        lexicon_type="bpe",
    )
    with pytest.raises(GraphError, match=r"tokens.txt:6: column 5 is 'XX' but .*ctc_bpe.nemo has"):
        build_graph(bad, tmp_path / "g2")


MODEL_UNITS = ["a", "b", "c", "d"]  # a NeMo-style model: 4 units, blank added as column 4


@pytest.mark.parametrize(
    "lines,match",
    [
        # blank entry first although the model's blank is last: line 1 is the first wrong one
        (["<blk> 0", "a 1", "b 2", "c 3", "d 4"], r"tokens.txt:1: column 0 is a blank but m.nemo has 'a'"),
        # blank in the middle
        (["a 0", "b 1", "<blk> 2", "c 3", "d 4"], r"tokens.txt:3: column 2 is a blank .*blank is column 4"),
        # ids out of line order: the line of the wrong id is named, not its position in the file
        (["b 1", "a 0", "d 2", "c 3"], r"tokens.txt:3: column 2 is 'd' but m.nemo has 'c'"),
        # a unit where the model has its blank
        (["a 0", "b 1", "c 2", "d 3", "e 4"], r"tokens.txt:5: 'e' is past the last column"),
        (["a 0", "b 1", "c 2", "d 3", "<blk> 4", "e 5"], r"tokens.txt:6: 'e' is past the last column"),
        (["a 0", "b 1", "c 2"], r"tokens.txt:3: the file ends after 3 units; m.nemo has 4 besides"),
        (["a", "b", "x", "d"], r"tokens.txt:3: column 2 is 'x' but m.nemo has 'c'"),
    ],
)
def test_token_file_disagreeing_with_model_names_the_line(tmp_path, lines, match):
    p = tmp_path / "tokens.txt"
    p.write_text("\n".join(lines) + "\n")
    model = resolve_units(MODEL_UNITS, "last", source="m.nemo")
    with pytest.raises(GraphError, match=match) as err:
        check_units_agree(read_units_entries(p), model, p, "m.nemo")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "lines", [["a 0", "b 1", "c 2", "d 3"], ["a 0", "b 1", "c 2", "d 3", "<blk> 4"], ["a", "b", "c", "d"]]
)
def test_token_file_agreeing_with_model(tmp_path, lines):
    p = tmp_path / "tokens.txt"
    p.write_text("\n".join(lines) + "\n")
    model = resolve_units(MODEL_UNITS, "last", source="m.nemo")
    check_units_agree(read_units_entries(p), model, p, "m.nemo")  # raises on disagreement
    assert [n for n, _ in read_units_entries(p)][:4] == MODEL_UNITS


# ---------------------------------------------------------------- atomic folder, cache key, formats
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _assert_meta_matches_graph(folder: Path) -> None:
    """meta.json describes the graph files beside it (sizes recomputed from the loaded arrays)."""
    meta = json.loads((folder / "meta.json").read_text())
    for name in meta["graph_files"]:
        g = DeviceGraph.load(folder / name)
        assert g.summary() == meta["sizes"]["TLG"], name
        assert g.meta["topology"] == meta["topology"]


@pytest.mark.parametrize("where", ["save", "fst"])
def test_interrupted_build_leaves_previous_graph_intact(tmp_path, monkeypatch, where):
    import asrdecode.graph.tlg as tlg_mod

    paths = write_toy(tmp_path / "in")
    out = tmp_path / "g"
    build_graph(toy_config(paths, topology="compact"), out)
    (out / "notes.txt").write_text("mine")  # a user's file in the folder
    before = _snapshot(out)

    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    if where == "save":  # after graph.pt is written, before graph.safetensors / TLG.fst / meta.json
        real_save = DeviceGraph.save

        def save_then_fail(self, path):
            real_save(self, path)
            raise RuntimeError("interrupted")

        monkeypatch.setattr(DeviceGraph, "save", save_then_fail)
    else:
        monkeypatch.setattr(tlg_mod, "make_ctc_topo", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        build_graph(toy_config(paths, topology="normal"), out)
    monkeypatch.undo()
    assert _snapshot(out) == before  # every file byte-identical, nothing added
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".g.")] == []  # no staging left over
    _assert_meta_matches_graph(out)
    assert build_graph(toy_config(paths, topology="compact"), out)["cached"] is True


def test_stage_of_a_killed_build_is_removed_by_the_next_build(tmp_path):
    """A build killed with SIGKILL cannot clean up its `.g.building-PID@HOST-*` stage; the next
    build of the same folder removes it (its process is gone), but not a live process's stage nor
    one of another host."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    paths = write_toy(tmp_path / "in")
    out = tmp_path / "g"
    code = (
        "import os, signal, sys\n"
        "from asrdecode.graph.staging import staged_folder\n"
        "with staged_folder(sys.argv[1]) as stage:\n"
        "    (stage / 'graph.pt').write_bytes(b'half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], check=False)
    assert proc.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".g.building-")]
    assert len(left) == 1 and (left[0] / "graph.pt").read_bytes() == b"half"
    host = socket.gethostname()
    live = tmp_path / f".g.building-{os.getpid()}@{host}-abc123"  # this test's own (live) process
    dead_pid = left[0].name.split("-")[1].split("@")[0]  # the killed build's pid
    assert left[0].name.startswith(f".g.building-{dead_pid}@{host}-")
    other_host = tmp_path / f".g.building-{dead_pid}@{host}.elsewhere-abc123"
    live.mkdir()
    other_host.mkdir()
    build_graph(toy_config(paths, topology="compact"), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["g", "in", live.name, other_host.name])
    _assert_meta_matches_graph(out)


@pytest.mark.parametrize("exchange", [True, False])
def test_rebuild_replaces_folder_keeps_user_files(tmp_path, monkeypatch, exchange):
    import asrdecode.graph.staging as staging

    if not exchange:  # the two-rename path used where the OS has no atomic exchange
        monkeypatch.setattr(staging, "exchange_paths", lambda a, b: False)
    paths = write_toy(tmp_path / "in")
    out = tmp_path / "g"
    build_graph(toy_config(paths, topology="compact"), out)
    (out / "notes.txt").write_text("mine")
    meta = build_graph(toy_config(paths, topology="normal", format="pt"), out)
    assert meta["cached"] is False and meta["graph_files"] == ["graph.pt"]
    names = sorted(p.name for p in out.iterdir())
    # the stale graph.safetensors of the compact build is gone with the rest of that build
    assert names == ["TLG.fst", "graph.pt", "meta.json", "notes.txt", "units.txt", "words.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    _assert_meta_matches_graph(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g", "in"]


def test_cache_key_holds_code_versions(tmp_path, monkeypatch):
    import asrdecode
    import asrdecode.graph.staging as build_mod  # the cache key and the cached-meta check

    paths = write_toy(tmp_path / "in")
    cfg = toy_config(paths)
    meta = build_graph(cfg, tmp_path / "g")
    assert meta["cache_key"]["code"] == {
        "format_version": build_mod.FORMAT_VERSION,
        "recipe_version": build_mod.RECIPE_VERSION,
        "asrdecode": asrdecode.__version__,
    }
    assert build_graph(cfg, tmp_path / "g")["cached"] is True
    for attr, value in (("FORMAT_VERSION", 99), ("RECIPE_VERSION", 99), ("__version__", "9.9.9")):
        with monkeypatch.context() as m:
            m.setattr(build_mod, attr, value)
            assert build_mod.cached_meta(cfg, tmp_path / "g") is None, attr
    assert build_mod.cached_meta(cfg, tmp_path / "g") is not None
    # the files the format asks for must be there too
    (tmp_path / "g" / "graph.safetensors").unlink()
    assert build_mod.cached_meta(cfg, tmp_path / "g") is None
    with pytest.raises(GraphError, match="format 'npz' is not one of pt, safetensors, both"):
        build_graph(toy_config(paths, format="npz"), tmp_path / "g")
