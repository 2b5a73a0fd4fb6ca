"""transducer-greedy with n-gram LM shallow fusion (NeMo greedy_batch + NGPU-LM, ngram_lm_alpha 0.5)
against NeMo's `greedy_lm` references (RNN-T and TDT), against an independent one-utterance replay of
NeMo's rule that scores with KenLM (flashlight-text), batch vs single, chunked vs offline, the
preallocated runner, the CLI, token ids given as unit strings, config errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.transducer import make_decoder, nemo_output
from helpers.transducer import reference as greedy_reference
from torch.utils._python_dispatch import TorchDispatchMode

from asrdecode.decoders.transducer_greedy import (
    LabelLoopingRunner,
    TransducerGreedyDecoder,
    greedy_decode,
    initial_stream_state,
)
from asrdecode.errors import ConfigError, GraphError
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.models import ModelOutput, load_nemo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
ARPA = FIX / "lm_tokens.arpa"
ALPHA = 0.5  # the fixture's ngram_lm_alpha
LOOPS = ("labels", "frames")
LN10 = math.log(10.0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=("rnnt_bpe", "tdt_bpe"))
def fixture(request):
    name = request.param
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    return name, load_nemo(FIX / f"{name}.nemo"), {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def token_lm() -> BatchedNgramLM:
    return BatchedNgramLM.from_arpa(ARPA, token_ids="ngpu", vocab_size=128)


def lm_decoder(model, **options) -> TransducerGreedyDecoder:
    return make_decoder(model, ngram_lm=str(ARPA), ngram_lm_alpha=ALPHA, **options)


def reference(ref: dict, b: int, key: str = "greedy_lm") -> dict:
    return greedy_reference(ref, b, key)


class KenLmScorer:
    """ln p_LM(every token | history) from KenLM through flashlight-text (independent of our LM)."""

    def __init__(self) -> None:
        from flashlight.lib.text.decoder.kenlm import KenLM
        from flashlight.lib.text.dictionary import Dictionary

        self.dictionary = Dictionary()
        for i in range(128):
            self.dictionary.add_entry(chr(i + 100))
        self.lm = KenLM(str(ARPA), self.dictionary)

    def start(self):
        return self.lm.start(False)

    def all_tokens(self, state) -> torch.Tensor:
        return torch.tensor([self.lm.score(state, k)[1] * LN10 for k in range(128)], dtype=torch.float32)

    def next(self, state, token: int):
        return self.lm.score(state, token)[0]


@torch.inference_mode()
def replay_nemo_rule(net, enc: torch.Tensor, length: int, lm: KenLmScorer, max_symbols: int = 10):
    """One utterance, plain Python, NeMo 3.0.0's greedy_batch + NGPU-LM rule read from its source: at each
    step the joint output (NeMo's CPU log-softmax over all outputs) decides blank vs token by its argmax;
    a token is ``argmax_k out[k] + alpha * ln p_LM(k)``; blank moves on 1 frame (TDT: the duration, 0 -> 1);
    a token moves on its TDT duration; ``max_symbols`` tokens on a frame force the next frame.
    Returns tokens, frames, TDT durations, NeMo's reported score (per token: the fused value when the
    token came from the first joint evaluation after the previous token, else the unfused best output
    of that step) and the fused sum (log-softmax over token+blank + alpha * ln p_LM for every token)."""
    V = net.blank_id
    durations = list(net.durations or [])
    enc_proj = net.project_encoder(enc)[0]
    out, pred_state = net.predict(torch.tensor([V]), net.initial_prediction_state(1, torch.device("cpu")))
    pred_proj = net.project_prediction(out)
    lm_state = lm.start()
    t, last_t, on_frame = 0, -1, 0
    tokens, frames, durs, nemo_score, fused_sum = [], [], [], 0.0, 0.0
    while t < length:
        first_try = True
        while True:
            logits = net.joint_after_projection(enc_proj[t : t + 1], pred_proj)[0]
            cpu_out = torch.log_softmax(logits, dim=-1)
            label = int(cpu_out[: V + 1].argmax())
            dur = durations[int(cpu_out[V + 1 :].argmax())] if durations else 0
            if label != V:
                break
            t += max(dur, 1)
            first_try = False
            if t >= length:
                break
        if t >= length:
            break
        lm_scores = lm.all_tokens(lm_state)
        fused = cpu_out[:V] + ALPHA * lm_scores
        k = int(fused.argmax())
        nemo_score += float(fused[k]) if first_try else float(cpu_out[: V + 1].max())
        fused_sum += float(torch.log_softmax(logits[: V + 1], dim=-1)[k]) + ALPHA * float(lm_scores[k])
        tokens.append(k)
        frames.append(t)
        durs.append(dur)
        on_frame = on_frame + 1 if t == last_t else 1
        last_t = t
        out, pred_state = net.predict(torch.tensor([k]), pred_state)
        pred_proj = net.project_prediction(out)
        lm_state = lm.next(lm_state, k)
        t += dur
        if dur == 0 and on_frame >= max_symbols:
            t += 1
    return tokens, frames, durs, nemo_score, fused_sum


@pytest.mark.parametrize("loop", LOOPS)
def test_parity_with_nemo_greedy_lm(fixture, loop):
    """Tokens, frames and TDT durations (`greedy_lm_durations_single`) identical to NeMo's LM-fused
    greedy_batch for all six utterances, both loops; the fused tokens differ from plain greedy."""
    name, model, ref = fixture
    results = lm_decoder(model, loop=loop).decode(nemo_output(model, ref))
    changed = 0
    for b, res in enumerate(results):
        exp = reference(ref, b)
        assert res.tokens == exp["tokens"], (b, res.tokens, exp["tokens"])
        assert res.token_frames == exp["frames"], b
        assert model.tokenizer.decode(res.tokens) == exp["text"]
        if name == "tdt_bpe":
            assert res.token_durations == exp["durations"], b
        changed += res.tokens != reference(ref, b, "greedy")["tokens"]
        assert res.score == pytest.approx(res.acoustic_score + ALPHA * res.lm_score, rel=1e-6, abs=1e-5)
    assert changed == 6


def test_scores_against_independent_replay(fixture):
    """The replay (KenLM for the LM) reproduces NeMo's tokens, frames and NeMo's reported score; our
    score = the fused value summed over the emitted tokens equals the replay's fused sum. NeMo 3.0.0
    itself adds the fused value only for a token found at the first joint evaluation after the previous
    token and the unfused best log-prob for tokens found after blanks (its inner loop keeps the scores
    from before the fusion), so its number is not ours; the replay shows that is the whole difference."""
    name, model, ref = fixture
    kenlm = KenLmScorer()
    out = nemo_output(model, ref)
    ours = lm_decoder(model).decode(out)
    for b in range(6):
        exp = reference(ref, b)
        tokens, frames, durs, nemo_score, fused_sum = replay_nemo_rule(
            model, out.encoder_out[b : b + 1], int(out.lengths[b]), kenlm
        )
        assert (tokens, frames) == (exp["tokens"], exp["frames"]), b
        if name == "tdt_bpe":
            assert durs == exp["durations"]
        assert nemo_score == pytest.approx(exp["score"], rel=1e-4, abs=1e-4)
        assert ours[b].score == pytest.approx(fused_sum, rel=1e-4, abs=1e-4)
        assert ours[b].score != pytest.approx(exp["score"], rel=1e-3)  # the convention differs here


def test_zero_alpha_is_plain_greedy(fixture):
    """alpha = 0: NeMo's plain greedy tokens and scores; the LM log-prob of the path is still reported."""
    name, model, ref = fixture
    plain = make_decoder(model).decode(nemo_output(model, ref))
    fused = make_decoder(model, ngram_lm=str(ARPA)).decode(nemo_output(model, ref))
    lm = BatchedNgramLM.from_arpa(ARPA, token_ids="ngpu", vocab_size=128)
    for b in range(6):
        assert fused[b].tokens == plain[b].tokens == reference(ref, b, "greedy")["tokens"]
        assert fused[b].score == pytest.approx(plain[b].score, abs=1e-5)
        assert fused[b].lm_score == pytest.approx(lm.score_sentence(plain[b].tokens, eos=False), abs=1e-3)


def test_batch_equals_single_and_chunked_equals_offline(fixture):
    name, model, ref = fixture
    full = nemo_output(model, ref)
    for loop in LOOPS:
        dec = lm_decoder(model, loop=loop)
        batch = dec.decode(full)
        for b in (0, 3, 5):
            (single,) = dec.decode(nemo_output(model, ref, [b]))
            assert (single.tokens, single.token_frames) == (batch[b].tokens, batch[b].token_frames)
            assert single.score == pytest.approx(batch[b].score, abs=1e-4)
        state = None
        tokens = [[] for _ in range(6)]
        lm_total = [0.0] * 6
        T = full.encoder_out.shape[1]
        for start in range(0, T, 5):  # the LM state travels with the stream state
            piece = full.encoder_out[:, start : start + 5]
            lengths = (full.lengths - start).clamp(min=0, max=piece.shape[1])
            out = ModelOutput(None, lengths, full.frame_shift, full.blank_id, full.units, piece, full.extra)
            results, state = dec.decode_chunk(out, state)
            for b, r in enumerate(results):
                tokens[b] += r.tokens
                lm_total[b] += r.lm_score
        for b in range(6):
            assert tokens[b] == batch[b].tokens, (loop, b)
            assert lm_total[b] == pytest.approx(batch[b].lm_score, abs=1e-3)


class HostReads(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(s in str(func) for s in ("_local_scalar_dense", "nonzero", "masked_select")):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def test_runner_with_lm_never_syncs_and_static_equals_eager(fixture, token_lm):
    """The label-looping stages with the LM read nothing back to the host (op by op); the static
    (CUDA-graph-shaped, padded, reused) runner == eager label looping == frame looping."""
    name, model, ref = fixture
    out = nemo_output(model, ref)
    runner = LabelLoopingRunner(
        model, 8, 48, 10, torch.device("cpu"), torch.float32, static=True, lm=token_lm, lm_alpha=ALPHA
    )
    with torch.inference_mode():
        runner.load(
            model.project_encoder(out.encoder_out),
            out.lengths,
            initial_stream_state(model, 6, "cpu", token_lm),
        )
        recorder = HostReads()
        while bool(runner.active_any):
            with recorder:
                runner.outer_start()
            while bool(runner.need_any):
                with recorder:
                    runner.inner_step()
            runner.hyps.make_room()
            with recorder:
                runner.after_inner()
    assert recorder.reads == []
    for b in range(6):
        n = int(runner.hyps.lengths[b])
        assert runner.hyps.transcript[b, :n].tolist() == reference(ref, b)["tokens"]
    for rows in ([4, 1], [2]):
        part = nemo_output(model, ref, rows)
        enc, lengths = part.encoder_out, part.lengths
        results = [
            greedy_decode(model, enc, lengths, runner=runner, lm=token_lm, lm_alpha=ALPHA)[0],
            greedy_decode(model, enc, lengths, lm=token_lm, lm_alpha=ALPHA)[0],
            greedy_decode(model, enc, lengths, loop="frames", lm=token_lm, lm_alpha=ALPHA)[0],
        ]
        for i, b in enumerate(rows):
            got = [h.transcript[i, : int(h.lengths[i])].tolist() for h in results]
            assert got[0] == got[1] == got[2] == reference(ref, b)["tokens"]
            for h in results[1:]:
                torch.testing.assert_close(h.lm_scores[i], results[0].lm_scores[i], atol=1e-4, rtol=1e-5)


def test_unit_strings_as_lm_words(tmp_path, fixture):
    """ngram_lm_token_ids=words: the same LM written with the model's unit strings as words gives the
    same tokens and scores as the NGPU-encoded file (sentencepiece's '<unk>' piece takes the place of
    the ARPA's own <unk>)."""
    name, model, ref = fixture
    lines = ARPA.read_text(encoding="utf-8").split("\n")
    words = []
    for line in lines:
        if line.startswith("ngram 1="):
            line = "ngram 1=130"
        elif "\t" in line and not line.startswith("ngram"):
            fields = line.split("\t")
            if fields[1] == "<unk>":
                continue
            fields[1] = " ".join(
                w if w in ("<s>", "</s>") else model.units[ord(w) - 100] for w in fields[1].split(" ")
            )
            line = "\t".join(fields)
        words.append(line)
    path = tmp_path / "units.arpa"
    path.write_text("\n".join(words), encoding="utf-8")
    ngpu = lm_decoder(model).decode(nemo_output(model, ref))
    unit = make_decoder(model, ngram_lm=str(path), ngram_lm_alpha=ALPHA, ngram_lm_token_ids="words").decode(
        nemo_output(model, ref)
    )
    for a, b in zip(ngpu, unit, strict=True):
        assert a.tokens == b.tokens and a.score == pytest.approx(b.score, abs=1e-4)


def test_config_errors(fixture, tmp_path):
    _, model, _ = fixture
    with pytest.raises(ConfigError, match="ngram_lm_alpha is set but decoder.ngram_lm"):
        make_decoder(model, ngram_lm_alpha=0.5)
    with pytest.raises(ConfigError, match="ngram_lm_token_ids must be one of ngpu, words"):
        make_decoder(model, ngram_lm=str(ARPA), ngram_lm_token_ids="chars")
    with pytest.raises(ConfigError, match="finite"):
        make_decoder(model, ngram_lm=str(ARPA), ngram_lm_alpha=float("nan"))
    with pytest.raises(GraphError, match="ARPA file not found"):
        make_decoder(model, ngram_lm=str(tmp_path / "none.arpa"))
    # a word ARPA read as NGPU tokens: one line naming the file and line
    with pytest.raises(GraphError, match=r"lm.arpa:\d+: '.*' is not an NGPU-LM token"):
        make_decoder(model, ngram_lm="data/demo/graph/lm.arpa")


def test_cli_with_ngram_lm(tmp_path):
    """`asrdecode transcribe ... decoder.ngram_lm=... decoder.ngram_lm_alpha=0.5` from audio through our
    front end and encoder: NeMo's greedy_lm texts (RNN-T; TDT is covered in process above); a bad LM
    path is a one-line error."""
    name = "rnnt_bpe"
    out = tmp_path / name
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(FIX / "audio"), "--model"]
    cmd += [str(FIX / f"{name}.nemo"), "--decoder", "transducer-greedy", "--out", str(out), "threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*cmd, f"decoder.ngram_lm={ARPA}", f"decoder.ngram_lm_alpha={ALPHA}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["utt_id"]] = row
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    for b, utt in enumerate(ref["utt_ids"]):
        assert rows[str(utt)]["pred_text"] == str(ref["greedy_lm_text"][b]), utt
    bad = subprocess.run(
        [*cmd[:-3], "--out", str(tmp_path / "bad"), "decoder.ngram_lm=missing.arpa"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode != 0
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: decoder.ngram_lm: missing.arpa: file not found"]
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()  # checked before the output folder is made
