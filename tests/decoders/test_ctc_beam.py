"""ctc-beam (NeMo's batched CTC beam search, ``beam_batch``, with token n-gram LM fusion) against NeMo
3.0.0's own decodings of the ctc_bpe fixture's log-probs (reference/ctc_beam.json, each utterance
alone), a brute-force search over every path of tiny inputs, ctc-greedy without an LM, batch
independence, n-best, config errors and the CLI (NeMo's ``transcribe`` texts)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import AUDIO, MODEL, read_jsonl, run

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders import decoder_config_from_dict, make_decoder
from asrdecode.decoders.base import DecoderContext
from asrdecode.decoders.ctc_beam import CtcBeamConfig, CtcBeamDecoder
from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder
from asrdecode.errors import AsrDecodeError, ConfigError
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.models import ModelOutput, load_nemo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
ARPA = FIX / "lm_tokens.arpa"
REFERENCE = json.loads((FIX / "reference" / "ctc_beam.json").read_text())
DATA = np.load(FIX / "reference" / "ctc_bpe.npz")


@pytest.fixture(scope="module")
def model():
    return load_nemo(MODEL)


def context_of(model) -> DecoderContext:
    return DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)


def decoder(model, **options) -> CtcBeamDecoder:
    return CtcBeamDecoder(dataclass_from_dict(CtcBeamConfig, options, prefix="decoder."), context_of(model))


def options_of(case: dict) -> dict:
    """Our options from NeMo's overrides of a reference case (the same names)."""
    beam = case["overrides"]["beam"]
    options = {k: beam[k] for k in ("beam_size", "beam_beta", "beam_threshold", "return_best_hypothesis")}
    if "ngram_lm_model" in beam:
        options |= {"ngram_lm": str(ARPA), "ngram_lm_alpha": beam["ngram_lm_alpha"]}
    return options


def fixture_output(model, rows: list[int] | None = None) -> ModelOutput:
    rows = list(range(len(DATA["encoder_len"]))) if rows is None else rows
    lp = torch.from_numpy(DATA["log_probs"][rows])
    lengths = torch.from_numpy(DATA["encoder_len"][rows]).long()
    return ModelOutput(lp, lengths, model.frame_shift, model.blank_id, model.units)


@pytest.mark.parametrize("name", sorted(REFERENCE["cases"]))
def test_equals_nemo_each_utterance(model, name):
    """Tokens, token frames and scores of NeMo's beam_batch, each utterance decoded alone there and
    in one batch of six here (an utterance's result does not depend on its batch)."""
    case = REFERENCE["cases"][name]
    results = decoder(model, **options_of(case)).decode(fixture_output(model))
    for b, (ours, ref) in enumerate(zip(results, case["alone"], strict=True)):
        if isinstance(ref, list):  # an n-best list: NeMo lists each (tokens, last symbol) state apart
            best = ref[0]
            texts = []
            for hyp in ref:
                words = [w for w, _, _ in model.tokens_to_words(hyp["tokens"])]
                if words not in texts:
                    texts.append(words)
            assert [ws for ws, _ in ours.nbest] == texts, b
            firsts = {}
            for hyp in ref:
                firsts.setdefault(tuple(hyp["tokens"]), hyp["score"])
            assert [s for _, s in ours.nbest] == pytest.approx(list(firsts.values()), rel=1e-5, abs=1e-4)
        else:
            best = ref
        assert ours.tokens == best["tokens"], (name, b)
        assert ours.token_frames == best["timestamps"], (name, b)
        assert ours.score == pytest.approx(best["score"], rel=1e-5, abs=1e-4), (name, b)


@pytest.mark.parametrize(
    "name", sorted(n for n, c in REFERENCE["cases"].items() if "ngram_lm_model" in c["overrides"]["beam"])
)
def test_lm_as_nemo_saves_it(model, name):
    """The token LM as NeMo saves it (NGPU-LM .nemo, lm_tokens.nemo) gives NeMo's results as the ARPA."""
    case = REFERENCE["cases"][name]
    options = options_of(case) | {"ngram_lm": str(FIX / "lm_tokens.nemo")}
    for ours, ref in zip(decoder(model, **options).decode(fixture_output(model)), case["alone"], strict=True):
        best = ref[0] if isinstance(ref, list) else ref
        assert (ours.tokens, ours.token_frames) == (best["tokens"], best["timestamps"])
        assert ours.score == pytest.approx(best["score"], rel=1e-5, abs=1e-4)


def test_nemo_batched_search_differs_only_past_an_utterance_end(model):
    """NeMo searches a shorter utterance's padded frames too; for the longest utterance of the batch,
    which has none, its batched result is ours."""
    longest = int(np.argmax(DATA["encoder_len"]))
    for name, case in REFERENCE["cases"].items():
        if isinstance(case["batched"][longest], list):
            continue
        assert case["batched"][longest]["tokens"] == case["alone"][longest]["tokens"], name
    moved = sum(
        case["batched"][b] != case["alone"][b]
        for case in REFERENCE["cases"].values()
        for b in range(len(DATA["encoder_len"]))
    )
    assert moved > 0  # NeMo's padded frames changed some result (its scores at least)


def test_no_lm_is_ctc_greedy(model):
    """Without an LM or bonus the best path is the frame-wise argmax path, for any beam."""
    out = fixture_output(model)
    greedy = CtcGreedyDecoder(CtcGreedyConfig(), context_of(model)).decode(out)
    best_path = [
        float(out.log_probs[b, : int(n)].max(dim=-1).values.sum()) for b, n in enumerate(out.lengths)
    ]
    for k in (1, 3, 8):
        for b, (ours, ref) in enumerate(zip(decoder(model, beam_size=k).decode(out), greedy, strict=True)):
            assert ours.tokens == ref.tokens and ours.token_frames == ref.token_frames
            assert ours.score == pytest.approx(best_path[b], abs=1e-4)
            assert ours.acoustic_score == ours.score and ours.lm_score is None
            assert [(w.word, w.start, w.end, w.confidence) for w in ours.words] == [
                (w.word, w.start, w.end, pytest.approx(w.confidence)) for w in ref.words
            ]


def _tiny_lm(tmp_path: Path, tokens: int) -> BatchedNgramLM:
    """A bigram over ``tokens`` NeMo token ids (chr(i + 100)), random but fixed probabilities."""
    rng = np.random.default_rng(3)
    names = [chr(i + 100) for i in range(tokens)]
    lines = ["\\data\\", f"ngram 1={tokens + 2}", f"ngram 2={tokens * tokens}", "", "\\1-grams:"]
    uni = rng.dirichlet(np.ones(tokens + 1))
    lines.append(f"{-99:.6f}\t<s>\t{math.log10(0.6):.6f}")
    lines.append(f"{math.log10(uni[-1]):.6f}\t</s>")
    for i, n in enumerate(names):
        lines.append(f"{math.log10(uni[i]):.6f}\t{n}\t{math.log10(0.5):.6f}")
    lines += ["", "\\2-grams:"]
    for a, b in itertools.product(names, names):
        lines.append(f"{math.log10(rng.uniform(0.05, 0.6)):.6f}\t{a} {b}")
    lines += ["", "\\end\\", ""]
    path = tmp_path / "tiny.arpa"
    path.write_text("\n".join(lines))
    return BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=tokens)


def _brute_force(lp: np.ndarray, lm: BatchedNgramLM, alpha: float, beta: float, blank: int):
    """(best score, its tokens) over every label path of ``lp`` [T, V+1]."""
    best = (-math.inf, None)
    T, V1 = lp.shape
    for path in itertools.product(range(V1), repeat=T):
        tokens, prev = [], -1
        for s in path:
            if s != blank and s != prev:
                tokens.append(s)
            prev = s
        score = float(sum(lp[t, s] for t, s in enumerate(path))) + beta * len(tokens)
        score += alpha * lm.score_sentence(tokens, bos=True, eos=True)
        if score > best[0] + 1e-9:
            best = (score, tokens)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_exact_with_a_wide_beam_equals_brute_force(tmp_path, seed):
    """With room for every (tokens, last symbol) state and no threshold, the search is exact: its best
    score is the best over all paths of acoustic + beta * tokens + alpha * LM (with </s>)."""
    V, T = 3, 5
    lm = _tiny_lm(tmp_path, V)
    rng = np.random.default_rng(seed)
    lp = torch.log_softmax(torch.from_numpy(rng.normal(0, 1.5, (1, T, V + 1))).float(), -1)
    alpha, beta = [(0.5, 0.0), (1.0, 0.7), (2.0, -0.5)][seed % 3]
    units = ["a", "b", "c"]
    ctx = DecoderContext(units, V, 0.04, lambda toks: [(units[t], i, i) for i, t in enumerate(toks)])
    arpa = tmp_path / "tiny.arpa"
    dec = CtcBeamDecoder(
        CtcBeamConfig(beam_size=1024, beam_beta=beta, beam_threshold=math.inf, ngram_lm=str(arpa),
                      ngram_lm_alpha=alpha), ctx)  # fmt: skip
    (result,) = dec.decode(ModelOutput(lp, torch.tensor([T]), 0.04, V, units))
    score, tokens = _brute_force(lp[0].numpy().astype(np.float64), lm, alpha, beta, V)
    assert result.score == pytest.approx(score, abs=1e-4)
    assert result.tokens == tokens
    assert result.lm_score == pytest.approx(lm.score_sentence(tokens, bos=True, eos=True), abs=1e-4)
    assert result.acoustic_score + beta * len(tokens) + alpha * result.lm_score == pytest.approx(result.score)


def test_batch_independence_with_lm(model):
    """Each utterance alone equals the same utterance in a batch of others of different lengths."""
    dec = decoder(
        model, beam_size=5, ngram_lm=str(ARPA), ngram_lm_alpha=0.8, beam_beta=0.5, beam_threshold=6.0
    )
    batch = dec.decode(fixture_output(model))
    for b in range(len(batch)):
        (alone,) = dec.decode(fixture_output(model, [b]))
        assert (alone.tokens, alone.token_frames) == (batch[b].tokens, batch[b].token_frames)
        assert alone.score == pytest.approx(batch[b].score, abs=1e-5)


def test_empty_and_zero_length(model):
    out = fixture_output(model, [0, 1])
    out.lengths = torch.tensor([0, int(out.lengths[1])])
    results = decoder(model, beam_size=3, ngram_lm=str(ARPA), beam_beta=2.0).decode(out)
    assert results[0].tokens == [] and results[0].words == []
    assert results[1].tokens


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"beam_size": 0}, "decoder.beam_size must be >= 1"),
        ({"beam_threshold": 0}, "decoder.beam_threshold must be"),
        ({"beam_beta": float("nan")}, "decoder.beam_beta must be a finite number"),
        ({"ngram_lm": "/nonexistent/lm.arpa"}, "/nonexistent/lm.arpa"),
        ({"ngram_lm": str(ARPA), "ngram_lm_token_ids": "bytes"}, "decoder.ngram_lm_token_ids must be"),
    ],
)
def test_config_errors_are_one_line(model, options, message):
    with pytest.raises(AsrDecodeError) as err:
        decoder(model, **options)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_transducer_output_is_refused_in_one_line(model):
    out = ModelOutput(None, torch.tensor([3]), 0.08, 128, model.units, encoder_out=torch.zeros(1, 3, 4))
    with pytest.raises(ConfigError, match="ctc-beam needs a CTC model's log-probs"):
        decoder(model).decode(out)


def test_registered_and_validated():
    cfg = decoder_config_from_dict({"type": "ctc-beam", "beam_size": 8, "ngram_lm_alpha": 0.3})
    assert isinstance(cfg, CtcBeamConfig) and cfg.beam_size == 8
    ctx = DecoderContext(["a", "b"], 2, 0.04, lambda toks: [])
    assert make_decoder(cfg, ctx).name == "ctc-beam"


def test_cli_transcribe_equals_nemo(tmp_path):
    """`asrdecode transcribe` with the NeMo fixture and the token LM gives the texts of NeMo's
    beam_batch on NeMo's own model output for each clip (one at a time there, one batch here). NeMo's
    ``transcribe`` differs only where its forward returned a frame past the encoded length, which its
    search reads too."""
    out = tmp_path / "o"
    options = options_of(REFERENCE["cases"][REFERENCE["transcribe_case"]])
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--out", str(out), "decoder.type=ctc-beam",
        *(f"decoder.{k}={v}" for k, v in options.items()))  # fmt: skip
    texts = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out / "transcripts.jsonl")}
    assert texts == REFERENCE["decoded_to_length"]
    assert all(texts.values())
    for utt, (frames, length) in REFERENCE["forward_frames_and_length"].items():
        if frames == length:
            assert REFERENCE["transcribe"][utt] == texts[utt], utt
    proc = run("transcribe", str(AUDIO), "--model", str(MODEL), "--out", str(tmp_path / "bad"),
               "decoder.type=ctc-beam", "decoder.beam_size=0", check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "decoder.beam_size must be >= 1" in proc.stderr and "Traceback" not in proc.stderr
