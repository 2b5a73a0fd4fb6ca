"""`wfst` streaming and bounded back-pointer memory.

* partial hypotheses after every chunk (both backends) equal exhaustive Viterbi over the frames
  seen so far with final costs ignored (tiny random WFSTs, wide beam);
* the torch backend garbage-collects back-pointer records no live token leads back to, offline
  and in streams: the same results as without collection, with far fewer records kept.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers.wfst_graphs import V, device_graph, log_probs
from helpers.wfst_ref import (  # noqa: F401
    nemo_log_probs,
    random_wfst,
    single_thread,
    viterbi_reference,
    word_sequence_cost,
)

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}
WORDS = {i: f"w{i}" for i in range(1, 10)}


def with_gc(dec: WfstDecoder, records: int) -> WfstDecoder:
    """Collect the torch backend's records as soon as there are more than `records`."""
    options = dec._search_options
    dec._search_options = lambda device: replace(options(device), gc_records=records)
    return dec


def chunked(dec: WfstDecoder, lps: list[np.ndarray], sizes: list[int]) -> tuple[list[list], list]:
    """Decode `lps` as one stream each, all advanced together by chunks of the given sizes:
    (partial results after every chunk, final results)."""
    ids = dec.init_streams(len(lps))
    pos, partials = 0, []
    for size in sizes:
        active = [i for i, lp in enumerate(lps) if pos < len(lp)]
        if not active:
            break
        x = np.zeros((len(active), size, lps[0].shape[1]), np.float32)
        n = []
        for k, i in enumerate(active):
            piece = lps[i][pos : pos + size]
            x[k, : len(piece)] = piece
            n.append(len(piece))
        res = dec.decode_chunk([ids[i] for i in active], torch.from_numpy(x), torch.tensor(n), 0.04)
        partials.append(dict(zip(active, res, strict=True)))
        pos += size
    return partials, dec.finalize(ids, 0.04)


def check_optimal(res, fst: dict, lp: np.ndarray, use_final: bool) -> bool:
    """`res` is an optimal hypothesis: its cost is the exhaustive Viterbi cost and its words are a
    word sequence with that best cost (exact ties between word sequences, e.g. an epsilon cycle
    walked in another order, may go either way)."""
    ref = viterbi_reference(fst, lp, use_final=use_final)
    if ref is None and use_final:  # no final state reached: the best path without (Kaldi's fallback)
        return check_optimal(res, fst, lp, use_final=False)
    if ref is None:
        assert res.words == [] and res.score == -np.inf
        return False
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    seq = [int(w.word[1:]) for w in res.words]
    if seq != ref[1]:
        assert word_sequence_cost(fst, lp, seq, use_final) == pytest.approx(ref[0], abs=1e-4)
    return True


@pytest.mark.parametrize("backend", ["torch", "compiled"])
@pytest.mark.parametrize("seed", range(12))
def test_partials_equal_viterbi_over_the_frames_so_far(seed, backend):
    """After each chunk the partial hypothesis is the best path into any state after the frames
    seen so far (no final costs): exhaustive Viterbi over that prefix. The final result is the
    full Viterbi with final costs."""
    rng = np.random.default_rng(300 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 9)), V, 6)
    lps = [log_probs(rng, int(rng.integers(3, 12))) for _ in range(2)]
    sizes = [int(x) for x in rng.integers(1, 4, size=20)]
    dec = WfstDecoder(WfstConfig(**WIDE, backend=backend), graph=device_graph(fst), words=WORDS)
    partials, finals = chunked(dec, lps, sizes)
    ends = np.cumsum(sizes)
    checked = 0
    for c, part in enumerate(partials):
        for i, res in part.items():
            seen = min(int(ends[c]), len(lps[i]))
            checked += check_optimal(res, fst, lps[i][:seen], use_final=False)
    assert checked >= len(partials)
    for lp, res in zip(lps, finals, strict=True):
        check_optimal(res, fst, lp, use_final=True)


def long_output() -> tuple[ModelOutput, np.ndarray]:
    """All fixture clips one after the other as one long utterance (~3x longer than the rest)."""
    lp, lengths, _ = nemo_log_probs()
    long = np.concatenate([lp[b, : lengths[b]] for b in range(len(lp))])
    out = ModelOutput(torch.from_numpy(np.stack([long, long])), torch.tensor([len(long), 200]), 0.08, 128, [])
    return out, long


def test_torch_offline_records_are_collected(nemo_graphs):  # noqa: F811
    """Records are collected during the search (every time they pass 4x the live ones here):
    same words, times and scores as without collection, far fewer records at the end."""
    out, _ = long_output()
    opts = {"graph": str(nemo_graphs["compact"]), "beam": 10.0, "max_active": 200, "backend": "torch"}
    plain = WfstDecoder(WfstConfig(**opts))
    ref = plain.decode(out)
    dec = with_gc(WfstDecoder(WfstConfig(**opts)), 1)
    got = dec.decode(out)
    assert got == ref
    stats, ref_stats = dec.last_info["stats"], plain.last_info["stats"]
    assert stats["gc_runs"] > 5 and ref_stats["gc_runs"] == 0
    assert stats["records"] * 2 < ref_stats["records"]  # at most 4x the live ones after a collection


def test_torch_stream_records_are_collected(nemo_graphs):  # noqa: F811
    """A long stream in small chunks: partials and final equal those without collection (and the
    compiled backend's), and the records kept stay bounded instead of growing with the stream."""
    _, long = long_output()
    opts = {"graph": str(nemo_graphs["compact"]), "beam": 10.0, "max_active": 200, "min_active": 20}
    sizes = [7] * (len(long) // 7 + 1)
    plain = WfstDecoder(WfstConfig(**opts, backend="torch"))
    ref_parts, ref_final = chunked(plain, [long], sizes)
    dec = with_gc(WfstDecoder(WfstConfig(**opts, backend="torch")), 1000)
    parts, final = chunked(dec, [long], sizes)
    comp = WfstDecoder(WfstConfig(**opts, backend="compiled"))
    comp_parts, comp_final = chunked(comp, [long], sizes)
    assert final == ref_final
    assert [p[0].words for p in parts] == [p[0].words for p in ref_parts] == [p[0].words for p in comp_parts]
    assert [p[0].score for p in parts] == [p[0].score for p in ref_parts]
    assert final[0].words == comp_final[0].words
    assert final[0].score == pytest.approx(comp_final[0].score, abs=1e-3)
    kept, unbounded = dec._stream_search.backpointers.size, plain._stream_search.backpointers.size
    assert dec._stream_search.stats["gc_runs"] > 3
    assert kept * 2 < unbounded  # at most 4x the live ones after a collection


@pytest.mark.parametrize("chunk", [1, 7])
def test_finalize_gives_offline_lattices_and_nbest(nemo_graphs, chunk):  # noqa: F811
    """Streams (both backends, word boosts, window pruning inside chunks): finalize returns the
    offline n-best and word lattices (the same Kaldi text), so chunking changes nothing."""
    lp, lengths, _ = nemo_log_probs()
    utts = [0, 3, 5]
    opts = {
        "graph": str(nemo_graphs["compact"]),
        "beam": 10.0,
        "max_active": 300,
        "lattice_beam": 3.0,
        "lattice": True,
        "nbest": 4,
        "prune_interval": 5,
    }
    texts = {}
    for backend in ("torch", "compiled"):
        dec = WfstDecoder(WfstConfig(**opts, backend=backend))
        words = sorted(dec.word_ids)
        boost = [{words[4]: 2.0}, None, {words[9]: 1.5}]
        out = ModelOutput(torch.from_numpy(lp[utts]), torch.from_numpy(lengths[utts]), 0.08, 128, [])
        out.extra["boost"] = boost
        offline = dec.decode(out)
        ids = dec.init_streams(len(utts), boost=boost)
        pos = [0] * len(utts)
        while any(pos[i] < lengths[u] for i, u in enumerate(utts)):
            active = [i for i, u in enumerate(utts) if pos[i] < lengths[u]]
            x = np.zeros((len(active), chunk, lp.shape[2]), np.float32)
            n = []
            for k, i in enumerate(active):
                piece = lp[utts[i], pos[i] : min(pos[i] + chunk, lengths[utts[i]])]
                x[k, : len(piece)] = piece
                n.append(len(piece))
                pos[i] += len(piece)
            dec.decode_chunk([ids[i] for i in active], torch.from_numpy(x), torch.tensor(n), 0.08)
        finals = dec.finalize(ids, 0.08)
        for res, ref in zip(finals, offline, strict=True):
            assert res.words == ref.words and res.score == pytest.approx(ref.score, abs=1e-4)
            assert res.nbest == ref.nbest and len(res.nbest) > 1
            assert res.lattice.to_kaldi_text("u") == ref.lattice.to_kaldi_text("u")
        texts[backend] = [r.lattice.to_kaldi_text("u") for r in finals]
    assert texts["torch"] == texts["compiled"]
