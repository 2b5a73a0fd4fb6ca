"""Word boosting (paper 001 sec. 3.2) on real speech through the CLI: the pocketsphinx en-us HMM,
an HCLG built with configs/graph/sphinx-en-us.yaml over a small LM, and configs/sphinx-en-us.yaml
for decoding, on seven pocketsphinx test recordings (their transcripts are the references).

The LM: the unigram probabilities of the shipped graph LM (data/lm/sphinx-en-us-72k.arpa.gz,
pocketsphinx's own en-us LM) for the words of the seven transcripts plus the words the full-LM
decode confuses them with (to, then, for, clothes, close; out/eval_real_speech.json),
renormalised. Without boosts two words are misrecognised as in the full-LM decode ("two" -> "to",
"clubs" -> "close"); a per-utterance manifest boost of 3 nats (under half the beam of 13, the
paper's rule of thumb) on the right word fixes each, and changes nothing else: not the other
words of those utterances, not the other utterances of the batch. A global --boost of the same
word leaves the utterances that do not need it unchanged. Out-of-vocabulary boost words are
listed in report.json (`boost_oov`) with a one-line warning.
"""

import gzip
import json
import math
from pathlib import Path

import pytest
from helpers.cli import read_jsonl, run

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "data" / "demo" / "real"
CLIPS = [
    "ps_goforward",
    "ps_tidigits_dhd.2934z",
    "ps_cards_001",
    "ps_cards_002",
    "ps_cards_003",
    "ps_cards_004",
    "ps_cards_005",
]
CONFUSIONS = ["to", "then", "for", "clothes", "close"]  # what decodes of these clips confuse
BOOST = 3.0
# utterance -> (boosted word, the word it replaces without the boost)
FIXES = {"ps_tidigits_dhd.2934z": ("two", "to"), "ps_cards_002": ("clubs", "close")}


def small_arpa(path: Path, vocabulary: set[str]) -> None:
    """Unigram ARPA: the shipped LM's unigram log10 probabilities of `vocabulary` + </s>, renormalised."""
    logp: dict[str, float] = {}
    with gzip.open(ROOT / "data" / "lm" / "sphinx-en-us-72k.arpa.gz", "rt", encoding="utf-8") as fh:
        section = ""
        for line in fh:
            if line.startswith("\\"):
                section = line.strip()
                if section == "\\2-grams:":
                    break
                continue
            f = line.split()
            if section == "\\1-grams:" and len(f) >= 2 and (f[1] in vocabulary or f[1] == "</s>"):
                logp[f[1]] = float(f[0])
    assert set(logp) == vocabulary | {"</s>"}
    norm = math.log10(sum(10**v for v in logp.values()))
    lines = ["\\data\\", f"ngram 1={len(logp) + 1}", "", "\\1-grams:", "-99 <s>"]
    lines += [f"{v - norm:.6f} {w}" for w, v in sorted(logp.items())]
    path.write_text("\n".join([*lines, "", "\\end\\", ""]))


def manifest(path: Path, boosts: dict[str, dict] | None = None) -> Path:
    rows = {r["audio_filepath"][:-4]: r for r in read_jsonl(REAL / "manifest.jsonl")}
    with path.open("w") as fh:
        for clip in CLIPS:
            rec = {k: rows[clip][k] for k in ("duration", "text")}
            rec["audio_filepath"] = str(REAL / f"{clip}.wav")
            if boosts and clip in boosts:
                rec["boost"] = boosts[clip]
            fh.write(json.dumps(rec) + "\n")
    return path


def transcribe(inputs: Path, graph: Path, out: Path, *extra: str):
    proc = run(
        "transcribe",
        str(inputs),
        "--config",
        str(ROOT / "configs" / "sphinx-en-us.yaml"),
        f"decoder.graph={graph}",
        "batch.max_utterances=16",  # one batch: boosted and unboosted utterances decoded together
        *extra,
        "--out",
        str(out),
    )
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    return rows, json.loads((out / "report.json").read_text()), proc


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    d = tmp_path_factory.mktemp("boost_sphinx")
    texts = {r["audio_filepath"][:-4]: r["text"] for r in read_jsonl(REAL / "manifest.jsonl")}
    vocabulary = {w for c in CLIPS for w in texts[c].split()} | set(CONFUSIONS)
    small_arpa(d / "lm.arpa", vocabulary)
    graph = d / "hclg"
    run(
        "build-graph",
        "--config",
        str(ROOT / "configs" / "graph" / "sphinx-en-us.yaml"),
        f"arpa={d / 'lm.arpa'}",
        "--out",
        str(graph),
    )
    rows, report, _ = transcribe(manifest(d / "plain.jsonl"), graph, d / "plain")
    return d, graph, rows, report


def test_plain_decode_misrecognises_the_words(plain):
    _, _, rows, report = plain
    assert report["boost_oov"] == []
    for utt, (word, wrong) in FIXES.items():
        hyp, ref = rows[utt]["pred_text"].split(), rows[utt]["text"].split()
        assert word in ref and word not in hyp and wrong in hyp, (utt, hyp)


def test_manifest_boost_fixes_the_word_and_nothing_else(plain):
    d, graph, rows, report = plain
    boosts = {utt: {word: BOOST} for utt, (word, _) in FIXES.items()}
    boosts["ps_cards_002"]["dashwood"] = BOOST  # not in this graph's vocabulary
    boosted, boosted_report, proc = transcribe(manifest(d / "boost.jsonl", boosts), graph, d / "boost")
    for utt, row in rows.items():
        if utt in FIXES:
            word, wrong = FIXES[utt]
            expected = [word if w == wrong else w for w in row["pred_text"].split()]
            assert boosted[utt]["pred_text"].split() == expected, utt
        else:
            assert boosted[utt]["pred_text"] == row["pred_text"], utt
            assert boosted[utt]["words"] == row["words"], utt  # same word times too
    assert boosted_report["wer"] < report["wer"]
    assert boosted_report["boost_oov"] == ["dashwood"]
    out = proc.stdout + proc.stderr
    assert "boost word(s) not in the graph vocabulary, not boosted: dashwood" in out


def test_global_boost_file_changes_only_where_the_word_was_missed(plain):
    d, graph, rows, _ = plain
    (d / "hotwords.txt").write_text(f"clubs {BOOST}\n")
    boosted, _, _ = transcribe(
        manifest(d / "plain.jsonl"), graph, d / "global", "--boost", str(d / "hotwords.txt")
    )
    changed = {u for u in rows if boosted[u]["pred_text"] != rows[u]["pred_text"]}
    assert changed == {"ps_cards_002"}
    assert boosted["ps_cards_002"]["pred_text"] == rows["ps_cards_002"]["pred_text"].replace("close", "clubs")
