"""A Kaldi-style HCLG (transition-ids as ilabels) with its `show-transitions` text in Kaldi's own
format, converted once into the device format (ilabel = pdf + 1) and decoded by the `wfst` decoder,
against kaldi-decoder's FasterDecoder decoding the original transition-id graph, with each frame's
pdf log-likelihoods spread over the transition-ids by the test's own table (an independent
reference: it never reads the show-transitions text).

The transition model follows Kaldi's TransitionModel: tuples (phone, hmm-state, forward-pdf,
self-loop-pdf) sorted, transition-states numbered from 1 in that order, transition-ids numbered
from 1 over each state's transitions (self-loop first, as in Kaldi's default topology). Two flavours:
a 3-state HMM with tied pdfs across phones (`pdf = K` lines) and a chain-style 1-state topology
whose self-loop reads another pdf than its forward transition (`forward-pdf = F self-loop-pdf = S`).
"""

from __future__ import annotations

import math

import kaldifst
import numpy as np
import pytest
import torch

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.graph import DeviceGraph
from asrdecode.graph.openfst import convert_openfst_graph
from asrdecode.models.base import ModelOutput

PHONES = ["<eps>", "sil", "a", "b", "c"]  # Kaldi phone ids = list index
WORDS = ["<eps>", "ab", "ba", "c", "acc"]
# no two spellings of one phone string (H o LG stays functional, so it determinizes, as with Kaldi's
# disambiguation symbols); "ab"/"acc" share their first phone, so word labels move past it
PRONS = {"ab": ["a", "b"], "ba": ["b", "a"], "c": ["c"], "acc": ["a", "c", "c"]}
# (phone, hmm-state) -> (forward pdf, self-loop pdf)
HMM_PDFS = {
    ("sil", 0): (0, 0),
    ("sil", 1): (1, 1),
    ("sil", 2): (2, 2),
    ("a", 0): (3, 3),
    ("a", 1): (4, 4),
    ("a", 2): (5, 5),
    ("b", 0): (6, 6),
    ("b", 1): (4, 4),  # tied with a's middle state
    ("b", 2): (7, 7),
    ("c", 0): (8, 8),
    ("c", 1): (9, 9),
    ("c", 2): (5, 5),  # tied with a's last state
}
CHAIN_PDFS = {("sil", 0): (0, 1), ("a", 0): (2, 3), ("b", 0): (4, 3), ("c", 0): (5, 6)}


def transition_model(pdfs: dict, seed: int) -> list[dict]:
    """Kaldi's numbering: tuples sorted by (phone, hmm-state, forward-pdf, self-loop-pdf)."""
    rng = np.random.default_rng(seed)
    tuples = sorted((PHONES.index(p), h, f, s) for (p, h), (f, s) in pdfs.items())
    states, tid = [], 1
    for phone, hmm_state, fwd, loop in tuples:
        p_loop = float(np.round(rng.uniform(0.3, 0.9), 4))
        states.append(
            {
                "phone": PHONES[phone],
                "hmm_state": hmm_state,
                "forward_pdf": fwd,
                "self_loop_pdf": loop,
                "self_loop": (tid, p_loop),
                "forward": (tid + 1, 1.0 - p_loop),
            }
        )
        tid += 2
    return states


def show_transitions(states: list[dict], chain: bool) -> str:
    """The text `show-transitions phones.txt final.mdl [occs]` prints (Kaldi's TransitionModel::Print):
    C++ stream floats (6 significant digits), an optional ' count of pdf = N' before the bracket."""
    lines = []
    for ts, st in enumerate(states, 1):
        head = f"Transition-state {ts}: phone = {st['phone']} hmm-state = {st['hmm_state']}"
        if chain:
            head += f" forward-pdf = {st['forward_pdf']} self-loop-pdf = {st['self_loop_pdf']}"
        else:
            head += f" pdf = {st['forward_pdf']}"
        lines.append(head)
        loop_tid, p_loop = st["self_loop"]
        fwd_tid, p_fwd = st["forward"]
        lines.append(f" Transition-id = {loop_tid} p = {p_loop:g} count of pdf = {17 + ts} [self-loop]")
        h = st["hmm_state"]
        lines.append(f" Transition-id = {fwd_tid} p = {p_fwd:g} count of pdf = {17 + ts} [{h} -> {h + 1}]")
    return "\n".join(lines) + "\n"


def kaldi_style_hclg(states: list[dict]):
    """det(min(H o LG)) on transition-ids: H = one left-to-right HMM per phone (self-loops included,
    as after Kaldi's add-self-loops) entered from a hub state with the phone on an epsilon-input arc;
    LG = a bigram-like word loop with optional silence between words."""
    by_phone: dict[str, list[dict]] = {}
    for st in states:
        by_phone.setdefault(st["phone"], []).append(st)
    h_lines, n = [], 1
    for phone, hmm in by_phone.items():
        hmm = sorted(hmm, key=lambda s: s["hmm_state"])
        first = n
        n += len(hmm)
        h_lines.append(f"0 {first} 0 {PHONES.index(phone)} 0")
        for k, st in enumerate(hmm):
            here, nxt = first + k, (first + k + 1 if k + 1 < len(hmm) else 0)
            (lt, lp), (ft, fp) = st["self_loop"], st["forward"]
            h_lines.append(f"{here} {here} {lt} 0 {-math.log(lp):.6f}")
            h_lines.append(f"{here} {nxt} {ft} 0 {-math.log(fp):.6f}")
    h_lines.append("0 0")
    H = kaldifst.compile("\n".join(h_lines) + "\n")

    # LG: state 0 = start / after a word, state 1 = after "ab" (where "ba" is cheaper)
    word_cost = {"ab": 1.2, "ba": 1.6, "c": 1.0, "acc": 2.3}
    lg, n = [], 2
    for src, bonus in ((0, {}), (1, {"ba": -0.9})):
        for word, pron in PRONS.items():
            dst = 1 if word == "ab" else 0
            cost = word_cost[word] + bonus.get(word, 0.0)
            prev = src
            for k, ph in enumerate(pron):
                to = dst if k == len(pron) - 1 else n
                n += to == n
                out = WORDS.index(word) if k == 0 else 0
                lg.append(f"{prev} {to} {PHONES.index(ph)} {out} {cost if k == 0 else 0.0}")
                prev = to
        lg.append(f"{src} {src} {PHONES.index('sil')} 0 0.7")
    lg += ["0 0.4", "1 0.9"]
    LG = kaldifst.compile("\n".join(lg) + "\n")
    kaldifst.arcsort(H, sort_type="olabel")
    kaldifst.arcsort(LG, sort_type="ilabel")
    HCLG = kaldifst.compose(H, LG)
    assert not kaldifst.determinize_star(HCLG, max_states=20000)  # False = finished
    kaldifst.minimize_encoded(HCLG)
    kaldifst.connect(HCLG)
    kaldifst.arcsort(HCLG, sort_type="ilabel")
    return HCLG


def loglikes(states: list[dict], num_pdfs: int, seed: int, batch: int, frames: int) -> np.ndarray:
    """Per utterance: a random word sequence, frames aligned to its pdfs (random durations) at high
    likelihood, Gaussian noise everywhere (so no two paths tie)."""
    rng = np.random.default_rng(seed)
    by_phone: dict[str, list[dict]] = {}
    for st in states:
        by_phone.setdefault(st["phone"], []).append(st)
    x = rng.normal(size=(batch, frames, num_pdfs)).astype(np.float32) - 4.0
    for b in range(batch):
        pdf_seq: list[int] = []
        while len(pdf_seq) < frames:
            word = list(PRONS)[int(rng.integers(len(PRONS)))]
            for ph in ["sil", *PRONS[word]]:
                for st in sorted(by_phone[ph], key=lambda s: s["hmm_state"]):
                    dur = int(rng.integers(1, 4))
                    pdf_seq += [st["self_loop_pdf"]] * (dur - 1) + [st["forward_pdf"]]
        x[b, np.arange(frames), pdf_seq[:frames]] += 3.5
    return x


def faster_decoder_on_tids(hclg, pdf_loglikes: np.ndarray, tid2pdf: dict[int, int], beam: float):
    """kaldi-decoder's FasterDecoder on the transition-id graph: column tid-1 holds the frame's
    log-likelihood of pdf(tid) (DecodableCtc reads column ilabel-1)."""
    import kaldi_decoder

    max_tid = max(tid2pdf)
    by_tid = np.zeros((len(pdf_loglikes), max_tid), dtype=np.float32)
    for tid, pdf in tid2pdf.items():
        by_tid[:, tid - 1] = pdf_loglikes[:, pdf]
    opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=2**31 - 1, min_active=0)
    dec = kaldi_decoder.FasterDecoder(hclg, opts)
    dec.decode(kaldi_decoder.DecodableCtc(by_tid))
    ok, lat = dec.get_best_path()
    assert ok and dec.reached_final()
    ok, _, olabels, weight = kaldifst.get_linear_symbol_sequence(lat)
    assert ok
    return float(weight.value1) + float(weight.value2), [WORDS[o] for o in olabels]


@pytest.mark.parametrize("chain", [False, True])
def test_kaldi_hclg_converted_decodes_like_faster_decoder_on_tids(tmp_path, chain):
    states = transition_model(CHAIN_PDFS if chain else HMM_PDFS, seed=int(chain))
    tid2pdf = {}
    for st in states:
        tid2pdf[st["self_loop"][0]] = st["self_loop_pdf"]
        tid2pdf[st["forward"][0]] = st["forward_pdf"]
    num_pdfs = max(tid2pdf.values()) + 1
    hclg = kaldi_style_hclg(states)
    kaldifst.StdConstFst(hclg).write(str(tmp_path / "HCLG.fst"))  # mkgraph.sh writes a const FST
    (tmp_path / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(WORDS)))
    (tmp_path / "transitions.txt").write_text(show_transitions(states, chain))
    meta = convert_openfst_graph(
        tmp_path / "HCLG.fst", tmp_path / "words.txt", tmp_path / "graph", tmp_path / "transitions.txt"
    )
    assert meta["kind"] == "HCLG" and meta["num_pdfs"] == num_pdfs
    g = DeviceGraph.load(tmp_path / "graph" / "graph.safetensors")
    # every arc kept, ilabels mapped tid -> pdf + 1 by the test's table
    src = DeviceGraph.from_kaldifst(hclg)
    assert g.num_arcs == src.num_arcs and g.num_states == src.num_states
    mapped = sorted(
        (s, tid2pdf[i] + 1 if i else 0, o, n)
        for s, i, o, n in zip(
            src.arc_arrays()["src"].tolist(),
            src.ilabel.tolist(),
            src.olabel.tolist(),
            src.nextstate.tolist(),
            strict=True,
        )
    )
    got = sorted(
        zip(
            g.arc_arrays()["src"].tolist(),
            g.ilabel.tolist(),
            g.olabel.tolist(),
            g.nextstate.tolist(),
            strict=True,
        )
    )
    assert got == mapped
    # self-loop and forward transitions of one state read different pdfs in the chain flavour
    assert chain == any(st["self_loop_pdf"] != st["forward_pdf"] for st in states)

    batch, frames, beam = 4, 40, 30.0
    lp = loglikes(states, num_pdfs, seed=3 + int(chain), batch=batch, frames=frames)
    lengths = np.array([40, 33, 27, 40])
    dec = WfstDecoder(WfstConfig(graph=str(tmp_path / "graph"), beam=beam, max_active=100000, min_active=0))
    results = dec.decode(ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.01, -1, []))
    decoded_words = set()
    for b, res in enumerate(results):
        ref_cost, ref_words = faster_decoder_on_tids(hclg, lp[b, : lengths[b]], tid2pdf, beam)
        assert [w.word for w in res.words] == ref_words, b
        assert -res.score == pytest.approx(ref_cost, abs=2e-3), b
        decoded_words |= set(ref_words)
    assert len(decoded_words) >= 3  # the utterances exercise several words
