"""Benchmark the `wfst` decoder against kaldi-decoder's FasterDecoder (and flashlight-text's
LexiconDecoder) on the same graphs and log-probs (issue 4 item 8, issue 7 item 4).

    .venv/bin/python scripts/bench/wfst_decode.py                      # demo TLG + 20k-word TLG
    .venv/bin/python scripts/bench/wfst_decode.py --cases demo --batch 1 32
    .venv/bin/python scripts/bench/wfst_decode.py --beams 8 10 12 14   # + decoding cost vs beam
    .venv/bin/python scripts/bench/wfst_decode.py --graph out/graphs/my-tlg --logprobs lp.npz

Cases (one graph + one set of log-probs each; every decoder of a case gets the same inputs):

* ``demo``: a compact TLG for the NeMo fixture model (BPE units) from the demo LM
  (data/demo/graph/lm.arpa, bigram; built into out/bench/wfst-graph), and the fixture's real
  log-probs repeated to ``--utterances`` utterances (frame shift 0.08 s). The fixture model is
  random, so there is no meaningful WER: agreement with Kaldi's 1-best is reported.
* ``20k``: a 20k-word synthetic trigram LM (scripts/bench/build_graph.py's Zipf corpus,
  asrdecode.lm.train_arpa) with a character lexicon, compact TLG (~1.3M states, ~3M arcs; built
  once into out/bench/wfst-graph-20k, ~90 s), and peaky character log-probs that spell corpus
  sentences with 10% of the letters confused (frame shift 0.04 s); WER against those sentences.
  flashlight-text's LexiconDecoder runs here too, with KenLM on the same ARPA, the same lexicon
  (word -> letters), blank as the word-boundary ("silence") token as for CTC models without a
  space unit, Viterbi scores (no log-add) and lm_weight = ln 10 (KenLM scores are log10, our
  graph costs natural log), i.e. the same objective as the TLG.
* ``--graph/--logprobs``: your own graph folder and npz (log_probs [B,T,V], lengths).

Rows: kaldi-decoder FasterDecoder on one core (one utterance at a time) and on all cores (one
process per core, utterances dealt round robin by length); asrdecode `wfst` with the compiled
backend (numba, ``--compiled-threads``) and the torch backend (``--batch`` sizes); flashlight.
Columns: frames/s, RTFx at the model frame rate, ratio to Kaldi's one-core throughput,
1-best identical to Kaldi's (word sequences), WER, peak memory (RSS growth over the timed part of
the row: search state, plus the decoder's float32 copy of the batch's acoustic costs; for the
process rows the largest worker's whole peak RSS, graph included), arcs expanded per second and
host syncs per frame (torch).
Setup (graph loading, numba compile or cache load, worker start, KenLM load) is not timed.
Timings are wall clock: on a shared machine compare the ratios of one run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "nemo"
LETTERS = list("abcdefghijklmnopqrstuvwxyz")


# ------------------------------------------------------------------ memory
def _rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class PeakMemory:
    """RSS growth of this process over a block (Linux: resets the peak with /proc/self/clear_refs)."""

    def __enter__(self) -> PeakMemory:
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")
        self.before = _rss_kib()
        self.mib = float("nan")
        return self

    def __exit__(self, *exc) -> None:
        self.mib = max(_rss_kib("VmHWM") - self.before, 0) / 1024


# ------------------------------------------------------------------ inputs
def demo_graph(out: Path) -> Path:
    from asrdecode.graph import GraphBuildConfig, build_graph

    if not (out / "graph.pt").is_file():
        cfg = GraphBuildConfig(
            arpa=str(ROOT / "data" / "demo" / "graph" / "lm.arpa"),
            model=str(FIXTURE / "ctc_bpe.nemo"),
            lexicon_type="bpe",
            topology="compact",
            max_order=2,
        )
        build_graph(cfg, out)
    return out


def graph_20k(out: Path) -> tuple[Path, Path, Path]:
    """(graph folder, ARPA, corpus) of the 20k-word synthetic LM; built once."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build_graph import synthetic_lm

    from asrdecode.graph import GraphBuildConfig, build_graph

    lm_dir = out.parent / (out.name + "-lm")
    arpa, corpus = lm_dir / "lm_20000.arpa", lm_dir / "corpus_20000.txt"
    if not arpa.is_file():
        lm_dir.mkdir(parents=True, exist_ok=True)
        print("building the 20k-word LM and TLG (once, ~2 min) ...", flush=True)
        synthetic_lm(20000, lm_dir, 20000)
    if not (out / "graph.pt").is_file():
        cfg = GraphBuildConfig(
            arpa=str(arpa), unit_list=LETTERS, blank="last", lexicon_type="chars", topology="compact"
        )
        build_graph(cfg, out, force=True)
    return out, arpa, corpus


def spelled_logprobs(
    sentences: list[list[str]], seed: int = 0, confuse: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Peaky CTC log-probs over 26 letters + blank (last) that spell each sentence: 1-2 frames per
    letter, 0-2 blanks between letters (at least one between equal letters), a letter confused
    with a random one with probability `confuse`, peak probability 0.5-0.95, noisy rest."""
    rng = np.random.default_rng(seed)
    V, blank = len(LETTERS) + 1, len(LETTERS)
    seqs = []
    for words in sentences:
        cols: list[int] = [blank] * int(rng.integers(1, 4))
        prev = -1
        for w in words:
            for ch in w:
                c = LETTERS.index(ch)
                n_blank = int(rng.integers(0, 3))
                if c == prev:
                    n_blank = max(n_blank, 1)
                cols += [blank] * n_blank
                shown = int(rng.integers(0, 26)) if rng.random() < confuse else c
                cols += [shown] * int(rng.integers(1, 3))
                prev = c
            cols += [blank] * int(rng.integers(0, 3))
        cols += [blank] * 2
        seqs.append(cols)
    T = max(len(s) for s in seqs)
    x = np.full((len(seqs), T, V), -30.0, dtype=np.float32)
    for b, cols in enumerate(seqs):
        n = len(cols)
        noise = rng.normal(size=(n, V)).astype(np.float32)
        rest = np.exp(noise)
        peak = rng.uniform(0.5, 0.95, size=n).astype(np.float32)
        rest[np.arange(n), cols] = 0.0
        rest *= ((1 - peak) / rest.sum(1))[:, None]
        rest[np.arange(n), cols] = peak
        x[b, :n] = np.log(rest)
    return x, np.array([len(s) for s in seqs])


def load_npz(path: Path, utterances: int) -> tuple[np.ndarray, np.ndarray]:
    d = np.load(path)
    lp = d["log_probs"].astype(np.float32)
    lengths = d["encoder_len"] if "encoder_len" in d else d["lengths"]
    reps = -(-utterances // len(lp))
    return np.concatenate([lp] * reps)[:utterances], np.concatenate([lengths] * reps)[:utterances]


def sphinx_loglikes(cache: Path) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """Senone log-likelihoods of the real recordings (data/demo/real) from the pocketsphinx en-us
    HMM on our device code (top-4 Gaussians, as configs/sphinx-en-us.yaml); cached in `cache`."""
    if not cache.is_file():
        import soundfile

        from asrdecode.audio.batching import pad_batch
        from asrdecode.models.loading import load_model

        rows = [
            json.loads(ln) for ln in (ROOT / "data/demo/real/manifest.jsonl").read_text().splitlines() if ln
        ]
        waves = [
            soundfile.read(ROOT / "data/demo/real" / r["audio_filepath"], dtype="float32")[0] for r in rows
        ]
        model = load_model("embedded:sphinx-en-us", "sphinx", 4).eval()
        with torch.no_grad():
            batch, lens = pad_batch(waves)
            feats, feat_lens = model.features(batch, lens)
            out = model.forward_features(feats, feat_lens)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(
            cache,
            log_probs=out.log_probs.float().numpy(),
            lengths=out.lengths.numpy(),
            text=np.array([r["text"] for r in rows]),
        )
    d = np.load(cache)
    return d["log_probs"].astype(np.float32), d["lengths"], [str(t).split() for t in d["text"]]


# ------------------------------------------------------------------ kaldi-decoder
_KALDI: dict = {}


def _kaldi_init(fst_path: str, beam: float, max_active: int, min_active: int) -> None:
    import kaldi_decoder
    import kaldifst

    _KALDI["fst"] = kaldifst.StdConstFst.read(fst_path)
    _KALDI["opts"] = kaldi_decoder.FasterDecoderOptions(
        beam=beam, max_active=max_active, min_active=min_active
    )


def _kaldi_decode(items: list[tuple[int, np.ndarray]]) -> tuple[float, list[tuple[int, list[int]]], int]:
    """Decode (index, log-probs) items in this process: (seconds, [(index, olabels)], peak RSS KiB)."""
    import kaldi_decoder
    import kaldifst

    out = []
    t = time.perf_counter()
    for i, lp in items:
        dec = kaldi_decoder.FasterDecoder(_KALDI["fst"], _KALDI["opts"])
        dec.decode(kaldi_decoder.DecodableCtc(lp))
        ok, lat = dec.get_best_path()
        _, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lat) if ok else (0, 0, [], 0)
        out.append((i, list(olabels)))
    sec = time.perf_counter() - t
    return sec, out, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def bench_kaldi(fst_path: Path, lp, lengths, args, beam: float, processes: int = 1) -> dict:
    items = [(b, np.ascontiguousarray(lp[b, : lengths[b]])) for b in range(len(lp))]
    init = (str(fst_path), beam, args.max_active, args.min_active)
    if processes <= 1:
        _kaldi_init(*init)
        with PeakMemory() as mem:
            sec, out, _ = _kaldi_decode(items)
        peak = mem.mib
    else:
        order = np.argsort(-lengths, kind="stable")
        parts = [[items[i] for i in order[p::processes]] for p in range(processes)]
        with ProcessPoolExecutor(processes, initializer=_kaldi_init, initargs=init) as pool:
            list(pool.map(_kaldi_decode, [[items[0]]] * processes))  # workers up, graph loaded
            t = time.perf_counter()
            done = list(pool.map(_kaldi_decode, parts))
            sec = time.perf_counter() - t
        out = [x for _, o, _ in done for x in o]
        peak = max(m for _, _, m in done) / 1024
    words = dict(out)
    return {
        "decoder": f"kaldi FasterDecoder ({processes} process{'es' if processes > 1 else ''})",
        "seconds": sec,
        "peak_mib": peak,
        "olabels": [words[b] for b in range(len(lp))],
    }


# ------------------------------------------------------------------ asrdecode wfst
def bench_wfst(graph_dir, lp, lengths, batch, args, beam, backend="torch", threads=0, shift=0.08) -> dict:
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.models.base import ModelOutput

    cfg = WfstConfig(
        graph=str(graph_dir),
        beam=beam,
        max_active=args.max_active,
        min_active=args.min_active,
        backend=backend,
        threads=threads,
    )
    dec = WfstDecoder(cfg)
    blank = lp.shape[2] - 1
    warm = ModelOutput(torch.from_numpy(lp[:2]), torch.from_numpy(lengths[:2]), shift, blank, [])
    dec.decode(warm)  # compile / load the numba cache, start the worker threads, graph on device
    syncs, frames_stepped, arcs = 0, 0, 0
    order = np.argsort(-lengths, kind="stable")  # batches of similar length, as the pipeline does
    results: dict[int, list[int]] = {}
    batches = []  # inputs prepared before timing (as a model would hand them over)
    for i in range(0, len(lp), batch):
        idx = order[i : i + batch]
        T = int(lengths[idx].max())
        x = torch.from_numpy(np.ascontiguousarray(lp[idx, :T])).to(args.device)
        batches.append((idx, ModelOutput(x, torch.from_numpy(lengths[idx]), shift, blank, [])))
    with PeakMemory() as mem:
        t = time.perf_counter()
        for idx, out in batches:
            for j, res in zip(idx, dec.decode(out), strict=True):
                results[int(j)] = [dec.word_ids.get(w.word, -1) for w in res.words]
            st = dec.last_info["stats"]
            syncs += st["syncs"]
            frames_stepped += st["frames"]
            arcs += st["arcs"]
        sec = time.perf_counter() - t
    return {
        "decoder": f"compiled {threads} thread{'s' if threads > 1 else ''}"
        if backend == "compiled"
        else f"torch batch {batch}",
        "backend": backend,
        "threads": threads if backend == "compiled" else args.threads,
        "batch": batch,
        "seconds": sec,
        "peak_mib": mem.mib,
        "arcs_per_second": arcs / sec,
        "syncs_per_frame_step": syncs / max(frames_stepped, 1),
        "olabels": [results[b] for b in range(len(lp))],
    }


# ------------------------------------------------------------------ flashlight-text
def bench_flashlight(graph_dir: Path, arpa: Path, lp, lengths, args, beam: float) -> dict:
    """flashlight-text LexiconDecoder + KenLM on the same LM, lexicon and log-probs."""
    from flashlight.lib.text.decoder import (
        CriterionType,
        KenLM,
        LexiconDecoder,
        LexiconDecoderOptions,
        SmearingMode,
        Trie,
    )
    from flashlight.lib.text.dictionary import Dictionary, create_word_dict

    words = [ln.split()[0] for ln in (graph_dir / "words.txt").read_text().splitlines() if ln.split()]
    words = [w for w in words if w.isalpha() and w.islower()]
    lexicon = {w: [list(w)] for w in words}
    tokens = Dictionary()
    for u in [*LETTERS, "<blank>"]:
        tokens.add_entry(u)
    blank = tokens.get_index("<blank>")
    word_dict = create_word_dict({**lexicon, "<unk>": []})  # flashlight wants an <unk> entry
    lm = KenLM(str(arpa), word_dict)
    trie = Trie(tokens.index_size(), blank)
    start = lm.start(False)
    for w, spellings in lexicon.items():
        wi = word_dict.get_index(w)
        _, score = lm.score(start, wi)
        for sp in spellings:
            trie.insert([tokens.get_index(c) for c in sp], wi, score)
    trie.smear(SmearingMode.MAX)
    opts = LexiconDecoderOptions(
        beam_size=args.flashlight_beam_size,
        beam_size_token=len(LETTERS) + 1,
        beam_threshold=beam,
        lm_weight=math.log(10.0),
        word_score=0.0,
        unk_score=-math.inf,
        sil_score=0.0,
        log_add=False,
        criterion_type=CriterionType.CTC,
    )
    unk = word_dict.get_index("<unk>")
    dec = LexiconDecoder(opts, trie, lm, blank, blank, unk, [], False)
    wid = {w: int(i) for w, i in (ln.split() for ln in (graph_dir / "words.txt").read_text().splitlines())}
    out = []
    with PeakMemory() as mem:
        t = time.perf_counter()
        for b in range(len(lp)):
            x = np.ascontiguousarray(lp[b, : lengths[b]])
            hyps = dec.decode(x.ctypes.data, x.shape[0], x.shape[1])
            seq = [word_dict.get_entry(i) for i in hyps[0].words if i >= 0] if hyps else []
            out.append([wid.get(w, -1) for w in seq])
        sec = time.perf_counter() - t
    return {
        "decoder": f"flashlight Lexicon+KenLM (beam {args.flashlight_beam_size})",
        "seconds": sec,
        "peak_mib": mem.mib,
        "olabels": out,
    }


# ------------------------------------------------------------------ one case
def wer(refs: list[list[str]], hyps: list[list[str]]) -> float:
    import jiwer

    return float(jiwer.wer([" ".join(r) for r in refs], [" ".join(h) or "<none>" for h in hyps]))


def run_case(name, graph_dir, lp, lengths, shift, args, refs=None, arpa=None) -> dict:
    fst_path = next(graph_dir.glob("*.fst"))
    frames = float(lengths.sum())
    names = {int(i): w for w, i in (ln.split() for ln in (graph_dir / "words.txt").read_text().splitlines())}
    beam = args.beam
    rows = [bench_kaldi(fst_path, lp, lengths, args, beam)]
    base_fps = frames / rows[0]["seconds"]
    if args.kaldi_processes > 1:
        rows.append(bench_kaldi(fst_path, lp, lengths, args, beam, args.kaldi_processes))
    for n in args.compiled_threads:
        rows.append(bench_wfst(graph_dir, lp, lengths, args.compiled_batch, args, beam, "compiled", n, shift))
    for b in args.batch:
        rows.append(bench_wfst(graph_dir, lp, lengths, b, args, beam, "torch", shift=shift))
    if arpa is not None and not args.no_flashlight:
        try:
            rows.append(bench_flashlight(graph_dir, arpa, lp, lengths, args, beam))
        except ImportError as e:
            print(f"flashlight-text not available: {e}")
    kaldi_words = rows[0]["olabels"]
    for r in rows:
        r["frames_per_second"] = frames / r["seconds"]
        r["rtfx"] = frames * shift / r["seconds"]
        r["ratio_vs_kaldi_1core"] = r["frames_per_second"] / base_fps
        r["same_1best_as_kaldi"] = sum(a == b for a, b in zip(r["olabels"], kaldi_words, strict=True))
        if refs is not None:
            r["wer"] = wer(refs, [[names.get(w, "?") for w in o] for o in r["olabels"]])
    sweep = []
    for b in args.beams:
        k = bench_kaldi(fst_path, lp, lengths, args, b)
        c = bench_wfst(graph_dir, lp, lengths, args.compiled_batch, args, b, "compiled", 1, shift)
        sweep.append(
            {
                "beam": b,
                "kaldi_frames_per_second": frames / k["seconds"],
                "compiled_frames_per_second": frames / c["seconds"],
                "compiled_arcs_per_frame": c["arcs_per_second"] * c["seconds"] / frames,
                "ratio": k["seconds"] / c["seconds"],
                "same_1best": sum(a == b for a, b in zip(c["olabels"], k["olabels"], strict=True)),
                **({"wer_kaldi": wer(refs, _names(k, names)), "wer_compiled": wer(refs, _names(c, names))}
                   if refs is not None else {}),
            }
        )  # fmt: skip
    meta = json.loads((graph_dir / "meta.json").read_text()) if (graph_dir / "meta.json").is_file() else {}
    sizes = meta.get("sizes", {})
    size = sizes.get("TLG") or sizes.get("HCLG") or {}
    return {
        "case": name,
        "graph": str(graph_dir),
        "graph_states": size.get("states"),
        "graph_arcs": size.get("arcs"),
        "utterances": len(lp),
        "frames": int(frames),
        "frame_shift": shift,
        "options": {"beam": beam, "max_active": args.max_active, "min_active": args.min_active},
        "rows": [{k: v for k, v in r.items() if k != "olabels"} for r in rows],
        "beam_sweep": sweep,
    }


def _names(row: dict, names: dict[int, str]) -> list[list[str]]:
    return [[names.get(w, "?") for w in o] for o in row["olabels"]]


def print_case(c: dict) -> None:
    print(
        f"\n== {c['case']}: {c['graph']} ({c['graph_states']} states, {c['graph_arcs']} arcs), "
        f"{c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}, "
        f"max_active {c['options']['max_active']}"
    )
    has_wer = any("wer" in r for r in c["rows"])
    print(
        f"{'decoder':<40}{'frames/s':>10}{'RTFx':>8}{'vs kaldi':>10}{'same 1-best':>13}"
        + (f"{'WER':>7}" if has_wer else "")
        + f"{'peak MiB':>10}{'Marcs/s':>9}{'syncs/fr':>9}"
    )
    for r in c["rows"]:
        arcs = f"{r['arcs_per_second'] / 1e6:>9.2f}" if "arcs_per_second" in r else f"{'-':>9}"
        syncs = f"{r['syncs_per_frame_step']:>9.1f}" if "syncs_per_frame_step" in r else f"{'-':>9}"
        print(
            f"{r['decoder']:<40}{r['frames_per_second']:>10.0f}{r['rtfx']:>8.0f}"
            f"{r['ratio_vs_kaldi_1core']:>10.2f}"
            f"{str(r['same_1best_as_kaldi']) + '/' + str(c['utterances']):>13}"
            + (f"{r.get('wer', float('nan')):>7.3f}" if has_wer else "")
            + f"{r['peak_mib']:>10.1f}{arcs}{syncs}"
        )
    for s in c["beam_sweep"]:
        print(
            f"  beam {s['beam']:>5}: kaldi {s['kaldi_frames_per_second']:>8.0f} frames/s, compiled 1 thread "
            f"{s['compiled_frames_per_second']:>8.0f} frames/s (x{s['ratio']:.2f}), "
            f"{s['compiled_arcs_per_frame']:.0f} arcs/frame, same 1-best {s['same_1best']}/{c['utterances']}"
            + (
                f", WER kaldi {s['wer_kaldi']:.3f} compiled {s['wer_compiled']:.3f}"
                if "wer_kaldi" in s
                else ""
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cases",
        nargs="*",
        default=["demo", "20k", "sphinx"],
        help="demo, 20k, sphinx (ignored with --graph)",
    )
    ap.add_argument(
        "--sphinx-batch", type=int, nargs="*", default=[16], help="torch batch sizes, sphinx case"
    )
    ap.add_argument("--graph", help="your own graph folder (graph.pt, *.fst, words.txt)")
    ap.add_argument("--logprobs", help="npz with log_probs [B,T,V] and encoder_len/lengths (with --graph)")
    ap.add_argument("--frame-shift", type=float, default=0.08, help="seconds per frame (with --graph)")
    ap.add_argument("--utterances", type=int, default=32, help="utterances per case")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8, 32, 128], help="torch backend batch sizes")
    ap.add_argument(
        "--compiled-threads", type=int, nargs="*", default=[1, 2], help="compiled backend threads"
    )
    ap.add_argument("--compiled-batch", type=int, default=32, help="utterances per decode() call (compiled)")
    ap.add_argument("--kaldi-processes", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--beam", type=float, default=10.0)
    ap.add_argument("--beams", type=float, nargs="*", default=[], help="beam sweep (kaldi vs compiled)")
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--min-active", type=int, default=200)
    ap.add_argument("--flashlight-beam-size", type=int, default=500)
    ap.add_argument("--no-flashlight", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is best on CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="out/bench/wfst_decode.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cases = []
    if args.graph:
        graph_dir = Path(args.graph)
        lp, lengths = load_npz(Path(args.logprobs), args.utterances) if args.logprobs else (None, None)
        if lp is None:
            raise SystemExit("--graph needs --logprobs")
        cases.append(run_case(graph_dir.name, graph_dir, lp, lengths, args.frame_shift, args))
        print_case(cases[-1])
    if not args.graph and "demo" in args.cases:
        graph_dir = demo_graph(ROOT / "out" / "bench" / "wfst-graph")
        lp, lengths = load_npz(FIXTURE / "reference" / "ctc_bpe.npz", args.utterances)
        cases.append(run_case("demo TLG (BPE, bigram)", graph_dir, lp, lengths, 0.08, args))
        print_case(cases[-1])
    if not args.graph and "20k" in args.cases:
        graph_dir, arpa, corpus = graph_20k(ROOT / "out" / "bench" / "wfst-graph-20k")
        lines = [ln.split() for ln in corpus.read_text().splitlines() if len(ln.split()) >= 5]
        rng = np.random.default_rng(1)
        sents = [lines[i] for i in rng.choice(len(lines), size=args.utterances, replace=False)]
        lp, lengths = spelled_logprobs(sents)
        cases.append(
            run_case("20k-word TLG (chars, trigram)", graph_dir, lp, lengths, 0.04, args, sents, arpa)
        )
        print_case(cases[-1])

    sphinx_dir = ROOT / "out" / "graphs" / "sphinx-en-us"
    if not args.graph and "sphinx" in args.cases and (sphinx_dir / "HCLG.fst").is_file():
        # pocketsphinx's weights as configs/sphinx-en-us.yaml: acoustic scale 1/6.5 applied to the
        # log-likelihoods for every decoder (no word insertion penalty: Kaldi's graph has none)
        lp, lengths, refs = sphinx_loglikes(ROOT / "out" / "bench" / "sphinx-loglikes.npz")
        lp = lp * np.float32(1 / 6.5)
        sub = argparse.Namespace(**{**vars(args), "batch": args.sphinx_batch})
        sub.beam, sub.max_active, sub.min_active = 14.0, 5000, 200
        cases.append(run_case("sphinx en-us HCLG (real speech)", sphinx_dir, lp, lengths, 0.01, sub, refs))
        print_case(cases[-1])
    elif not args.graph and "sphinx" in args.cases:
        print(f"no {sphinx_dir}/HCLG.fst (asrdecode build-graph --config configs/graph/sphinx-en-us.yaml)")

    report = {
        "machine": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cores": len(os.sched_getaffinity(0)),
            "load_average_at_start": os.getloadavg(),
        },
        "torch_threads": args.threads,
        "cases": cases,
        "summary": {
            c["case"]: {r["decoder"]: round(r["ratio_vs_kaldi_1core"], 3) for r in c["rows"]} for c in cases
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out} (load average at start {report['machine']['load_average_at_start']})")


if __name__ == "__main__":
    main()
