"""Long inputs cut at quiet moments (`segment_bounds`) and the segments' results joined
(`join_results`); through the CLI, a file made of real clips with silences between them gives the
clips' words at the clips' offsets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrdecode.audio.segmenting import cut_stream, frame_energy, join_results, segment_bounds
from asrdecode.decoders.base import DecodeResult, Word

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000


def test_bounds_cover_the_input_and_cut_in_silences():
    rng = np.random.default_rng(0)
    pieces, gaps = [], []
    for length in (3.1, 4.7, 2.2, 5.0, 3.3, 4.4):
        pieces.append(rng.normal(0, 0.1, int(length * RATE)))
        start = sum(len(p) for p in pieces)
        pieces.append(np.zeros(int(0.6 * RATE)))
        gaps.append((start, start + int(0.6 * RATE)))
    wave = np.concatenate(pieces)
    bounds = segment_bounds(wave, RATE, max_seconds=8.0)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(wave)
    assert all(b[1] == nxt[0] for b, nxt in zip(bounds, bounds[1:], strict=False))
    assert all(0 < b - a <= 8 * RATE for a, b in bounds)
    for _, cut in bounds[:-1]:  # every cut lies in a silent gap
        assert any(lo <= cut <= hi for lo, hi in gaps), cut


def whole_recording_bounds(
    wave: np.ndarray, limit: int, hop: int = 160, width: int = 20
) -> list[tuple[int, int]]:
    """The cuts computed over the whole recording at once (the quietest 0.2 s in the last 10 s
    before each limit), as `segment_bounds` first did."""
    n, frames = len(wave), len(wave) // hop
    if n <= limit:
        return [(0, n)]
    energy = np.square(wave[: frames * hop].astype(np.float64)).reshape(frames, hop).mean(axis=1)
    smooth = np.convolve(energy, np.ones(width) / width, mode="same")
    search = max(1, min(1000, limit // hop * 3 // 4))
    bounds, start = [], 0
    while n - start > limit:
        last = (start + limit) // hop - 1
        first = max(start // hop + 1, last - search)
        cut = (first + int(np.argmin(smooth[first : last + 1]))) * hop if last >= first else start + limit
        cut = min(max(cut, start + hop), start + limit)
        bounds.append((start, cut))
        start = cut
    return [*bounds, (start, n)]


@pytest.mark.parametrize("seed", range(6))
def test_cuts_made_as_blocks_come_equal_the_whole_recordings(seed):
    """Noise and silences of random lengths, read in blocks of 1,000 / 77,777 / 2^20 samples: the
    same cuts as over the whole recording, each segment the recording's own samples."""
    rng = np.random.default_rng(seed)
    pieces = []
    for _ in range(rng.integers(3, 30)):
        pieces.append(rng.normal(0, rng.uniform(0.01, 0.3), int(rng.uniform(0.5, 20) * RATE)))
        if rng.random() < 0.5:
            pieces.append(np.zeros(int(rng.uniform(0.05, 1.0) * RATE)))
    wave = np.concatenate(pieces).astype(np.float32)
    want = whole_recording_bounds(wave, 30 * RATE)
    assert segment_bounds(wave, RATE, 30.0) == want
    for size in (1000, 77_777, 1 << 20):
        got = []
        for start, piece in cut_stream((wave[i : i + size] for i in range(0, len(wave), size)), RATE, 30.0):
            np.testing.assert_array_equal(piece, wave[start : start + len(piece)])
            got.append((start, start + len(piece)))
        assert got == want


def test_short_input_and_input_without_silence():
    assert segment_bounds(np.ones(1000), RATE, 1.0) == [(0, 1000)]
    noise = np.random.default_rng(1).normal(0, 1, 25 * RATE)
    bounds = segment_bounds(noise, RATE, 6.0)
    assert bounds[-1][1] == len(noise) and all(0 < b - a <= 6 * RATE for a, b in bounds)
    with pytest.raises(ValueError):
        segment_bounds(noise, RATE, 0.0)


@pytest.mark.parametrize("n", [0, 159, 160, 16000 * 7 + 33, 400_000])
def test_frame_energy_in_blocks_equals_the_whole_recording_at_once(n):
    """Each frame's mean square is the same bit for bit whatever the block size (a partial last
    frame ignored, as before)."""
    x = (np.random.default_rng(n).standard_normal(n) * 0.1).astype(np.float32)
    frames = n // 160
    want = np.square(x[: frames * 160].astype(np.float64)).reshape(frames, 160).mean(axis=1)
    for block in (1, 7, 1 << 11, 1 << 15):
        np.testing.assert_array_equal(frame_energy(x, 160, block), want)


def test_cutting_a_long_recording_allocates_a_block_not_a_float64_copy():
    """The cut points of 10 minutes of float32 audio (38 MB) are found with a few MB of temporary
    memory (numpy's allocations are traced), not a float64 copy of the recording and its square
    (77 MB each)."""
    import tracemalloc

    wave = np.random.default_rng(2).normal(0, 0.1, 600 * RATE).astype(np.float32)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        bounds = segment_bounds(wave, RATE, max_seconds=60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bounds[-1][1] == len(wave) and all(0 < b - a <= 60 * RATE for a, b in bounds)
    assert peak < 16 * 2**20, peak


def test_join_shifts_words_and_frames():
    a = DecodeResult([Word("a", 0.5, 0.7)], tokens=[1], token_frames=[12], score=-1.0, acoustic_score=-0.5)
    b = DecodeResult([Word("b", 0.2, 0.4)], tokens=[2], token_frames=[5], score=-2.0, acoustic_score=None)
    joined = join_results([a, b], [0.0, 10.0], frame_shift=0.04)
    assert [(w.word, w.start, w.end) for w in joined.words] == [("a", 0.5, 0.7), ("b", 10.2, 10.4)]
    assert joined.tokens == [1, 2] and joined.token_frames == [12, 255]
    assert joined.score == -3.0 and joined.acoustic_score is None and joined.token_durations is None


CLIPS = ["ps_goforward", "ps_tidigits_dhd.2934z", "ps_cards_001"]


def clips_with_gaps(folder: Path) -> tuple[np.ndarray, list[float]]:
    """`CLIPS` joined with 1.2 s of silence after each, written to folder/long.wav: (the samples,
    each clip's offset in seconds)."""
    gap = np.zeros(int(1.2 * RATE), dtype=np.float32)
    audio, offsets = [], []
    for name in CLIPS:
        wave, rate = sf.read(ROOT / "data/demo/real" / f"{name}.wav", dtype="float32")
        assert rate == RATE
        offsets.append(sum(len(a) for a in audio) / RATE)
        audio += [wave, gap]
    folder.mkdir()
    sf.write(folder / "long.wav", np.concatenate(audio), RATE, subtype="FLOAT")
    return np.concatenate(audio), offsets


def transcribe(source: Path, out: Path, *extra: str, prelude: str = "") -> tuple[dict[str, list], dict]:
    """`asrdecode transcribe` in a subprocess (after the Python statements of `prelude`): the words
    of each utterance and the report."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["transcribe", str(source), *extra, "--out", str(out)]
    lines = ["import sys", prelude, "from asrdecode.cli import main", f"sys.argv = ['asrdecode', *{args!r}]"]
    code = "\n".join([*lines, "main()"])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    return {r["utt_id"]: r["words"] for r in rows}, json.loads((out / "report.json").read_text())


def test_cli_long_file_gives_the_clips_words_at_their_offsets(tmp_path):
    """Three real clips with 1.2 s of silence between them, cut into segments of at most 4 s by the
    sphinx setup (an HMM scores each frame alone, so a segment's words do not depend on the audio
    beside them): the words are the clips' own (decoded one by one), each within 0.1 s of its time
    in its clip plus the clip's offset. The clips (each shorter than a segment: decoded whole) and the
    long file are transcribed in one run."""
    sphinx = ("--model", "embedded:sphinx-en-us")
    _, offsets = clips_with_gaps(tmp_path / "long")
    (tmp_path / "both").mkdir()
    for name in CLIPS:
        (tmp_path / "both" / f"{name}.wav").symlink_to(ROOT / "data/demo/real" / f"{name}.wav")
    (tmp_path / "both" / "long.wav").symlink_to(tmp_path / "long" / "long.wav")
    alone, report = transcribe(tmp_path / "both", tmp_path / "joined", *sphinx, "batch.segment_seconds=4")
    assert report["segmented"] == 1 and set(alone) == {*CLIPS, "long"}  # only the long file is cut
    joined = {"long": alone.pop("long")}
    expected = [
        (w["word"], w["start"] + off) for name, off in zip(CLIPS, offsets, strict=True) for w in alone[name]
    ]
    got = [(w["word"], w["start"]) for w in joined["long"]]
    assert [w for w, _ in got] == [w for w, _ in expected]
    assert all(abs(a - b) <= 0.1 for (_, a), (_, b) in zip(got, expected, strict=True))
    # an input longer than a batch (batch.max_seconds) is cut too, whatever batch.segment_seconds
    by_batch, report = transcribe(tmp_path / "long", tmp_path / "by_batch", *sphinx, "batch.max_seconds=4")
    assert report["segmented"] == 1 and by_batch == joined
    # a header that gives no length: the input is read whole, then cut, with the same words and times
    no_length = "import asrdecode.io.manifests as m; m.probe_duration = lambda path: None"
    whole, report = transcribe(
        tmp_path / "long", tmp_path / "whole", *sphinx, "batch.segment_seconds=4", prelude=no_length
    )
    assert report["segmented"] == 1 and whole == joined


def test_cli_long_file_with_a_bad_sample_late_is_reported_and_skipped(tmp_path):
    """A long input read as its segments are cut, with a NaN near its end: some segments are decoded
    before the read fails; the input is reported and counted as failed, nothing of it is written,
    and the other file of the run is transcribed."""
    wave, _ = clips_with_gaps(tmp_path / "in")
    wave[int(0.9 * len(wave))] = np.nan
    sf.write(tmp_path / "in" / "long.wav", wave, RATE, subtype="FLOAT")
    (tmp_path / "in" / "short.wav").symlink_to(ROOT / "data/demo/real" / "ps_goforward.wav")
    blocks = "import asrdecode.audio.loading as loading; loading.READ_BLOCK_FRAMES = 16000"  # 1 s
    words, report = transcribe(tmp_path / "in", tmp_path / "out", "batch.segment_seconds=4", prelude=blocks)
    assert set(words) == {"short"} and report["failed"] == 1
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == 1 and "long.wav" in json.dumps(errors[0]) and "NaN" in json.dumps(errors[0])


def test_lattice_of_a_segmented_input_joins_its_segments(tmp_path):
    """An input decoded in segments with lattices asked for gets one lattice: the segments'
    lattices joined by epsilon arcs (`lattice.concatenate`). Its best path through the written
    Kaldi text archive (a shortest path computed here over the parsed arcs) is the transcript's
    words, the word arcs' times lie within the input, and the short input beside it keeps its
    own lattice."""
    from urllib.parse import quote

    from asrdecode.decoders.wfst.lattice import read_kaldi_text
    from asrdecode.graph.cache import resolve_graph_spec
    from asrdecode.graph.symbols import read_symbols

    wave, _ = sf.read(ROOT / "data/demo/real/ps_goforward.wav", dtype="float32")
    (tmp_path / "in").mkdir()
    sf.write(tmp_path / "in" / "long.wav", np.concatenate([wave, np.zeros(RATE, np.float32), wave]), RATE)
    sf.write(tmp_path / "in" / "short.wav", wave[: 2 * RATE], RATE)
    seconds = len(wave) / RATE + 0.5
    cli = [sys.executable, "-m", "asrdecode.cli"]
    cmd = [*cli, "transcribe", str(tmp_path / "in"), "--out", str(tmp_path / "o")]
    cmd += ["--config", "configs/wfst.yaml", "decoder.graph=cache:configs/graph/demo-ctc-bpe-tlg.yaml"]
    cmd += ["decoder.lattice=true", f"batch.segment_seconds={seconds:.2f}"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "no lattice written" not in proc.stderr
    report = json.loads((tmp_path / "o/report.json").read_text())
    assert report["segmented"] == 1 and report["segmented_without_lattice"] == 0
    lattices = read_kaldi_text((tmp_path / "o/lattices/lat.ark.txt").read_text())
    assert set(lattices) == {"long", "short"}
    assert (tmp_path / "o/lattices" / f"{quote('long', safe='')}.fst").is_file()
    arcs, finals = lattices["long"]
    assert any(word == 0 for _, _, word, *_ in arcs)  # the joins
    best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for _ in range(len(arcs) + 1):  # shortest paths over the acyclic lattice, to a fixed point
        changed = False
        for src, dst, word, graph, acoustic, _units in arcs:
            if src in best:
                cand = (best[src][0] + graph + acoustic, best[src][1] + ((word,) if word else ()))
                if dst not in best or cand[0] < best[dst][0] - 1e-9:
                    best[dst], changed = cand, True
        if not changed:
            break
    _, path = min((best[s][0] + g + a, best[s][1]) for s, (g, a, _units) in finals.items() if s in best)
    symbols = read_symbols(
        Path(resolve_graph_spec("cache:configs/graph/demo-ctc-bpe-tlg.yaml")) / "words.txt"
    )
    rows = [json.loads(x) for x in (tmp_path / "o/transcripts.jsonl").read_text().splitlines()]
    long_words = next(r["words"] for r in rows if r["utt_id"] == "long")
    assert [symbols[w] for w in path] == [w["word"] for w in long_words] != []


def test_progress_moves_while_a_long_input_is_decoded(tmp_path):
    """A long input in segments reports progress after each batch of segments (the audio decoded so
    far), not only when it is done: a run over one file shows its hours moving."""
    _, _ = clips_with_gaps(tmp_path / "long")
    log = tmp_path / "run.jsonl"
    transcribe(
        tmp_path / "long", tmp_path / "out", "batch.segment_seconds=4", "batch.max_seconds=4",
        "--log-file", str(log),
    )  # fmt: skip
    events = [json.loads(x) for x in log.read_text().splitlines()]
    progress = [e for e in events if e["event"] == "progress"]
    during = [e["audio_seconds"] for e in progress[1:-1]]  # after the first event, before the end
    assert len(during) >= 2 and during == sorted(set(during))
    assert 0 < during[0] < progress[-1]["audio_seconds"]
    assert [e["done"] for e in progress[:-1]] == [0] * (len(progress) - 1) and progress[-1]["done"] == 1


@pytest.mark.parametrize("limit_seconds", [1.0, 4.0, 7.5, 19.0, 30.0])
def test_no_segment_shorter_than_a_quarter_of_the_limit_but_the_last(limit_seconds):
    """Speech with silences longer than a frame: every segment but the last is at least a quarter
    of the limit long. (With the quiet moment searched over the whole segment, a 4 s limit cut a
    1.2 s silence into 1-frame segments, one per frame of it.)"""
    rng = np.random.default_rng(int(limit_seconds * 10))
    pieces = []
    for _ in range(12):
        pieces += [rng.normal(0, 0.1, int(rng.uniform(0.5, 3.0) * RATE)), np.zeros(int(1.2 * RATE))]
    wave = np.concatenate(pieces).astype(np.float32)
    bounds = segment_bounds(wave, RATE, limit_seconds)
    lengths = [b - a for a, b in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(wave)
    assert all(b == c for (_, b), (c, _) in zip(bounds, bounds[1:], strict=False))
    assert all(n <= limit_seconds * RATE for n in lengths)
    assert all(n >= limit_seconds * RATE / 4 - 160 for n in lengths[:-1]), min(lengths[:-1])
