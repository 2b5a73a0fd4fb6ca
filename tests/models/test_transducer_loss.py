"""TDT / RNN-T losses: value and gradients against an explicit enumeration of every alignment
(log-sum-exp over the enumerated paths) and, for RNN-T, against torchaudio's rnnt_loss."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchaudio.functional as AF

from asrdecode.models.transducer_loss import rnnt_loss, tdt_loss


def _tdt_paths(T: int, U: int, durations: list[int]) -> list[list[tuple[str, int, int, int]]]:
    """Every TDT alignment as a list of arcs (kind, t, u, duration index): labels of any duration
    land on a frame < T, blanks advance >= 1 frame, the last arc is a blank landing exactly on T."""
    paths: list[list[tuple[str, int, int, int]]] = []

    def walk(t: int, u: int, arcs: list[tuple[str, int, int, int]]) -> None:
        for k, d in enumerate(durations):
            if d >= 1 and t + d == T and u == U:
                paths.append([*arcs, ("blank", t, u, k)])
            if d >= 1 and t + d < T:
                walk(t + d, u, [*arcs, ("blank", t, u, k)])
            if u < U and t + d < T:
                walk(t + d, u + 1, [*arcs, ("label", t, u, k)])

    walk(0, 0, [])
    return paths


def _tdt_brute_force(token_logits, duration_logits, targets, T, U, durations, blank, sigma):
    """-log sum over enumerated alignments of prod P_tok(token | t, u) * P_dur(d | t, u)."""
    tok = torch.log_softmax(token_logits, -1) - sigma
    dur = torch.log_softmax(duration_logits, -1)
    scores = []
    for path in _tdt_paths(T, U, durations):
        s = torch.zeros((), dtype=tok.dtype)
        for kind, t, u, k in path:
            token = blank if kind == "blank" else int(targets[u])
            s = s + tok[t, u, token] + dur[t, u, k]
        scores.append(s)
    return -torch.logsumexp(torch.stack(scores), 0), len(scores)


def _rnnt_brute_force(logits, targets, T, U, blank):
    """-log sum over enumerated RNN-T alignments (labels stay on the frame, blanks advance one)."""
    lp = torch.log_softmax(logits, -1)
    scores = []

    def walk(t: int, u: int, s: torch.Tensor) -> None:
        if t == T - 1 and u == U:
            scores.append(s + lp[t, u, blank])
            return
        if t < T - 1:
            walk(t + 1, u, s + lp[t, u, blank])
        if u < U:
            walk(t, u + 1, s + lp[t, u, int(targets[u])])

    walk(0, 0, torch.zeros((), dtype=lp.dtype))
    return -torch.logsumexp(torch.stack(scores), 0)


def _random_batch(seed: int, lengths: list[tuple[int, int]], vocab: int, n_dur: int):
    g = torch.Generator().manual_seed(seed)
    B = len(lengths)
    T = max(t for t, _ in lengths)
    U = max(u for _, u in lengths)
    token_logits = torch.randn(B, T, U + 1, vocab + 1, generator=g, dtype=torch.float64) * 2
    duration_logits = torch.randn(B, T, U + 1, max(n_dur, 1), generator=g, dtype=torch.float64) * 2
    targets = torch.randint(0, vocab, (B, max(U, 1)), generator=g)
    frame_lengths = torch.tensor([t for t, _ in lengths])
    target_lengths = torch.tensor([u for _, u in lengths])
    return token_logits, duration_logits, targets, frame_lengths, target_lengths


@pytest.mark.parametrize(
    ("durations", "sigma", "seed"),
    [([0, 1, 2], 0.0, 0), ([0, 1, 2, 3, 4], 0.05, 1), ([1, 2], 0.0, 2), ([0, 2, 3], 0.0, 3)],
)
def test_tdt_loss_value_and_gradients_equal_brute_force(durations, sigma, seed) -> None:
    """Batched loss with ragged lengths (T_b, U_b) = brute force per utterance, value and gradients."""
    lengths = [(5, 2), (4, 3), (3, 0), (5, 1)]
    vocab, blank = 4, 4
    tok, dur, targets, tl, ul = _random_batch(seed, lengths, vocab, len(durations))
    tok.requires_grad_(True)
    dur.requires_grad_(True)
    nll = tdt_loss(tok, dur, targets, tl, ul, durations, blank, sigma=sigma, reduction="none")
    nll.sum().backward()
    total_paths = 0
    for b, (T, U) in enumerate(lengths):
        tok_b = tok.detach()[b].clone().requires_grad_(True)
        dur_b = dur.detach()[b].clone().requires_grad_(True)
        ref, n_paths = _tdt_brute_force(tok_b, dur_b, targets[b], T, U, durations, blank, sigma)
        ref.backward()
        total_paths += n_paths
        torch.testing.assert_close(nll[b], ref.detach(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(tok.grad[b], tok_b.grad, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(dur.grad[b], dur_b.grad, rtol=1e-7, atol=1e-9)
    assert total_paths >= 10  # sums over many alignments, not a single path


def test_tdt_path_enumeration_by_hand() -> None:
    """The enumerator itself on a case small enough to list by hand: T=2, U=1, durations {0, 1}."""
    assert sorted(_tdt_paths(2, 1, [0, 1])) == sorted(
        [
            [("blank", 0, 0, 1), ("label", 1, 0, 0), ("blank", 1, 1, 1)],
            [("label", 0, 0, 0), ("blank", 0, 1, 1), ("blank", 1, 1, 1)],
            [("label", 0, 0, 1), ("blank", 1, 1, 1)],
        ]
    )


def test_tdt_reductions_and_float32() -> None:
    """mean = per-utterance NLL / its length, averaged; mean_volume = sum / total length; float32
    agrees with float64."""
    durations, blank = [0, 1, 2, 3], 5
    tok, dur, targets, tl, ul = _random_batch(7, [(6, 3), (4, 2)], 5, len(durations))
    none = tdt_loss(tok, dur, targets, tl, ul, durations, blank, reduction="none")
    mean = tdt_loss(tok, dur, targets, tl, ul, durations, blank, reduction="mean")
    vol = tdt_loss(tok, dur, targets, tl, ul, durations, blank, reduction="mean_volume")
    torch.testing.assert_close(mean, (none / ul).mean())
    torch.testing.assert_close(vol, none.sum() / ul.sum())
    f32 = tdt_loss(tok.float(), dur.float(), targets, tl, ul, durations, blank, reduction="none")
    torch.testing.assert_close(f32.double(), none, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_rnnt_loss_equals_torchaudio_and_brute_force(seed: int) -> None:
    """The RNN-T special case of the lattice (labels duration 0, blanks duration 1 — unlike a TDT with
    durations {0, 1}, where labels may also take duration 1 and both share one duration distribution)
    matches torchaudio.functional.rnnt_loss in value and gradient, and a brute-force enumeration."""
    lengths = [(6, 3), (4, 4), (5, 1), (2, 0)]
    vocab, blank = 6, 6
    logits, _, targets, tl, ul = _random_batch(seed, lengths, vocab, 1)
    logits = logits.float().requires_grad_(True)
    ours = rnnt_loss(logits, targets, tl, ul, blank, reduction="none")
    (g_ours,) = torch.autograd.grad(ours.sum(), logits)
    ref_logits = logits.detach().clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchaudio 2.9 deprecation notice
        ref = AF.rnnt_loss(
            ref_logits,
            targets.to(torch.int32),
            tl.to(torch.int32),
            ul.to(torch.int32),
            blank=blank,
            reduction="none",
        )
    (g_ref,) = torch.autograd.grad(ref.sum(), ref_logits)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    for b, (T, U) in enumerate(lengths):
        torch.testing.assert_close(g_ours[b, :T, : U + 1], g_ref[b, :T, : U + 1], rtol=1e-4, atol=1e-5)
        assert float(g_ours[b, T:].abs().sum()) == 0.0 and float(g_ours[b, :, U + 1 :].abs().sum()) == 0.0
        brute = _rnnt_brute_force(logits.detach()[b].double(), targets[b], T, U, blank)
        torch.testing.assert_close(ours[b].double(), brute, rtol=1e-5, atol=1e-4)


def test_tdt_loss_rejects_bad_durations() -> None:
    tok, dur, targets, tl, ul = _random_batch(0, [(3, 1)], 3, 2)
    with pytest.raises(ValueError, match="no positive value"):
        tdt_loss(tok, dur, targets, tl, ul, [0, 0], blank=3)
    with pytest.raises(ValueError, match="duration logits"):
        tdt_loss(tok, dur, targets, tl, ul, [0, 1, 2], blank=3)
