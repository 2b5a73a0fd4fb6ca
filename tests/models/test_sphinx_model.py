"""pocketsphinx en-us PTM model: file parsing, model facts, senone scoring vs a direct numpy
evaluation, top-N vs full mixtures, batching, loading and malformed model folders."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode.errors import ModelError
from asrdecode.models.loading import load_model, resolve_model_path
from asrdecode.models.sphinx import (
    MIXW_LOG_UNIT,
    POCKETSPHINX_DENSITY_FLOOR,
    SphinxAcousticModel,
    key_index,
    packed_pieces,
    read_feat_params,
    read_s3_gaussians,
    read_sendump,
    read_sphinx_model,
    senone_runs,
    tie_broken_keys,
    top_densities_kernel,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sphinx"


@pytest.fixture(scope="module")
def folder() -> Path:
    return resolve_model_path("embedded:sphinx-en-us")


@pytest.fixture(scope="module")
def data(folder):
    return read_sphinx_model(folder)


@pytest.fixture(scope="module")
def models(data) -> dict[str, SphinxAcousticModel]:
    return {
        "topn": SphinxAcousticModel(data, topn=4),
        "full": SphinxAcousticModel(data, topn=0),
        "full64": SphinxAcousticModel(data, topn=0, dtype=torch.float64),
        "top1": SphinxAcousticModel(data, topn=1),
        "top16": SphinxAcousticModel(data, topn=16),
        "topn64": SphinxAcousticModel(data, topn=4, dtype=torch.float64),
        "full-nofloor": SphinxAcousticModel(data, topn=0, density_floor=0.0),
        "topn-nofloor": SphinxAcousticModel(data, topn=4, density_floor=0.0),
    }


@pytest.fixture(scope="module")
def goforward(models) -> tuple[torch.Tensor, torch.Tensor]:
    """[1, T, 39] features of goforward.raw ("go forward ten meters") and lengths."""
    wav = torch.from_numpy(np.fromfile(FIX / "goforward.raw", dtype="<i2").astype(np.float32) / 32768)
    feats, n = models["full"].features(wav[None], torch.tensor([wav.numel()]))
    return feats.transpose(1, 2), n


def test_model_facts(data, folder) -> None:
    assert data.means.shape == data.variances.shape == (42, 3, 128, 13)
    assert data.n_senones == 5126 and len(data.ciphones) == 42
    assert data.mixw_q.shape == (3, 128, 5126) and data.mixw_q.dtype == np.uint8
    assert data.transitions.shape == (42, 3, 4)
    np.testing.assert_allclose(data.transitions.sum(-1), 1.0, atol=1e-6)
    assert data.variances.min() >= np.float32(1e-4) and data.zero_variances > 0
    assert data.streams == [list(range(0, 13)), list(range(13, 26)), list(range(26, 39))]
    # Context-independent phone p owns senones 3p..3p+2; every senone has a codebook.
    assert data.sen2cb[:126].tolist() == [p for p in range(42) for _ in range(3)]
    assert data.sen2cb.min() == 0 and data.sen2cb.max() == 41
    assert data.noisedict["<sil>"] == ["SIL"] and data.noisedict["[NOISE]"] == ["+NSN+"]
    assert data.feat_params["lifter"] == "22" and data.feat_params["nfilt"] == "25"
    # Dequantised mixture weights sum to ~1 per senone/stream (8-bit truncation loses a few %).
    sums = np.exp(data.log_mixw).sum(1)
    assert sums.min() > 0.85 and sums.max() <= 1.0 + 1e-9
    assert abs(1024 * np.log(1.0001) - MIXW_LOG_UNIT) < 1e-12
    # Parsers agree with the raw layout.
    assert read_s3_gaussians(folder / "means").shape == (42, 3, 128, 13)
    assert read_sendump(folder / "sendump").shape == (3, 128, 5126)
    assert read_feat_params(folder / "feat.params")["feat"] == "1s_c_d_dd"


def numpy_senone_scores(
    data, x: np.ndarray, topn: int = 0, floor: float = POCKETSPHINX_DENSITY_FLOOR
) -> np.ndarray:
    """Slow reference: one frame, one senone, one stream at a time, float64. `floor`: densities
    count at most that many nats below the stream's best density of any codebook (pocketsphinx's
    ptm_mgau_codebook_norm clamp; 0 = none)."""
    out = np.zeros(data.n_senones)
    logw = data.log_mixw
    means = data.means.astype(np.float64)
    var = data.variances.astype(np.float64)

    def densities(cb: int, f: int) -> np.ndarray:
        xs = x[data.streams[f]].astype(np.float64)
        return -0.5 * (np.log(2 * np.pi * var[cb, f]) + (xs - means[cb, f]) ** 2 / var[cb, f]).sum(-1)

    best = [max(densities(cb, f).max() for cb in range(data.n_codebooks)) for f in range(len(data.streams))]
    for s in range(data.n_senones):
        cb = int(data.sen2cb[s])
        total = 0.0
        for f in range(len(data.streams)):
            dens = densities(cb, f)
            keep = np.argsort(-dens)[:topn] if topn else np.arange(len(dens))  # before the floor
            if floor:
                dens = np.maximum(dens, best[f] - floor)
            terms = dens[keep] + logw[f, keep, s]
            top = terms.max()
            total += top + np.log(np.exp(terms - top).sum())
        out[s] = total
    return out


@pytest.mark.parametrize(
    "kind, topn",
    [("full", 0), ("full64", 0), ("topn", 4), ("top1", 1), ("top16", 16), ("topn64", 4)]
    + [("full-nofloor", 0), ("topn-nofloor", 4)],
)
def test_batched_scores_equal_numpy_loop(data, models, goforward, kind: str, topn: int) -> None:
    feats, _ = goforward
    frames = [3, 120] if kind in ("full", "topn") else [60]
    got = models[kind].senone_scores(feats[:, frames])[0].double().numpy()
    floor = 0.0 if kind.endswith("nofloor") else POCKETSPHINX_DENSITY_FLOOR
    for i, t in enumerate(frames):
        want = numpy_senone_scores(data, feats[0, t].numpy(), topn, floor)
        err = np.abs(got[i] - want).max()
        assert err < 5e-4, (kind, t, err)


def test_topn_is_a_lower_bound_close_to_full(models, goforward) -> None:
    """Top-4 drops mixture terms, so it never exceeds the full mixture; for the frame's best
    senones it loses about half a nat (measured on goforward: median 0.47 over each frame's best
    50, argmax agreement 85%, the top-4 winner is at most 8th in the full ranking)."""
    feats, _ = goforward
    full = models["full"].senone_scores(feats)[0]
    top = models["topn"].senone_scores(feats)[0]
    assert (top <= full + 1e-3).all()
    gap = full - top
    best = full.argsort(dim=-1, descending=True)[:, :50]
    assert torch.gather(gap, 1, best).median() < 1.0
    assert (full.argmax(-1) == top.argmax(-1)).float().mean() > 0.75
    rank = (full > full.gather(1, top.argmax(-1, keepdim=True))).sum(-1)
    assert rank.max() < 20


def test_tie_broken_keys_order_and_decode() -> None:
    """Keys order float32 values exactly (distinct neighbours one ulp apart, both signs, zeros,
    tiny and large magnitudes), equal values by lower index, and give value and index back."""
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.standard_normal(40) * 30, [0.0, -0.0, 1e-30, -1e-30, 3e38, -3e38, 1.0]])
    vals = vals.astype(np.float32)
    vals = np.concatenate([vals, np.nextafter(vals, np.float32(np.inf)), vals[:10]])  # neighbours, ties
    g = torch.from_numpy(rng.permutation(vals))[None, :]  # [1, K]
    keys = tie_broken_keys(
        g, 1, torch.empty(g.shape, dtype=torch.float64), torch.empty(g.shape, dtype=torch.float64)
    )
    order = np.argsort(-g.numpy()[0], kind="stable")
    assert torch.equal(keys[0].argsort(descending=True), torch.from_numpy(order))
    assert len(set(keys[0].tolist())) == g.shape[1]
    values, idx = key_index(keys, g.shape[1])
    assert torch.equal(idx[0], torch.arange(g.shape[1])) and torch.equal(values, g)


@pytest.mark.parametrize("path", ["compiled", "keys"])
def test_topn_keeps_exactly_n_densities_on_ties(models, path: str) -> None:
    """Tied N-th values (float32 coincidences happen on real speech): exactly N densities per
    codebook/stream/frame, the lowest-index ones among the tied, as a stable sort picks; by the
    compiled insertion (CPU) and by the tensor path (every device)."""
    model = models["topn"]
    select = model.select_top if path == "compiled" else model.select_top_keys
    rng = np.random.default_rng(0)
    g = rng.standard_normal((3, 42, 128, 6)).astype(np.float32) * 5 - 40
    g[:, :, [7, 50, 90, 100]] = g.max(2, keepdims=True) - 1.0  # four-way tie from the 2nd place
    g[1, 0, 3, 0] = g[1, 0, 7, 0] + 0.5  # one column: a tie for 3rd/4th place instead
    g[2, 5, :, 1] = 0.0  # all equal (exact zeros)
    g[0, 1, :, 2] = np.arange(128, dtype=np.float32)  # ascending: every density enters the slots
    values, idx = select(torch.from_numpy(g.copy()))
    order = np.argsort(-g, axis=2, kind="stable")[:, :, :4]
    np.testing.assert_array_equal(idx.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(g, order, 2))


@pytest.mark.parametrize(
    "k, topn, index_type",
    [(128, 4, np.int64), (128, 4, np.int32), (40, 4, np.int64), (8, 4, np.int32), (4, 4, np.int64)]
    + [(128, 1, np.int64), (33, 16, np.int64), (16, 16, np.int32), (9, 3, np.int64)],
)
def test_top_densities_kernel_equals_a_stable_sort(k: int, topn: int, index_type) -> None:
    """The compiled top-N against numpy's stable argsort on values with many ties (a few distinct
    levels), for several numbers of densities and N (N = k included; N = 4 has its own loop
    without branches), with int64 and int32 indices."""
    rng = np.random.default_rng(k * 100 + topn)
    g = rng.integers(0, 6, size=(5, k, 37)).astype(np.float32) - 50.0
    g[0, :, 3] = -7.0  # all equal
    g[1, :, 5] = np.arange(k)  # ascending: every density enters at the top
    values = np.empty((5, topn, 37), np.float32)
    idx = np.empty((5, topn, 37), index_type)
    top_densities_kernel(g, values, idx)
    order = np.argsort(-g, axis=1, kind="stable")[:, :topn]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(values, np.take_along_axis(g, order, 1))


def test_compiled_topn_equals_the_tensor_path_on_speech(data, models, goforward) -> None:
    """On goforward's Gaussians the compiled top-N picks the same densities and values as the
    keyed tensor path, for N = 1, 4 and 16; whole-utterance scores agree (the compiled path
    computes the Gaussians of 128 frames per matmul instead of 32, which may round differently)."""
    feats, n = goforward
    for kind in ("top1", "topn", "top16"):
        model = models[kind]
        with torch.inference_mode():
            g = model._gaussians(feats[0, :100])
            got = model.select_top(g)
            want = model.select_top_keys(g)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]), kind
    tensor_path = SphinxAcousticModel(data, topn=4, compiled=False)
    with torch.inference_mode():
        got = models["topn"].forward_features(feats.transpose(1, 2), n).log_probs
        want = tensor_path.forward_features(feats.transpose(1, 2), n).log_probs
    torch.testing.assert_close(got, want, atol=1e-3, rtol=0)


def test_senone_runs_cover_the_senones_in_order(data) -> None:
    """en-us: the 126 context-independent senones are 42 runs of 3, the others one run per phone
    that has context-dependent senones."""
    runs = senone_runs(data.sen2cb)
    assert runs[0].tolist() == [0, 0, 3] and runs[41].tolist() == [41, 123, 126]
    assert len(runs) == 42 + len(np.unique(data.sen2cb[126:]))
    assert runs[0, 1] == 0 and runs[-1, 2] == data.n_senones and (runs[1:, 1] == runs[:-1, 2]).all()
    for c, s0, s1 in runs:
        assert (data.sen2cb[s0:s1] == c).all()
    assert senone_runs(np.array([2, 2, 0, 2])).tolist() == [[2, 0, 2], [0, 2, 3], [2, 3, 4]]


@pytest.mark.parametrize("kind", ["topn", "top1", "top16", "topn-nofloor"])
def test_compiled_mixture_equals_the_tensor_mixture(models, goforward, kind: str) -> None:
    """The compiled mixture (N = 4 has its own loop, other N the general one) gives the tensor
    path's senone scores from the same top-N densities, written whole or into destination rows."""
    feats, _ = goforward
    model = models[kind]
    with torch.inference_mode():
        top, idx = model.select_top(model._gaussians(feats[0, :100]))
        want = model._sparse_mixture(top, idx)
        got = model._compiled_mixture(top, idx)
        dest = torch.zeros(2, 60, model.num_senones)
        model._compiled_mixture(top, idx, [(0, 60, dest[1]), (60, 100, dest[0, :40])])
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert torch.equal(dest[1], got[:60]) and torch.equal(dest[0, :40], got[60:])
    assert dest[0, 40:].abs().max() == 0


def test_a_kept_output_is_not_overwritten_by_the_next_batch(data, goforward) -> None:
    """Scores reuse the previous output's memory only once the caller has let go of it: an output
    (or a view or numpy array of it) kept across calls is left intact."""
    feats, n = goforward
    model = SphinxAcousticModel(data, topn=4)
    x = feats.transpose(1, 2)
    first = model.forward_features(x, n).log_probs
    kept = first.clone()
    view = first[0, :10].numpy()
    del first
    second = model.forward_features(x.flip(2), n).log_probs
    assert not np.shares_memory(view, second.numpy())
    np.testing.assert_array_equal(view, kept[0, :10].numpy())
    ptr = second.data_ptr()
    del second, view
    assert model.forward_features(x, n).log_probs.data_ptr() == ptr  # let go of: reused
    torch.testing.assert_close(model.forward_features(x, n).log_probs, kept, atol=0, rtol=0)


def test_model_output_batch_equals_single(models) -> None:
    model = models["topn"]
    wav = torch.from_numpy(np.fromfile(FIX / "goforward.raw", dtype="<i2").astype(np.float32) / 32768)
    parts = [wav[:16000], wav[8000:18000]]
    lens = torch.tensor([16000, 10000])
    batch = torch.zeros(2, 16000)
    batch[0], batch[1, :10000] = parts[0], parts[1]
    feats, n = model.features(batch, lens)
    assert feats.shape[:2] == (2, 39)
    out = model.forward_features(feats, n)
    assert out.log_probs.shape == (2, int(n.max()), 5126)
    assert out.blank_id == -1 and out.frame_shift == 0.01 and len(out.units) == 5126
    assert out.units[0] == "+NSN+/0" and out.lengths.tolist() == n.tolist()
    assert out.log_probs[1, n[1] :].abs().max() == 0
    for b in range(2):
        single = model(parts[b][None], lens[b : b + 1])
        torch.testing.assert_close(out.log_probs[b, : n[b]], single.log_probs[0], atol=2e-3, rtol=0)


@pytest.mark.parametrize("topn", [4, 0])
def test_deferred_output_scores_each_utterance_as_forward_features(data, goforward, topn: int) -> None:
    """`deferred_output`: each utterance's valid feature frames and a scorer callable from any
    thread (the decoder's workers, outside inference mode while the batch was made inside it). The
    scores equal `forward_features`' within float32 rounding (the frames are chunked per utterance,
    not packed across utterances, so a matmul may sum in another order)."""
    feats, n = goforward
    model = SphinxAcousticModel(data, topn=topn, chunk_frames=16)
    batch = torch.cat([feats, feats.flip(1), feats]).transpose(1, 2)
    lengths = torch.cat([n - 37, n, n - 5])
    with torch.inference_mode():
        want = model.forward_features(batch, lengths)
        out = model.deferred_output(batch, lengths)
    assert out.log_probs is None and out.columns == model.num_senones == want.columns
    assert out.lengths.tolist() == lengths.tolist() and out.units == want.units
    assert (out.frame_shift, out.blank_id, out.extra) == (want.frame_shift, want.blank_id, want.extra)
    inputs = out.deferred.inputs
    assert [x.shape for x in inputs] == [(c, 39) for c in lengths.tolist()]
    got = torch.empty(3, int(lengths.max()), model.num_senones)
    with ThreadPoolExecutor(2) as pool:  # as the decoder's workers: not in inference mode
        list(pool.map(lambda b: out.deferred.score(inputs[b], got[b, : len(inputs[b])]), range(3)))
    for b, c in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[b, :c], want.log_probs[b, :c], atol=2e-3, rtol=0)
    wide = torch.empty_like(got)
    for b in range(3):  # on all the model's threads: each chunk's arithmetic unchanged
        out.deferred.score_wide(inputs[b], wide[b, : len(inputs[b])])
        assert torch.equal(wide[b, : len(inputs[b])], got[b, : len(inputs[b])])
    full = out.deferred.materialize()  # the same utterances scored the same way: the same numbers
    for b, c in enumerate(lengths.tolist()):
        assert torch.equal(full[b, :c], got[b, :c]) and not full[b, c:].any()
    assert out.deferred.chunk == 16
    for b, c in enumerate(lengths.tolist()):  # in parts starting at multiples of `chunk`: the same
        parts = torch.empty(c, model.num_senones)
        for lo in range(0, c, 32):
            out.deferred.score(inputs[b][lo : lo + 32], parts[lo : lo + 32])
        assert torch.equal(parts, got[b, :c])


@pytest.mark.parametrize("topn", [4, 0])
def test_threaded_scoring_equals_one_thread_and_numpy(data, goforward, topn: int) -> None:
    """model.threads > 1 scores chunks of packed frames on a thread pool: the same numbers as one
    thread (each chunk's arithmetic is unchanged), which equal the numpy evaluation, inside and
    outside inference mode (the mode is thread-local and carried into the workers)."""
    feats, n = goforward
    one = SphinxAcousticModel(data, topn=topn, chunk_frames=16)
    two = SphinxAcousticModel(data, topn=topn, chunk_frames=16, threads=2)
    batch = torch.cat([feats, feats.flip(1)]).transpose(1, 2)  # two utterances
    lengths = torch.cat([n, n - 37])
    with torch.inference_mode():
        want = one.forward_features(batch, lengths).log_probs
        got = two.forward_features(batch, lengths).log_probs
    assert torch.equal(got, want)
    with torch.no_grad():
        assert torch.equal(two.forward_features(batch, lengths).log_probs, want)
    for t in (5, 100):
        ref = numpy_senone_scores(data, batch[1, :, t].numpy(), topn)
        assert np.abs(got[1, t].double().numpy() - ref).max() < 5e-4
    assert got[1, int(lengths[1]) :].abs().max() == 0
    with pytest.raises(ModelError, match="model.threads"):
        SphinxAcousticModel(data, threads=-1)


def test_packed_chunks_are_written_to_their_rows(data, goforward) -> None:
    """forward_features scores the packed valid frames chunk by chunk and writes each chunk
    straight into its utterances' rows (a chunk may span utterances): exactly the packed chunks'
    scores, every valid frame once, padding 0."""
    feats, n = goforward
    model = SphinxAcousticModel(data, topn=4, chunk_frames=16)
    batch = torch.cat([feats, feats.flip(1), feats]).transpose(1, 2)
    lengths = torch.cat([n - 37, n, n - 5])
    counts = lengths.tolist()
    with torch.inference_mode():
        got = model.forward_features(batch, lengths).log_probs
        packed = torch.cat([batch[b, :, :c].T for b, c in enumerate(counts)])
        want = torch.cat([model._score_chunk(packed[s : s + 16]) for s in range(0, len(packed), 16)])
    assert torch.equal(torch.cat([got[b, :c] for b, c in enumerate(counts)]), want)
    assert got[0, counts[0] :].abs().max() == 0 and got[2, counts[2] :].abs().max() == 0
    dest = torch.zeros(3, max(counts), dtype=torch.int64)
    pieces = packed_pieces(counts, 16, dest)
    assert len(pieces) == -(-sum(counts) // 16)
    for k, runs in enumerate(pieces):
        assert runs[0][0] == 0 and runs[-1][1] == min(16, sum(counts) - 16 * k)
        for (lo, hi, rows), nxt in zip(runs, [*runs[1:], None], strict=True):
            assert nxt is None or nxt[0] == hi
            assert len(rows) == hi - lo
            rows += 1
    assert all((dest[b, :c] == 1).all() and (dest[b, c:] == 0).all() for b, c in enumerate(counts))


def test_scoring_inside_and_outside_inference_mode(models, goforward) -> None:
    """Work buffers made under torch.inference_mode are not reused outside it (in-place writes to
    inference tensors would fail there)."""
    feats, _ = goforward
    model = models["topn"]
    with torch.inference_mode():
        inside = model.senone_scores(feats[:, :40])
    with torch.no_grad():
        outside = model.senone_scores(feats[:, :40])
    assert torch.equal(inside, outside)


def test_goforward_argmax_plausible(models, goforward) -> None:
    """Frame-wise best senones of "go forward ten meters": silence first, and the base phones of
    G OW F AO R W ER D T EH N M IY T ER Z appear in order (as a subsequence, W and the second T
    left out) among the run-length-collapsed argmax phones."""
    feats, _ = goforward
    scores = models["topn"].senone_scores(feats)[0]
    cb = models["topn"].data.sen2cb[scores.argmax(-1).numpy()]
    names = [models["topn"].data.ciphones[c] for c in cb]
    assert sum(n in ("SIL", "+NSN+", "+SPN+") for n in names[:8]) >= 6
    runs = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    it = iter(runs)
    phones = ["G", "OW", "F", "AO", "R", "ER", "D", "T", "EH", "N", "M", "IY", "ER", "Z"]
    assert all(any(r == p for r in it) for p in phones), runs


def test_loading_and_describe(folder) -> None:
    model = load_model("embedded:sphinx-en-us")
    assert isinstance(model, SphinxAcousticModel) and model.default_decoder == "wfst"
    assert load_model(str(folder), "sphinx").topn == 4
    info = model.describe()
    assert info["type"] == "sphinx" and info["senones"] == 5126 and info["features"]["nfilt"] == 25
    assert model.tokens_to_words([1, 2, 3]) == [] and model.sample_rate == 16000


def _copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, dst / f.name)
    return dst


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "sendump").unlink(), "sendump: required sphinx model file missing"),
        (lambda d: _truncate(d / "means", 1000), "means: malformed means: truncated"),
        (lambda d: _truncate(d / "variances", 838000), "variances: malformed variances: truncated"),
        (lambda d: _truncate(d / "sendump", 100000), "sendump: malformed sendump: truncated"),
        (lambda d: _truncate(d / "mdef", 50000), "mdef"),
        (lambda d: _truncate(d / "transition_matrices", 200), "transition_matrices"),
        (lambda d: (d / "means").write_bytes((d / "means").read_bytes() + b"\0" * 8), "trailing bytes"),
        (lambda d: (d / "feat.params").write_text("-nfilt\n"), "feat.params"),
        (lambda d: (d / "feat.params").write_text("-agc max\n"), "agc"),
        (lambda d: (d / "means").write_bytes(b"garbage"), "not an s3 binary file"),
    ],
)
def test_bad_model_folders_give_one_line_errors(folder, tmp_path, damage, message: str) -> None:
    bad = _copy_model(folder, tmp_path / "bad")
    damage(bad)
    with pytest.raises(ModelError) as info:
        model = load_model(str(bad), "sphinx")
        model.features(torch.zeros(1, 1600), torch.tensor([1600]))
    text = str(info.value)
    assert message in text and "\n" not in text, text


def test_wrong_sizes_are_reported(folder, tmp_path) -> None:
    bad = _copy_model(folder, tmp_path / "mismatch")
    shutil.copy(FIX / "goforward.raw", bad / "sendump")  # a valid file of the wrong kind
    with pytest.raises(ModelError, match="sendump"):
        read_sphinx_model(bad)


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def test_density_floor_setting(folder) -> None:
    """-1 = pocketsphinx's floor, 0 = none; anything else negative is a one-line config error."""
    assert load_model(str(folder), "sphinx", density_floor=-1).density_floor == POCKETSPHINX_DENSITY_FLOOR
    assert load_model(str(folder), "sphinx", density_floor=0).density_floor == 0.0
    with pytest.raises(ModelError, match="model.density_floor=-3"):
        load_model(str(folder), "sphinx", density_floor=-3)
