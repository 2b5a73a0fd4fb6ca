"""build-graph + transcribe --decoder wfst through the CLI, checked against kaldi-decoder's
FasterDecoder on the same TLG and the log-probs the run saved."""

from __future__ import annotations

import json
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from helpers.cli import AUDIO, MODEL, read_jsonl, run
from helpers.lattice_paths import lattice_best_path
from helpers.wfst_ref import kaldi_best_path, model_sentences, write_arpa  # noqa: E402

from asrdecode.decoders.wfst.lattice import read_kaldi_text  # noqa: E402


def wfst(inputs: str, graph_dir: Path, *args: str, check: bool = True):
    """`asrdecode transcribe INPUT --model <fixture> --decoder wfst decoder.graph=G ...`."""
    return run(
        "transcribe",
        inputs,
        "--model",
        str(MODEL),
        "--decoder",
        "wfst",
        f"decoder.graph={graph_dir}",
        *args,
        check=check,
    )


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli_wfst")
    write_arpa(d / "lm.arpa", model_sentences())
    out = d / "graph"
    run("build-graph", f"arpa={d / 'lm.arpa'}", f"model={MODEL}", "lexicon_type=bpe", "--out", str(out))
    return out


def test_wfst_cli_matches_kaldi_faster_decoder(tmp_path, graph_dir):
    out = tmp_path / "wfst"
    wfst(str(AUDIO), graph_dir, "decoder.beam=12", "threads=1", "--save-logprobs", "--out", str(out))
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    assert len(rows) == 6
    words = {
        int(i): w for w, i in (line.split() for line in (graph_dir / "words.txt").read_text().splitlines())
    }
    tlg = kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(graph_dir / "TLG.fst")))
    for utt, row in rows.items():
        lp = np.load(out / "logprobs" / f"{utt}.npy", allow_pickle=False)
        ref = kaldi_best_path(tlg, lp, beam=12.0)
        assert ref is not None
        assert row["pred_text"] == " ".join(words[o] for o in ref[3] if o > 0)
        assert row["score"] == pytest.approx(-ref[0], abs=2e-2)
        for w in row["words"]:
            assert 0 <= w["start"] <= w["end"] <= row["duration"] + 0.1


def test_wfst_lattices_and_manifest_boost(tmp_path, graph_dir):
    wavs = sorted(AUDIO.glob("*.wav"))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        "".join(json.dumps({"audio_filepath": str(w), "utt_id": w.stem}) + "\n" for w in wavs)
    )
    out = tmp_path / "lat"
    wfst(
        str(manifest),
        graph_dir,
        "decoder.lattice=true",
        "decoder.lattice_beam=2",
        "threads=1",
        "--out",
        str(out),
    )
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    # one Kaldi text archive (CompactLattice entries) for the run, one OpenFst file per utterance
    lattices = read_kaldi_text((out / "lattices" / "lat.ark.txt").read_text())
    assert set(lattices) == set(rows)
    report = json.loads((out / "report.json").read_text())
    table = (graph_dir / "words.txt").read_text().splitlines()
    words = {int(i): w for w, i in (x.split() for x in table)}
    for utt, row in rows.items():
        arcs, finals = lattices[utt]
        assert finals and (out / "lattices" / f"{utt}.fst").is_file()
        fst = kaldifst.StdVectorFst.read(str(out / "lattices" / f"{utt}.fst"))
        assert fst.num_states == 1 + max(max(s, d) for s, d, *_ in arcs)
        # the lattice's best path is the transcript, its cost the transcript's score, and its
        # units cover every frame of the utterance
        best = lattice_best_path(arcs, finals)
        assert " ".join(words[w] for w in best[0]) == row["pred_text"]
        assert -best[1] == pytest.approx(row["score"], abs=2e-3)
        assert row["lattice_density"] == pytest.approx(len(arcs) / len(best[2]), abs=1e-3)
        # every word has a lattice confidence, also in the CTM's sixth column
        assert all(0.0 <= w["conf"] <= 1.0 for w in row["words"])
    ctm = [line.split() for line in (out / "hyp.ctm").read_text().splitlines()]
    assert ctm and all(len(f) == 6 and 0.0 <= float(f[5]) <= 1.0 for f in ctm)
    assert report["lattice_density"] == pytest.approx(
        sum(r["lattice_density"] for r in rows.values()) / len(rows)
    )
    # boost a word that utterance 0 does not contain: it must appear, the others must not change
    target = wavs[0].stem
    vocab = [line.split()[0] for line in (graph_dir / "words.txt").read_text().splitlines()]
    candidates = [
        w for w in vocab if w not in rows[target]["pred_text"].split() and not w.startswith(("<", "#"))
    ]
    boost_word = candidates[0]
    lines = []
    for w in wavs:
        rec = {"audio_filepath": str(w), "utt_id": w.stem}
        if w.stem == target:
            rec["boost"] = {boost_word: 60.0}
        lines.append(json.dumps(rec))
    manifest.write_text("\n".join(lines) + "\n")
    out2 = tmp_path / "boost"
    wfst(str(manifest), graph_dir, "threads=1", "--out", str(out2))
    boosted = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out2 / "transcripts.jsonl")}
    assert boost_word in boosted[target].split()
    assert all(boosted[u] == rows[u]["pred_text"] for u in rows if u != target)


def test_boost_file_option(tmp_path, graph_dir):
    base = tmp_path / "base"
    wfst(str(AUDIO), graph_dir, "threads=1", "--out", str(base))
    before = {r["utt_id"]: r["pred_text"] for r in read_jsonl(base / "transcripts.jsonl")}
    vocab = [line.split()[0] for line in (graph_dir / "words.txt").read_text().splitlines()]
    word = next(
        w for w in vocab if not w.startswith(("<", "#")) and all(w not in t.split() for t in before.values())
    )
    boost = tmp_path / "boost.txt"
    boost.write_text(f"# hotwords\n{word} 60\n")
    out = tmp_path / "boosted"
    wfst(str(AUDIO), graph_dir, "threads=1", "--boost", str(boost), "--out", str(out))
    after = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out / "transcripts.jsonl")}
    assert any(word in t.split() for t in after.values())
    boost.write_text(f"{word} lots\n")
    proc = wfst(str(AUDIO), graph_dir, "--boost", str(boost), "--out", str(tmp_path / "bad"), check=False)
    assert proc.returncode != 0 and "boost.txt:1" in proc.stderr and "Traceback" not in proc.stderr


def test_rescore_lm(tmp_path, graph_dir):
    """`decoder.rescore_lm`: each transcript is the cheapest of the plain run's 100 best once each
    gets the new LM read exactly in place of the graph's LM as G reads it (`BackoffReadings`; the
    graph's ARPA found in its meta.json); a missing LM file is a one-line error."""
    from helpers.otf_ref import random_arpa

    from asrdecode.lm.backoff import BackoffReadings

    table = (graph_dir / "words.txt").read_text().splitlines()
    vocab = [w for w, _ in (x.split() for x in table) if not w.startswith(("<", "#"))]
    new_lm = random_arpa(tmp_path / "new.arpa", np.random.default_rng(0), vocab, 3)
    plain, rescored = tmp_path / "plain", tmp_path / "rescored"
    wfst(str(AUDIO), graph_dir, "threads=1", "decoder.nbest=100", "--out", str(plain))
    wfst(str(AUDIO), graph_dir, "threads=1", f"decoder.rescore_lm={new_lm}", "--out", str(rescored))
    new, graph = BackoffReadings.read(new_lm), BackoffReadings.read(graph_dir.parent / "lm.arpa")
    got = {r["utt_id"]: r for r in read_jsonl(rescored / "transcripts.jsonl")}
    changed = 0
    for row in read_jsonl(plain / "transcripts.jsonl"):
        costs = sorted(
            (-h["score"] + new.exact(h["text"].split()) - graph.cheapest_path(h["text"].split()), h["text"])
            for h in row["nbest"]
        )
        assert got[row["utt_id"]]["score"] == pytest.approx(-costs[0][0], abs=2e-3)
        if len(costs) == 1 or costs[1][0] - costs[0][0] > 1e-2:
            assert got[row["utt_id"]]["pred_text"] == costs[0][1]
        changed += costs[0][1] != row["pred_text"]
    assert changed  # the new LM changes some transcripts
    proc = wfst(
        str(AUDIO), graph_dir, "decoder.rescore_lm=nope.arpa", "--out", str(tmp_path / "x"), check=False
    )
    assert proc.returncode != 0 and "decoder.rescore_lm: " in proc.stderr and "Traceback" not in proc.stderr
