"""transducer-greedy: label looping and frame looping against NeMo's greedy references (RNN-T, TDT),
against a plain one-utterance implementation of paper 003 Algorithm 1, batch vs single, chunked vs offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_audio import audio_batch
from helpers.transducer import make_decoder, nemo_output, reference
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from asrdecode.decoders.transducer_greedy import (
    BatchedHyps,
    LabelLoopingRunner,
    greedy_decode,
    initial_stream_state,
)
from asrdecode.errors import ConfigError
from asrdecode.models import ModelOutput, load_nemo
from asrdecode.models.transducer import PredictionNetwork, TransducerJoint

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
LOOPS = ("labels", "frames")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny per-step tensor ops: intra-op threads only add synchronisation (and the CI box is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=("rnnt_bpe", "tdt_bpe"))
def fixture(request):
    name = request.param
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    return name, load_nemo(FIX / f"{name}.nemo"), {k: data[k] for k in data.files}


@pytest.mark.parametrize("loop", LOOPS)
def test_parity_with_nemo_greedy(fixture, loop):
    """Tokens, frames and TDT durations identical to NeMo's greedy_batch (label looping) for all six
    utterances; TDT durations equal `greedy_durations_single` (the fixture README: NeMo's batched TDT
    greedy can report another frame's duration)."""
    name, model, ref = fixture
    results = make_decoder(model, loop=loop).decode(nemo_output(model, ref))
    assert len(results) == 6
    for b, res in enumerate(results):
        exp = reference(ref, b)
        assert res.tokens == exp["tokens"], (b, res.tokens, exp["tokens"])
        assert res.token_frames == exp["frames"], b
        assert model.tokenizer.decode(res.tokens) == exp["text"]
        if name == "tdt_bpe":
            assert res.token_durations == exp["durations"], b
        else:
            assert res.token_durations is None
            # RNN-T: our score convention (token log-softmax over V+1) equals NeMo's CPU greedy score
            assert res.score == pytest.approx(exp["score"], rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("name", ["rnnt_char", "rnnt_lstm2", "rnnt_local", "rnnt_streaming"])
def test_parity_char_and_two_layer_lstm(name):
    """NeMo-built char RNN-T, 2-layer-LSTM RNN-T, an RNN-T whose encoder uses NeMo's sliding-window
    attention (rel_pos_local_attn, [8, 8]) and a cache-aware streaming one decoded offline
    (scripts/make_nemo_fixtures.py): tokens, frames and
    scores equal NeMo's greedy_batch for both loops, from NeMo's encoder output and through ours."""
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    ref = {k: data[k] for k in data.files}
    model = load_nemo(FIX / f"{name}.nemo")
    audio = audio_batch()
    with torch.inference_mode():
        ours = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    assert sum(int(n) for n in ref["greedy_tokens_len"]) >= 50  # the tuned random nets emit tokens
    for loop in LOOPS:
        dec = make_decoder(model, loop=loop)
        for results in (dec.decode(nemo_output(model, ref)), dec.decode(ours)):
            for b, res in enumerate(results):
                exp = reference(ref, b)
                assert (res.tokens, res.token_frames) == (exp["tokens"], exp["frames"]), (loop, b)
                assert res.score == pytest.approx(exp["score"], rel=1e-4, abs=1e-4)
                if name == "rnnt_lstm2":  # char texts: NeMo drops a space before "'" (see fixture README)
                    assert model.tokenizer.decode(res.tokens) == exp["text"]


def test_parity_through_our_encoder(fixture):
    """Audio -> our front end + encoder -> label looping gives NeMo's tokens too."""
    _, model, ref = fixture
    audio = audio_batch()
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    results = make_decoder(model).decode(out)
    for b, res in enumerate(results):
        exp = reference(ref, b)
        assert (res.tokens, res.token_frames) == (exp["tokens"], exp["frames"])


def test_batch_equals_single_utterance(fixture):
    _, model, ref = fixture
    for loop in LOOPS:
        dec = make_decoder(model, loop=loop)
        batch = dec.decode(nemo_output(model, ref))
        for b in (0, 4, 5):
            (single,) = dec.decode(nemo_output(model, ref, [b]))
            assert single.tokens == batch[b].tokens and single.token_frames == batch[b].token_frames
            assert single.token_durations == batch[b].token_durations
            assert single.score == pytest.approx(batch[b].score, abs=1e-4)
        pair = dec.decode(nemo_output(model, ref, [4, 2]))  # reordered, different lengths
        assert [r.tokens for r in pair] == [batch[4].tokens, batch[2].tokens]


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_equals_offline(fixture, chunk):
    """Streaming: encoder output fed in chunks with the carried state == one offline call."""
    _, model, ref = fixture
    full = nemo_output(model, ref)
    for loop in LOOPS:
        dec = make_decoder(model, loop=loop)
        offline = dec.decode(full)
        state = None
        tokens = [[] for _ in range(6)]
        frames = [[] for _ in range(6)]
        durs = [[] for _ in range(6)]
        T = full.encoder_out.shape[1]
        for start in range(0, T, chunk):
            piece = full.encoder_out[:, start : start + chunk]
            lengths = (full.lengths - start).clamp(min=0, max=piece.shape[1])
            out = ModelOutput(None, lengths, full.frame_shift, full.blank_id, full.units, piece, full.extra)
            results, state = dec.decode_chunk(out, state)
            for b, r in enumerate(results):
                tokens[b] += r.tokens
                frames[b] += r.token_frames
                durs[b] += r.token_durations or []
        for b in range(6):
            assert tokens[b] == offline[b].tokens and frames[b] == offline[b].token_frames, (loop, b)
            assert durs[b] == (offline[b].token_durations or [])
        assert state.frame_offset.tolist() == full.lengths.tolist()
        assert bool((state.time_jump >= 0).all())


def test_words_and_timestamps(fixture):
    name, model, ref = fixture
    dec = make_decoder(model)
    shift = model.frame_shift
    for b in range(6):
        (res,) = dec.decode(nemo_output(model, ref, [b]))
        exp = reference(ref, b)
        spans = model.tokens_to_words(exp["tokens"])
        assert res.text == " ".join(w for w, _, _ in spans)
        for i, (word, (_, first, last)) in enumerate(zip(res.words, spans, strict=True)):
            start = exp["frames"][first]
            end = exp["frames"][last] + (max(exp["durations"][last], 1) if name == "tdt_bpe" else 1)
            if i + 1 < len(spans):
                end = max(start, min(end, exp["frames"][spans[i + 1][1]]))
            assert word.start == round(start * shift, 3) and word.end == round(end * shift, 3)
            assert 0.0 < word.confidence <= 1.0
        starts = [w.start for w in res.words]
        assert starts == sorted(starts)
        assert all(a.end <= b.start for a, b in zip(res.words, res.words[1:], strict=False))


# ----------------------------------------------------------------- random networks vs a plain reference


class TinyTransducer:
    """A random prediction + joint network implementing the TransducerNetwork protocol."""

    def __init__(self, vocab: int, durations: list[int] | None, seed: int, layers: int = 2) -> None:
        torch.manual_seed(seed)
        self.blank_id = vocab
        self.durations = durations
        self.decoder = PredictionNetwork(vocab, 16, layers).eval()
        self.joint = TransducerJoint(12, 16, 20, vocab, len(durations) if durations else 0).eval()
        with torch.no_grad():
            self.joint.joint_net[-1].weight.mul_(4.0)
            self.joint.joint_net[-1].bias[vocab] = 1.0  # mix of blanks and tokens

    def project_encoder(self, enc):
        return self.joint.project_encoder(enc)

    def initial_prediction_state(self, batch, device):
        return self.decoder.initial_state(batch, device)

    def predict(self, labels, state):
        return self.decoder(labels, state)

    def project_prediction(self, out):
        return self.joint.project_prediction(out)

    def joint_after_projection(self, f, g):
        return self.joint.joint_after_projection(f, g)

    # buffer versions used by the label-looping runner
    @property
    def joint_hidden_size(self):
        return self.joint.hidden_size

    def prediction_workspace(self, batch, device):
        return self.decoder.workspace(batch, device)

    def predict_into(self, labels, state, ws):
        return self.decoder.step_into(labels, state, ws)

    def project_prediction_into(self, out, buf):
        return self.joint.project_prediction_into(out, buf)

    def joint_after_projection_into(self, f, g, hidden, out):
        return self.joint.joint_after_projection_into(f, g, hidden, out)


@torch.inference_mode()
def plain_greedy(net, enc: torch.Tensor, max_symbols: int) -> tuple[list[int], list[int], list[int]]:
    """One utterance, paper 003 Algorithm 1 plus TDT durations and max_symbols, written plainly."""
    blank = net.blank_id
    out, state = net.predict(torch.tensor([blank]), net.initial_prediction_state(1, torch.device("cpu")))
    tokens, frames, durs = [], [], []
    t, last, count = 0, -1, 0
    while t < enc.shape[0]:
        logits = net.joint_after_projection(net.project_encoder(enc[t][None]), net.project_prediction(out))[0]
        k = int(logits[: blank + 1].argmax())
        d = net.durations[int(logits[blank + 1 :].argmax())] if net.durations else int(k == blank)
        if k == blank:
            t += max(d, 1)
            continue
        tokens.append(k)
        frames.append(t)
        durs.append(d)
        count = count + 1 if last == t else 1
        last = t
        out, state = net.predict(torch.tensor([k]), state)
        t += d
        if d == 0 and count >= max_symbols:
            t += 1
    return tokens, frames, durs


@pytest.mark.parametrize(
    "durations, max_symbols, seed",
    [
        (None, 10, 0),
        (None, 2, 1),
        (None, 1, 2),
        ([0, 1, 2, 3, 4], 10, 3),
        ([0, 1, 2], 2, 4),
        ([1, 2, 4], 3, 5),
    ],
)
def test_random_networks_match_plain_algorithm(durations, max_symbols, seed):
    net = TinyTransducer(7, durations, seed)
    gen = torch.Generator().manual_seed(seed)
    B, T = 5, 23
    enc = torch.randn(B, T, 12, generator=gen)
    lengths = torch.tensor([23, 1, 17, 0, 9])
    expected = [plain_greedy(net, enc[b, : lengths[b]], max_symbols) for b in range(B)]
    assert sum(len(e[0]) for e in expected) > 5  # the random net emits something
    if max_symbols <= 2 and not durations:  # the max_symbols limit is exercised
        assert any(e[1].count(t) == max_symbols for e in expected for t in e[1])
    for loop in ("labels", "frames"):
        hyps, state = greedy_decode(net, enc, lengths, max_symbols, loop=loop)
        assert isinstance(hyps, BatchedHyps)
        for b in range(B):
            n = int(hyps.lengths[b])
            got = (
                hyps.transcript[b, :n].tolist(),
                hyps.timestamps[b, :n].tolist(),
                hyps.durations[b, :n].tolist(),
            )
            exp = expected[b]
            assert got[0] == exp[0] and got[1] == exp[1], (loop, b)
            if durations:
                assert got[2] == exp[2]
        assert state.frame_offset.tolist() == lengths.tolist()


def test_hyps_storage_grows():
    hyps = BatchedHyps(2, 1, torch.device("cpu"))
    mask = torch.tensor([True, False])
    for i in range(5):
        hyps.make_room()
        hyps.add_masked_(
            mask, torch.tensor([i, 9]), torch.tensor([i, 0]), torch.zeros(2, dtype=torch.long), torch.zeros(2)
        )
    assert hyps.capacity >= 5 and hyps.lengths.tolist() == [5, 0]
    assert hyps.transcript[0, :5].tolist() == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------- configuration errors


def test_bad_config(fixture):
    _, model, ref = fixture
    with pytest.raises(ConfigError, match="max_symbols"):
        make_decoder(model, max_symbols=0)
    with pytest.raises(ConfigError, match="decoder.loop"):
        make_decoder(model, loop="tokens")
    with pytest.raises(ConfigError, match="beam"):
        make_decoder(model, beam=4)
    with pytest.raises(ConfigError, match="max_symbols"):
        make_decoder(model, max_symbols="ten")
    no_net = ModelOutput(torch.zeros(1, 3, 129), torch.tensor([3]), 0.08, 128, model.units)
    with pytest.raises(ConfigError, match="transducer model"):
        make_decoder(model).decode(no_net)
    # cuda_graphs is accepted and off on CPU (same eager code)
    out = make_decoder(model, cuda_graphs=True).decode(nemo_output(model, ref, [0]))
    assert out[0].tokens == reference(ref, 0)["tokens"]


def test_static_runner_padding_and_reuse(fixture):
    """The preallocated runner the CUDA-graph path replays: fixed capacity, larger than the batch
    (padded rows / frames), reused across batches — same tokens as NeMo (eager here, no CUDA)."""
    name, model, ref = fixture
    runner = LabelLoopingRunner(model, 8, 64, 10, torch.device("cpu"), torch.float32, static=True)
    for rows in ([0, 1, 2, 3, 4, 5], [5, 2], [3]):
        out = nemo_output(model, ref, rows)
        hyps, state = greedy_decode(model, out.encoder_out, out.lengths, 10, runner=runner)
        assert hyps.batch == len(rows) and runner.hyps.capacity == 64 * 10 + 1
        for i, b in enumerate(rows):
            exp = reference(ref, b)
            n = int(hyps.lengths[i])
            assert hyps.transcript[i, :n].tolist() == exp["tokens"]
            assert hyps.timestamps[i, :n].tolist() == exp["frames"]
            if name == "tdt_bpe":
                assert hyps.durations[i, :n].tolist() == exp["durations"]
        assert state.frame_offset.tolist() == out.lengths.tolist()


# ----------------------------------------------------------------- CLI, decoder named explicitly


@pytest.mark.parametrize("name, loop", [("rnnt_bpe", "labels"), ("tdt_bpe", "frames")])
def test_cli_explicit_transducer_greedy(tmp_path, name, loop):
    """`asrdecode transcribe --decoder transducer-greedy` (not auto): NeMo's greedy texts, and word start
    times = NeMo's token frames x frame shift (the first token of each word), for both loops."""
    out = tmp_path / name
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(FIX / "audio"), "--model"]
    cmd += [str(FIX / f"{name}.nemo"), "--decoder", "transducer-greedy", "--out", str(out)]
    cmd += [f"decoder.loop={loop}", "threads=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["decoder"] == "transducer-greedy" and report["utterances"] == 6
    rows = {}
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["utt_id"]] = row
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    model = load_nemo(FIX / f"{name}.nemo")
    assert sorted(rows) == sorted(str(u) for u in ref["utt_ids"])
    for b, utt in enumerate(ref["utt_ids"]):
        exp = reference(ref, b)
        row = rows[str(utt)]
        assert row["pred_text"] == exp["text"], utt
        spans = model.tokens_to_words(exp["tokens"])
        assert [w["word"] for w in row["words"]] == [w for w, _, _ in spans]
        starts = [round(exp["frames"][first] * model.frame_shift, 3) for _, first, _ in spans]
        assert [w["start"] for w in row["words"]] == starts, utt


# ----------------------------------------------------------------- the preallocated runner (CUDA-graph body)

ALL_FIXTURES = ("rnnt_bpe", "tdt_bpe", "rnnt_char", "rnnt_lstm2")


def _tensors(obj, seen: set[int] | None = None) -> list[torch.Tensor]:
    """Every tensor held by the runner (attributes, tuples, dataclasses, the hypothesis storage)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return [obj]
    if id(obj) in seen or isinstance(obj, (int, float, str, bool, type(None), torch.nn.Module)):
        return []
    seen.add(id(obj))
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in _tensors(x, seen)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x, seen)]
    if hasattr(obj, "__dict__"):
        return [t for x in vars(obj).values() for t in _tensors(x, seen)]
    return []


class StageOpRecorder(TorchDispatchMode):
    """Records every aten op of a stage: ops whose output has storage that existed nowhere before
    (a new allocation) and host reads (``_local_scalar_dense``)."""

    def __init__(self, known_storages: set[int]) -> None:
        super().__init__()
        self.known = known_storages
        self.ops = 0
        self.allocating: list[str] = []
        self.host_reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        if func is torch.ops.aten._local_scalar_dense.default:
            self.host_reads.append(str(func))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.known:
                self.allocating.append(str(func))
        return out


@pytest.mark.parametrize("name", ["tdt_bpe", "rnnt_lstm2"])
def test_runner_stages_allocate_nothing_and_never_sync(name):
    """The loop body the CUDA-graph path captures (the same code the eager CPU path runs): op by op, no
    output lands in new storage and nothing is read back to the host; results are still NeMo's."""
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    ref = {k: data[k] for k in data.files}
    model = load_nemo(FIX / f"{name}.nemo")
    out = nemo_output(model, ref)
    runner = LabelLoopingRunner(model, 8, 48, 10, torch.device("cpu"), torch.float32, static=True)
    known = {t.untyped_storage().data_ptr() for t in _tensors(runner)}
    known |= {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    recorder = StageOpRecorder(known)
    stages = {"outer_start": 0, "inner_step": 0, "after_inner": 0}
    with torch.inference_mode():
        enc_proj = model.project_encoder(out.encoder_out)
        runner.load(enc_proj, out.lengths, initial_stream_state(model, 6, torch.device("cpu")))

        def stage(name: str) -> None:
            stages[name] += 1
            with recorder:
                getattr(runner, name)()

        while bool(runner.active_any):
            stage("outer_start")
            while bool(runner.need_any):
                stage("inner_step")
            runner.hyps.make_room()
            stage("after_inner")
    assert min(stages.values()) > 10 and recorder.ops > 1000
    assert recorder.allocating == [] and recorder.host_reads == []
    hyps = runner.hyps
    for b in range(6):
        exp = reference(ref, b)
        n = int(hyps.lengths[b])
        assert (
            hyps.transcript[b, :n].tolist() == exp["tokens"]
            and hyps.timestamps[b, :n].tolist() == exp["frames"]
        )


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_static_runner_equals_plain_paths(name):
    """Static (fixed-capacity, padded, reused) runner == eager label looping (growing storage) == frame
    looping (allocating ops, nn.LSTM steps) on every NeMo fixture: tokens, frames, durations, scores."""
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    ref = {k: data[k] for k in data.files}
    model = load_nemo(FIX / f"{name}.nemo")
    runner = LabelLoopingRunner(model, 8, 64, 10, torch.device("cpu"), torch.float32, static=True)
    for rows in ([0, 1, 2, 3, 4, 5], [4, 1], [2]):
        out = nemo_output(model, ref, rows)
        results = [
            greedy_decode(model, out.encoder_out, out.lengths, 10, runner=runner)[0],
            greedy_decode(model, out.encoder_out, out.lengths, 10)[0],
            greedy_decode(model, out.encoder_out, out.lengths, 10, loop="frames")[0],
        ]
        for i, b in enumerate(rows):
            got = []
            for hyps in results:
                n = int(hyps.lengths[i])
                got.append(
                    (
                        hyps.transcript[i, :n].tolist(),
                        hyps.timestamps[i, :n].tolist(),
                        hyps.durations[i, :n].tolist(),
                    )
                )
            assert got[0] == got[1] == got[2], (name, b)
            assert got[0][0] == reference(ref, b)["tokens"]
            torch.testing.assert_close(results[0].scores[i], results[2].scores[i], atol=1e-4, rtol=1e-5)
            torch.testing.assert_close(results[1].scores[i], results[2].scores[i], atol=1e-4, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("layers, rnn_hidden, blank_as_pad", [(1, -1, True), (2, -1, False), (2, 24, True)])
def test_prediction_step_into_equals_torch_lstm(layers, rnn_hidden, blank_as_pad):
    """The buffer LSTM step of the runner == torch's nn.LSTM step (also projected LSTMs, no pad row)."""
    torch.manual_seed(layers + rnn_hidden)
    net = PredictionNetwork(9, 16, layers, blank_as_pad=blank_as_pad, rnn_hidden=rnn_hidden).eval()
    ws = net.workspace(5, torch.device("cpu"))
    state = tuple(torch.randn_like(x) for x in net.initial_state(5, torch.device("cpu")))
    labels = torch.tensor([0, 9, 3, 8, 9])  # 9 = blank (<SOS>)
    with torch.inference_mode():
        expected_out, (h, c) = net(labels, state)
        out = net.step_into(labels, state, ws)
    torch.testing.assert_close(out, expected_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ws.h, h, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ws.c, c, atol=1e-6, rtol=1e-5)
