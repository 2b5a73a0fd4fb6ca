"""`wfst-otf` with the LM tables in host memory (`decoder.lm_on_host`, `lm.host_lookup`, paper 000
sec. 2.2-2.3): the lookups against the plain-Python ARPA scorer, the deduplication counted per lookup
call against the distinct (state, word) pairs the call was given, and the device structure's size
against the ARPA's n-gram counts. Decoding results with lm_on_host are checked against the brute
force and kaldi-decoder references in test_wfst_otf.py (its ``torch-host`` backend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.otf_ref import WORDS, ArpaScorer, backend_options, brute_force, random_arpa
from helpers.wfst_graphs import device_graph, log_probs, run
from helpers.wfst_ref import random_wfst, single_thread  # noqa: F401

from asrdecode.decoders.wfst_otf import DifferenceLM, WfstOtfConfig, WfstOtfDecoder
from asrdecode.errors import ConfigError
from asrdecode.lm.host_lookup import HostLookupLM
from asrdecode.lm.ngram_tensor import BatchedNgramLM

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = [f"w{i}" for i in range(8)]


def lms(tmp_path, seed: int, orders=(3, 2)) -> tuple[DifferenceLM, ArpaScorer, ArpaScorer]:
    rng = np.random.default_rng(seed)
    large = random_arpa(tmp_path / "large.arpa", rng, VOCAB, orders[0])
    small = random_arpa(tmp_path / "small.arpa", rng, VOCAB, orders[1])
    diff = DifferenceLM(
        BatchedNgramLM.from_arpa(large, vocab=VOCAB), BatchedNgramLM.from_arpa(small, vocab=VOCAB), 0.7
    )
    return diff, ArpaScorer(large), ArpaScorer(small)


@pytest.mark.parametrize("cache", [0, 4, 1 << 16])
@pytest.mark.parametrize("staged", [False, True])
def test_batched_sentences_equal_arpa_scorer(tmp_path, cache, staged):
    """Sentences advanced together (one `step` per position, many repeated (state, word) pairs, word
    0 = no lookup past a sentence's end) cost scale * (large - small) by the textbook backoff rule."""
    diff, big, little = lms(tmp_path, 11)
    host = HostLookupLM(diff, "cpu", cache_size=cache, staged=staged)
    rng = np.random.default_rng(4)
    n, T = 64, 7
    ids = rng.integers(1, len(VOCAB), size=(n, T))
    ids[: n // 2, 3:] = ids[0, 3:]  # shared suffixes: the same pairs again
    lengths = rng.integers(0, T + 1, size=n)
    states = torch.full((n,), diff.START, dtype=torch.int64)
    total = torch.zeros(n, dtype=torch.float32)
    for t in range(T):
        words = torch.from_numpy(np.where(t < lengths, ids[:, t], 0))
        cost, nxt = host.step(states, words)
        ask = words > 0
        assert torch.equal(nxt[~ask], states[~ask]) and not cost[~ask].any()
        total, states = total + cost, torch.where(ask, nxt, states)
    total = total + host.final_cost(states)
    for i in range(n):
        words = [VOCAB[w] for w in ids[i, : lengths[i]]]
        assert float(total[i]) == pytest.approx(0.7 * (big.cost(words) - little.cost(words)), abs=1e-4)
    stats = host.take_stats()
    assert stats["pairs"] > stats["distinct"] >= stats["looked_up"]
    assert stats["looked_up"] + stats["cache_hits"] == stats["distinct"]
    assert (stats["cache_hits"] > 0) == (cache > 0)


def device_arpa_counts(scorer: ArpaScorer) -> tuple[int, int]:
    """(arcs, states) of the backoff acceptor of an ARPA, counted from its n-grams: an arc per
    n-gram of order >= 2 not ending in </s>; a state per n-gram of order < N that does not end in
    <s> or </s>, plus the root and the <s> state."""
    N = scorer.order
    arcs = sum(1 for g in scorer.prob if len(g) >= 2 and g[-1] != "</s>")
    states = 2 + sum(1 for g in scorer.prob if len(g) < N and g[-1] not in ("<s>", "</s>"))
    return arcs, states


@pytest.mark.parametrize("orders", [(3, 2), (2, 1)])
def test_device_structure_is_labels_offsets_backoff(tmp_path, orders):
    """Paper 000 sec. 2.2: the device keeps per LM only arc labels, first-label offsets and backoff
    states (int32), no weights or next states; everything else is in the host records."""
    diff, big, little = lms(tmp_path, 3, orders)
    host = HostLookupLM(diff, "cpu", cache_size=0)
    V = len(VOCAB)
    for labels, scorer, lm in ((host.large, big, diff.large), (host.small, little, diff.small)):
        A, S = device_arpa_counts(scorer)
        tensors = {"labels": labels.labels, "offsets": labels.offsets, "backoff": labels.backoff}
        assert {k: t.numel() for k, t in tensors.items()} == {"labels": A, "offsets": S + 1, "backoff": S}
        assert all(t.dtype == torch.int32 for t in tensors.values())
        assert labels.nbytes() == 4 * (A + 2 * S + 1)
        assert labels.nbytes() < lm.describe()["bytes"] / 2
    # host: (weight, next state) for every arc, unigram row entry and backoff, and one zero record
    A_l, S_l = device_arpa_counts(big)
    A_s, S_s = device_arpa_counts(little)
    assert host.host_records.shape == (A_l + V + S_l + A_s + V + S_s + 1, 2)
    parts = host.device_bytes()
    assert parts["labels"] == host.large.nbytes() + host.small.nbytes()
    assert parts["total"] == parts["labels"] + parts["state_maps"] + parts["cache"] and parts["cache"] == 0


@pytest.mark.parametrize("cache", [0, 1 << 16])
def test_lookups_per_call_equal_distinct_pairs(tmp_path, cache):
    """Decoding with lm_on_host: every lookup call fetches from the host exactly the distinct (LM
    state, word) pairs of its word slots that the cache does not hold (all of them without cache),
    and the 1-best equals the brute force."""
    rng = np.random.default_rng(7)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, 2)
    fst = random_wfst(rng, 7, 4, 6, eps_forward=True)
    lp = log_probs(rng, 6)
    cfg = WfstOtfConfig(beam=1e9, max_active=10**9, min_active=0, lm=str(large), small_lm=str(small))
    cfg.backend, cfg.lm_on_host, cfg.lm_cache = "torch", True, cache
    dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
    host = dec.lm_on(torch.device("cpu"))
    assert isinstance(host, HostLookupLM)
    calls: list[tuple[int, int, dict]] = []
    step = host.step

    def counted(states: torch.Tensor, words: torch.Tensor):
        ask = words > 0
        pairs = set(zip(states[ask].tolist(), words[ask].tolist(), strict=True))
        host.take_stats()
        out = step(states, words)
        calls.append((int(ask.sum()), len(pairs), host.take_stats()))
        return out

    host.step = counted
    (res,) = run(dec, [lp])
    ref = brute_force(fst, lp, ArpaScorer(large), ArpaScorer(small), 1.0, {})
    assert -res.score == pytest.approx(ref[0], abs=1e-3) and [w.word for w in res.words] == ref[1]
    assert len(calls) > 6 and sum(n for n, _, _ in calls) > sum(d for _, d, _ in calls) > 0
    for asked, distinct, stats in calls:
        assert stats["calls"] == 1 and stats["pairs"] == asked and stats["distinct"] == distinct
        assert stats["looked_up"] + stats["cache_hits"] == distinct
        if not cache:
            assert stats["looked_up"] == distinct
    assert (sum(s["cache_hits"] for _, _, s in calls) > 0) == (cache > 0)


def test_config_switch_and_errors(tmp_path):
    rng = np.random.default_rng(1)
    names = list(WORDS.values())
    arpa = random_arpa(tmp_path / "lm.arpa", rng, names, 2)
    fst = random_wfst(rng, 4, 4, 6)
    base = {"lm": str(arpa), "small_lm": str(arpa), "backend": "torch"}
    cpu = torch.device("cpu")
    dec = WfstOtfDecoder(WfstOtfConfig(**base), graph=device_graph(fst), words=WORDS)
    assert isinstance(dec.lm_on(cpu), DifferenceLM)  # default: host tables on CUDA only
    assert dec.lm_device_bytes(cpu)["total"] == dec.diff.table_bytes()
    host = WfstOtfDecoder(WfstOtfConfig(**base, lm_on_host=True), graph=device_graph(fst), words=WORDS)
    assert isinstance(host.lm_on(cpu), HostLookupLM)
    assert host.lm_device_bytes(cpu)["labels"] < dec.lm_device_bytes(cpu)["tables"]
    lp = [log_probs(rng, 5)]
    for a, b in zip(run(dec, lp), run(host, lp), strict=True):
        assert a.words == b.words and a.score == b.score  # bit-identical costs
    assert host.last_info["stats"]["lm_lookups"]["pairs"] > 0
    assert backend_options("torch-host")["lm_on_host"] is True
    with pytest.raises(ConfigError, match="decoder.lm_cache"):
        WfstOtfDecoder(WfstOtfConfig(**base, lm_cache=1000), graph=device_graph(fst), words=WORDS)
