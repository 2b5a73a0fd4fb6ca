"""transducer-beam (paper 004: ALSD++ `malsd`, AES++ `maes`, n-gram LM shallow fusion) against NeMo 3.0.0's
own `malsd_batch` / `maes_batch` outputs on the fixture models (configs read from the reference JSON),
NeMo's one maes difference re-derived, beam 1 == transducer-greedy, batch == one utterance at a time, a
brute-force enumeration of every alignment of tiny synthetic transducers, n-best, config errors, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.transducer import nemo_output

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders import decoder_config_from_dict
from asrdecode.decoders.base import DecoderContext
from asrdecode.decoders.transducer_beam import (
    BatchedBeamHyps,
    TransducerBeamConfig,
    TransducerBeamDecoder,
    alsd_search,
    rolling_hash,
)
from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder
from asrdecode.errors import ConfigError
from asrdecode.models import ModelOutput, load_nemo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
ARPA = FIX / "lm_tokens.arpa"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_MODELS: dict[str, tuple] = {}


def fixture_model(name: str):
    """(model, npz arrays, reference JSON) of a NeMo fixture, loaded once per session."""
    if name not in _MODELS:
        data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
        report = json.loads((FIX / "reference" / f"{name}.json").read_text())
        _MODELS[name] = (load_nemo(FIX / f"{name}.nemo"), {k: data[k] for k in data.files}, report)
    return _MODELS[name]


def context(model) -> DecoderContext:
    return DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)


def beam_decoder(model, **options) -> TransducerBeamDecoder:
    config = dataclass_from_dict(TransducerBeamConfig, options, prefix="decoder.")
    return TransducerBeamDecoder(config, context(model))


def options_from_nemo(decoding: dict) -> dict:
    """Our decoder options from the NeMo decoding config stored with a reference (same names)."""
    cfg = decoding["decoding_config"]
    beam = cfg["beam"]
    options = {
        "strategy": cfg["strategy"],
        "beam_size": beam["beam_size"],
        "score_norm": beam["score_norm"],
        "return_best_hypothesis": beam["return_best_hypothesis"],
        "max_symbols": beam["max_symbols_per_step"],
        "maes_num_steps": beam["maes_num_steps"],
        "maes_expansion_beta": beam["maes_expansion_beta"],
        "maes_expansion_gamma": beam["maes_expansion_gamma"],
    }
    if beam["ngram_lm_model"]:
        assert Path(beam["ngram_lm_model"]).name == ARPA.name
        options.update(
            ngram_lm=str(ARPA),
            ngram_lm_alpha=beam["ngram_lm_alpha"],
            blank_lm_score_mode=beam["blank_lm_score_mode"],
            pruning_mode=beam["pruning_mode"],
        )
    return options


def reference(ref: dict, key: str, b: int) -> dict:
    n = int(ref[f"{key}_tokens_len"][b])
    out = {
        "tokens": ref[f"{key}_tokens"][b, :n].tolist(),
        "frames": ref[f"{key}_timestamps"][b, :n].tolist(),
        "score": float(ref[f"{key}_score"][b]),
        "text": str(ref[f"{key}_text"][b]),
    }
    if f"{key}_durations" in ref:
        out["durations"] = ref[f"{key}_durations"][b, :n].tolist()
    return out


# ----------------------------------------------------------------- parity with NeMo


MALSD_CASES = [("rnnt_bpe", "malsd"), ("rnnt_bpe", "malsd_lm"), ("tdt_bpe", "malsd"), ("tdt_bpe", "malsd_lm")]


@pytest.mark.parametrize("name, key", MALSD_CASES)
def test_malsd_parity_with_nemo(name, key):
    """ALSD++ (with and without the token LM, lm_weighted_full + late pruning, alpha 0.5): tokens, token
    frames and TDT durations identical to NeMo's malsd_batch, scores to float tolerance (NeMo jumps by
    the duration's index, decoder.py docstring: the same as its value for the fixture's durations
    [0, 1, 2, 3, 4])."""
    model, ref, report = fixture_model(name)
    decoding = report["decodings"][key]
    options = options_from_nemo(decoding)
    assert options["strategy"] == "malsd_batch" and options["beam_size"] == 4
    results = beam_decoder(model, **options).decode(nemo_output(model, ref))
    for b, res in enumerate(results):
        exp = reference(ref, key, b)
        assert res.tokens == exp["tokens"], b
        assert res.token_frames == exp["frames"], b
        if "durations" in exp:
            assert res.token_durations == exp["durations"], b
        assert res.score == pytest.approx(exp["score"], rel=1e-5, abs=1e-4), b
        assert res.text == exp["text"], b
        if options.get("ngram_lm"):  # the LM part: ln p_LM of the tokens from <s> (no </s>), by the ARPA
            assert res.lm_score == pytest.approx(_lm_sentence(res.tokens), abs=1e-4)
            assert res.acoustic_score == pytest.approx(res.score - options["ngram_lm_alpha"] * res.lm_score)


def _lm_sentence(tokens: list[int]) -> float:
    from asrdecode.lm.ngram_tensor import BatchedNgramLM

    if "lm" not in _MODELS:
        _MODELS["lm"] = BatchedNgramLM.from_arpa(ARPA, token_ids="ngpu", vocab_size=128)
    return _MODELS["lm"].score_sentence(tokens, bos=True, eos=False)


def test_maes_parity_with_nemo_and_its_expanding_rule():
    """AES++: NeMo 3.0.0's maes_batch decides whether new slot k expands again from the *previous*
    occupant of slot k (``to_update = to_update & (label != blank)``, indexed by slot, not by parent). With
    that rule (``nemo_expanding_rule``) tokens, frames and scores equal NeMo's for all six utterances.
    Our default lets every hypothesis that just took a token expand again (or take the frame's blank), so
    every hypothesis takes exactly one blank per frame. The tokens and frames are the same; where NeMo's
    best hypothesis ended the last frame on a token without its blank, our score is NeMo's plus exactly
    log p(blank | its tokens, last frame), computed here from the network (two utterances of the earlier,
    larger fixture; none of the current one)."""
    model, ref, report = fixture_model("rnnt_bpe")
    options = options_from_nemo(report["decodings"]["maes"])
    assert options["strategy"] == "maes_batch"
    decoder = beam_decoder(model, **options)
    output = nemo_output(model, ref)
    shift = model.frame_shift
    ours = decoder.results(decoder.search(output), shift, False)
    nemo_rule_hyps = decoder.search(output, nemo_expanding_rule=True)
    nemo_rule = decoder.results(nemo_rule_hyps, shift, False)
    lengths = output.lengths.tolist()
    best = nemo_rule_hyps.ranking(True)[:, :1]
    symbols = nemo_rule_hyps.backtrack(best)[0][:, 0]
    blanks = (symbols == model.blank_id).sum(dim=1).tolist()
    for b in range(len(lengths)):
        exp = reference(ref, "maes", b)
        for res in (ours[b], nemo_rule[b]):
            assert res.tokens == exp["tokens"] and res.token_frames == exp["frames"], b
        assert nemo_rule[b].score == pytest.approx(exp["score"], rel=1e-5, abs=1e-4), b
        if blanks[b] == lengths[b]:
            assert ours[b].score == pytest.approx(exp["score"], rel=1e-5, abs=1e-4), b
            continue
        assert blanks[b] == lengths[b] - 1 and symbols[b][symbols[b] >= 0][-1] != model.blank_id
        blank_logp = _blank_logp_after(model, output.encoder_out[b, lengths[b] - 1], exp["tokens"])
        assert ours[b].score == pytest.approx(exp["score"] + blank_logp, abs=1e-4), b


@torch.inference_mode()
def _blank_logp_after(model, frame: torch.Tensor, tokens: list[int]) -> float:
    """log p(blank) at one encoder frame after the prediction network read <SOS> + tokens."""
    state = model.initial_prediction_state(1, torch.device("cpu"))
    out, state = model.predict(torch.tensor([model.blank_id]), state)
    for k in tokens:
        out, state = model.predict(torch.tensor([k]), state)
    logits = model.joint_after_projection(model.project_encoder(frame[None]), model.project_prediction(out))[
        0
    ]
    return float(torch.log_softmax(logits[: model.blank_id + 1], dim=-1)[model.blank_id])


BEAM_MODES = json.loads((FIX / "reference" / "beam_modes.json").read_text())  # make_nemo_beam_references.py


def nemo_rules(monkeypatch) -> None:
    """Substitute NeMo 3.0.0's three self-inconsistent LM rules (decoder.py docstring): a forced blank
    keeps plain log p(blank) except in ALSD with late pruning + eq. 3 (there NeMo fuses the log-probs in
    place before reading the blank); AES early pruning + eq. 3 adds the model's log-prob twice."""
    import asrdecode.decoders.transducer_beam.aes as aes_module
    import asrdecode.decoders.transducer_beam.alsd as alsd_module
    from asrdecode.decoders.transducer_beam.fusion import fuse_selected

    def alsd_forced(blank_logp, fusion):
        fused = fusion is not None and fusion.blank_mode == "lm_weighted_full" and fusion.pruning == "late"
        return blank_logp * (1.0 + fusion.alpha) if fused else blank_logp

    def aes_selected(values, labels, blank_logp, lm_scores, alpha, mode, eps):
        fused = fuse_selected(values, labels, blank_logp, lm_scores, alpha, mode, eps)
        return fused + values if mode == "lm_weighted_full" else fused

    monkeypatch.setattr(alsd_module, "forced_blank_score", alsd_forced)
    monkeypatch.setattr(aes_module, "forced_blank_score", lambda blank_logp, fusion: blank_logp)
    monkeypatch.setattr(aes_module, "fuse_selected", aes_selected)


@pytest.mark.parametrize("key", sorted(BEAM_MODES["cases"]))
def test_lm_fusion_modes_vs_nemo(key, monkeypatch):
    """Every blank_lm_score_mode x pruning_mode for malsd (RNN-T, TDT) and maes (RNN-T), token LM at alpha
    0.5, beam 4, against NeMo 3.0.0 (tests/fixtures/nemo/reference/beam_modes.json). Ours: same tokens,
    frames and durations except AES early + eq. 3 (NeMo counts the model's log-prob twice there); same
    scores except where a forced blank is scored (ours: like any blank of the mode, eq. 3 ``(1 + alpha)
    log p(blank)``, never above NeMo's plain ``log p(blank)``). With NeMo's three rules substituted
    (:func:`nemo_rules`) and its AES expanding rule, everything is identical, scores included: the
    differences are exactly those rules."""
    name, strategy, blank_mode, pruning = key.split("/")
    model, ref, _ = fixture_model(name)
    case = BEAM_MODES["cases"][key]
    assert case["overrides"]["beam"]["blank_lm_score_mode"] == blank_mode and BEAM_MODES["alpha"] == 0.5
    options = {"strategy": strategy, "beam_size": BEAM_MODES["beam_size"], "ngram_lm": str(ARPA)}
    options.update(ngram_lm_alpha=0.5, blank_lm_score_mode=blank_mode, pruning_mode=pruning)
    decoder = beam_decoder(model, **options)
    output = nemo_output(model, ref)
    tdt = bool(model.durations)
    ours = decoder.decode(output)
    double_count = (strategy, blank_mode, pruning) == ("maes_batch", "lm_weighted_full", "early")
    tokens_differ = 0
    for b, (res, exp) in enumerate(zip(ours, case["hyps"], strict=True)):
        if res.tokens != exp["tokens"]:
            tokens_differ += 1
            continue
        assert res.token_frames == exp["timestamps"], b
        assert res.token_durations == exp.get("durations"), b
        if double_count:
            continue
        assert res.score <= exp["score"] + 1e-4, b
        if blank_mode == "no_score" or (strategy == "malsd_batch" and pruning == "late"):
            assert res.score == pytest.approx(exp["score"], rel=1e-5, abs=1e-4), b
    # the rules can change which hypothesis is best (tokens_differ), nothing else: with NeMo's rules
    # (below) every hypothesis is NeMo's
    assert tokens_differ > 0 or not double_count
    nemo_rules(monkeypatch)
    hyps = decoder.search(output, nemo_expanding_rule=True)
    for b, (res, exp) in enumerate(
        zip(decoder.results(hyps, model.frame_shift, tdt), case["hyps"], strict=True)
    ):
        assert res.tokens == exp["tokens"] and res.token_frames == exp["timestamps"], b
        assert res.token_durations == exp.get("durations"), b
        assert res.score == pytest.approx(exp["score"], rel=1e-5, abs=1e-4), b


# ----------------------------------------------------------------- against our other decoders / itself


@pytest.mark.parametrize(
    "name, options, greedy_max_symbols",
    [
        ("rnnt_bpe", {"strategy": "malsd"}, 10),
        ("tdt_bpe", {"strategy": "malsd"}, 10),
        ("rnnt_bpe", {"strategy": "malsd", "max_symbols": 2}, 2),
        ("rnnt_bpe", {"strategy": "maes", "maes_num_steps": 2}, 2),
    ],
)
def test_beam_one_equals_greedy(name, options, greedy_max_symbols):
    """beam_size 1 takes the best symbol at every step: transducer-greedy's tokens, frames and TDT
    durations (maes: at most maes_num_steps tokens per frame, like greedy's max_symbols)."""
    model, ref, _ = fixture_model(name)
    output = nemo_output(model, ref)
    beam = beam_decoder(model, beam_size=1, **options).decode(output)
    config = dataclass_from_dict(
        TransducerGreedyConfig, {"max_symbols": greedy_max_symbols}, prefix="decoder."
    )
    greedy = TransducerGreedyDecoder(config, context(model)).decode(output)
    for b, (x, y) in enumerate(zip(beam, greedy, strict=True)):
        assert x.tokens == y.tokens and x.token_frames == y.token_frames, b
        assert x.token_durations == y.token_durations, b
    assert sum(len(r.tokens) for r in beam) > 10


@pytest.mark.parametrize(
    "name, options",
    [
        ("rnnt_bpe", {"strategy": "malsd", "beam_size": 4}),
        ("rnnt_bpe", {"strategy": "maes", "beam_size": 4}),
        ("tdt_bpe", {"strategy": "malsd", "beam_size": 3, "ngram_lm": str(ARPA), "ngram_lm_alpha": 0.3}),
        ("rnnt_bpe", {"strategy": "maes", "beam_size": 3, "ngram_lm": str(ARPA), "ngram_lm_alpha": 0.3}),
    ],
)
def test_batch_equals_one_utterance_at_a_time(name, options):
    model, ref, _ = fixture_model(name)
    decoder = beam_decoder(model, **options)
    batch = decoder.decode(nemo_output(model, ref))
    for b, res in enumerate(batch):
        (one,) = decoder.decode(nemo_output(model, ref, [b]))
        assert one.tokens == res.tokens and one.token_frames == res.token_frames, b
        assert one.token_durations == res.token_durations, b
        assert one.score == pytest.approx(res.score, abs=1e-4), b


@pytest.mark.parametrize(
    "name, strategy", [("rnnt_bpe", "malsd"), ("rnnt_bpe", "maes"), ("tdt_bpe", "malsd")]
)
def test_zero_length_utterance_in_a_batch(name, strategy):
    """An utterance with no encoder frames gives no tokens (it must not come back to life after the
    first step) and leaves the other utterances of its batch as they are alone."""
    model, ref, _ = fixture_model(name)
    decoder = beam_decoder(model, strategy=strategy, beam_size=4)
    output = nemo_output(model, ref)
    alone = decoder.decode(output)
    lengths = output.lengths.clone()  # (from_numpy: the cached fixture's array must stay as it is)
    lengths[1] = 0
    output = dataclasses.replace(output, lengths=lengths)
    mixed = decoder.decode(output)
    assert mixed[1].tokens == [] and mixed[1].words == []
    for b in (0, 2, 3, 4, 5):
        assert mixed[b].tokens == alone[b].tokens and mixed[b].token_frames == alone[b].token_frames, b
    assert sum(len(r.tokens) for r in alone) > 10


def test_nbest():
    """return_best_hypothesis false: the distinct token sequences of the beam, best first by
    score / (tokens + 1); the first is the 1-best."""
    model, ref, _ = fixture_model("rnnt_bpe")
    output = nemo_output(model, ref)
    best = beam_decoder(model, beam_size=4).decode(output)
    listed = beam_decoder(model, beam_size=4, return_best_hypothesis=False).decode(output)
    for one, res in zip(best, listed, strict=True):
        assert res.tokens == one.tokens and res.score == one.score
        assert 2 <= len(res.nbest) <= 4
        assert res.nbest[0] == ([w.word for w in one.words], one.score)
        assert len({tuple(words) for words, _ in res.nbest}) == len(res.nbest)
        assert all(math.isfinite(score) for _, score in res.nbest)


def test_words_and_times():
    """Word times from the token frames (RNN-T: +1 frame; TDT: + the duration), ordered, no overlap."""
    for name in ("rnnt_bpe", "tdt_bpe"):
        model, ref, _ = fixture_model(name)
        for res in beam_decoder(model, beam_size=4).decode(nemo_output(model, ref)):
            spans = model.tokens_to_words(res.tokens)
            assert [w.word for w in res.words] == [w for w, _, _ in spans]
            for word, (_, first, _) in zip(res.words, spans, strict=True):
                assert word.start == pytest.approx(res.token_frames[first] * model.frame_shift)
            assert all(a.end <= b.start + 1e-9 for a, b in zip(res.words, res.words[1:], strict=False))


# ----------------------------------------------------------------- brute force on tiny transducers


class PrefixTableTransducer:
    """A transducer whose prediction state is the token prefix itself (a node of the prefix tree, up to
    ``max_tokens`` tokens) and whose joint is a random table of logits per (frame, prefix), so any
    distribution over symbols (and TDT durations) given (frame, prefix) occurs; past ``max_tokens`` tokens
    only blank. Encoder frames are one-hot frame indices."""

    def __init__(self, vocab: int, frames: int, max_tokens: int, durations: list[int] | None, seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.blank_id, self.durations = vocab, durations
        prefixes: list[tuple[int, ...]] = [()]
        for n in range(max_tokens):
            prefixes += [p + (k,) for p in prefixes if len(p) == n for k in range(vocab)]
        self.index = {p: i for i, p in enumerate(prefixes)}
        self.child = torch.tensor(
            [[self.index.get(p + (k,), i) for k in range(vocab + 1)] for i, p in enumerate(prefixes)]
        )
        self.num_prefixes = len(prefixes)
        self.table = 2.0 * torch.randn(frames, len(prefixes), vocab + 1 + len(durations or []), generator=gen)
        full = torch.tensor([len(p) == max_tokens for p in prefixes])
        self.table[:, full, :vocab] = float("-inf")

    def encoder(self, frames: int) -> torch.Tensor:
        return torch.eye(self.table.shape[0])[:frames].unsqueeze(0)

    def project_encoder(self, enc):
        return enc

    def initial_prediction_state(self, batch, device):
        return (torch.zeros(1, batch, 1, dtype=torch.long, device=device),)

    def predict(self, labels, state):
        node = self.child[state[0][0, :, 0], labels]
        return torch.nn.functional.one_hot(node, self.num_prefixes).float(), (node[None, :, None],)

    def project_prediction(self, out):
        return out

    def joint_after_projection(self, f, g):
        return self.table[f.argmax(-1), g.argmax(-1)]

    def log_probs(self, t: int, prefix: tuple[int, ...]) -> tuple[list[float], list[float] | None]:
        row = self.table[t, self.index[prefix]].double()
        V = self.blank_id
        durations = torch.log_softmax(row[V + 1 :], -1).tolist() if self.durations else None
        return torch.log_softmax(row[: V + 1], -1).tolist(), durations


def all_alignments(net: PrefixTableTransducer, frames: int) -> list[tuple]:
    """Every alignment, plainly: (tokens, token frames, token durations, log-prob). RNN-T: blank moves one
    frame, a token stays; TDT: symbol and duration value, a blank with duration 0 moves one frame."""
    blank = net.blank_id
    found = []

    def walk(t, tokens, token_frames, token_durs, score):
        if t >= frames:
            found.append((tokens, token_frames, token_durs, score))
            return
        logp, dur_logp = net.log_probs(t, tokens)
        for k in range(blank + 1):
            if logp[k] == float("-inf"):
                continue
            if dur_logp is None:
                moves = [(int(k == blank), 0.0, 0)]
            else:
                moves = [
                    (max(d, 1) if k == blank else d, dur_logp[i], d) for i, d in enumerate(net.durations)
                ]
            for move, dur_score, d in moves:
                if k == blank:
                    walk(t + move, tokens, token_frames, token_durs, score + logp[k] + dur_score)
                else:
                    walk(
                        t + move,
                        (*tokens, k),
                        (*token_frames, t),
                        (*token_durs, d),
                        score + logp[k] + dur_score,
                    )

    walk(0, (), (), (), 0.0)
    return found


def best_of_beam(net, frames: int, beam: int) -> tuple[tuple, tuple, tuple, float]:
    hyps = alsd_search(net, net.encoder(frames), torch.tensor([frames]), beam, max_symbols=None)
    order = hyps.ranking(score_norm=False)[:, :1]
    labels, token_frames, durations = (x[0, 0].tolist() for x in hyps.backtrack(order))
    keep = [x >= 0 and x != net.blank_id for x in labels]

    def pick(values):
        return tuple(v for v, m in zip(values, keep, strict=True) if m)

    return pick(labels), pick(token_frames), pick(durations), float(hyps.scores[0, order[0, 0]])


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def test_brute_force_rnnt():
    """RNN-T, 2 tokens, 4 frames, up to 4 tokens: the exact best label sequence argmax_y P(y | x) by
    enumerating all 769 alignments. ALSD++ merges hypotheses with log-sum-exp, and every RNN-T alignment of
    y reaches (frame, y) at the same step, so a beam wide enough to keep every state finds the best y with
    score exactly log P(y); narrow beams miss it on some of the same networks (the test has teeth)."""
    missed = 0
    for seed in range(12):
        net = PrefixTableTransducer(2, 4, 4, None, seed)
        by_tokens: dict[tuple, list[float]] = {}
        for tokens, _, _, score in all_alignments(net, 4):
            by_tokens.setdefault(tokens, []).append(score)
        total = {y: logsumexp(s) for y, s in by_tokens.items()}
        assert logsumexp(list(total.values())) == pytest.approx(0.0, abs=1e-9)  # every alignment counted
        exact = max(total, key=total.get)
        tokens, _, _, score = best_of_beam(net, 4, 64)
        assert tokens == exact, seed
        assert score == pytest.approx(total[exact], abs=1e-5), seed
        missed += best_of_beam(net, 4, 1)[0] != exact
    assert missed >= 1


def test_brute_force_tdt_durations_by_value():
    """TDT with durations [0, 2, 3] (not 0..n-1, so jumping by the index would differ): by enumerating
    all 11137 alignments. The wide beam's best hypothesis is one of the enumerated alignments (tokens,
    frames and duration values), its y is the exact argmax_y P(y | x) on these networks, and its score lies
    between the best single alignment (Viterbi) and log P(y): TDT alignments of y reach (frame, y) after
    different numbers of steps, so ALSD++ merges only some of them."""
    for seed in range(12):
        net = PrefixTableTransducer(2, 4, 4, [0, 2, 3], seed)
        alignments = all_alignments(net, 4)
        by_tokens: dict[tuple, list[float]] = {}
        for tokens, _, _, score in alignments:
            by_tokens.setdefault(tokens, []).append(score)
        total = {y: logsumexp(s) for y, s in by_tokens.items()}
        exact = max(total, key=total.get)
        viterbi = max(a[3] for a in alignments)
        tokens, token_frames, durations, score = best_of_beam(net, 4, 64)
        assert tokens == exact, seed
        assert (tokens, token_frames, durations) in {a[:3] for a in alignments}, seed
        assert viterbi - 1e-5 <= score <= total[exact] + 1e-5, seed


# ----------------------------------------------------------------- pieces


def test_rolling_hash_and_tree_storage():
    """Paper 004 eq. 1 hash (order matters, token 0 changes the hash); storage grows by doubling and the
    back-pointer walk returns each slot's own symbol sequence."""
    h = torch.tensor(0)
    assert rolling_hash(h, torch.tensor(0)) != h
    ab = rolling_hash(rolling_hash(h, torch.tensor(1)), torch.tensor(2))
    ba = rolling_hash(rolling_hash(h, torch.tensor(2)), torch.tensor(1))
    assert ab != ba
    hyps = BatchedBeamHyps(1, 2, blank=5, device=torch.device("cpu"), dtype=torch.float32, capacity=1)
    steps = [([0, 0], [1, 5]), ([1, 0], [2, 3]), ([0, 1], [5, -1])]
    for parents, labels in steps:
        labels_t = torch.tensor([labels])
        hyps.add_step(torch.tensor([parents]), labels_t, torch.zeros(1, 2), (labels_t == 5).long())
    assert hyps.capacity >= 3 and hyps.steps == 3
    symbols = hyps.backtrack(torch.tensor([[0, 1]]))[0][0].tolist()
    assert symbols == [[5, 2, 5], [1, 3, -1]]
    assert hyps.num_tokens.tolist() == [[1, 2]] and hyps.time.tolist() == [[2, 0]]


# ----------------------------------------------------------------- configuration and CLI


def test_config_errors(tmp_path):
    model, _, _ = fixture_model("rnnt_bpe")
    tdt, tdt_ref, _ = fixture_model("tdt_bpe")
    bad = [
        ({"strategy": "beam"}, "decoder.strategy must be one of malsd, malsd_batch, maes, maes_batch"),
        ({"beam_size": 0}, "decoder.beam_size must be >= 1, got 0"),
        ({"max_symbols": 0}, "decoder.max_symbols must be >= 1 or null, got 0"),
        ({"maes_num_steps": 0}, "decoder.maes_num_steps must be >= 1"),
        ({"maes_expansion_beta": -1}, "decoder.maes_expansion_beta must be >= 0"),
        ({"maes_expansion_gamma": float("nan")}, "decoder.maes_expansion_gamma must be a finite number >= 0"),
        ({"ngram_lm_alpha": float("inf")}, "decoder.ngram_lm_alpha must be a finite number"),
        ({"ngram_lm_alpha": 0.5}, "decoder.ngram_lm_alpha is set but decoder.ngram_lm"),
        (
            {"blank_lm_score_mode": "full"},
            "decoder.blank_lm_score_mode must be one of no_score, lm_weighted_full",
        ),
        ({"pruning_mode": "never"}, "decoder.pruning_mode must be one of early, late"),
        ({"ngram_lm": str(ARPA), "ngram_lm_token_ids": "chars"}, "decoder.ngram_lm_token_ids must be one of"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigError) as err:
            beam_decoder(model, **options)
        assert message in str(err.value) and "\n" not in str(err.value), options
    with pytest.raises(ConfigError, match="unknown key 'decoder.beam'|decoder.beam"):
        decoder_config_from_dict({"type": "transducer-beam", "beam": 4})
    with pytest.raises(ConfigError, match="decoder.strategy=maes supports RNN-T models only"):
        beam_decoder(tdt, strategy="maes").decode(nemo_output(tdt, tdt_ref))
    ctc_like = ModelOutput(torch.zeros(1, 3, 129), torch.tensor([3]), 0.08, 128, model.units)
    with pytest.raises(ConfigError, match="needs a transducer model"):
        beam_decoder(model).decode(ctc_like)


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", *args, "threads=1"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_cli(tmp_path):
    """`asrdecode transcribe <audio> --decoder transducer-beam` from audio through our front end and
    encoder: NeMo's malsd_lm texts (RNN-T, with the config file and the LM) and maes texts; a bad value is
    one line on stderr, no traceback."""
    model_path = str(FIX / "rnnt_bpe.nemo")
    _, ref, _ = fixture_model("rnnt_bpe")
    runs = {
        "malsd_lm": ["--config", "configs/transducer-beam.yaml", f"decoder.ngram_lm={ARPA}"]
        + ["decoder.ngram_lm_alpha=0.5"],
        "maes": ["--decoder", "transducer-beam", "decoder.strategy=maes_batch"],
    }
    for key, extra in runs.items():
        out = tmp_path / key
        proc = _cli([str(FIX / "audio"), "--model", model_path, "--out", str(out), *extra])
        assert proc.returncode == 0, proc.stderr
        rows = {}
        for line in (out / "transcripts.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows[row["utt_id"]] = row["pred_text"]
        for b, utt in enumerate(ref["utt_ids"]):
            assert rows[str(utt)] == str(ref[f"{key}_text"][b]), (key, utt)
    bad = _cli(
        [str(FIX / "audio"), "--model", model_path, "--out", str(tmp_path / "bad")]
        + ["--decoder", "transducer-beam", "decoder.beam_size=0"]
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: decoder.beam_size must be >= 1, got 0"]
