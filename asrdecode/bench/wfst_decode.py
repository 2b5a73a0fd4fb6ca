"""Benchmark the `wfst` decoder against kaldi-decoder's FasterDecoder and flashlight-text's
LexiconDecoder on the same graphs and log-probs.

    .venv/bin/asrdecode bench wfst                      # all cases, beam sweep on demo
    .venv/bin/asrdecode bench wfst --cases demo --batch 1 32 --beams
    .venv/bin/asrdecode bench wfst --graph out/graphs/my-tlg --logprobs lp.npz

Cases (one graph + one set of log-probs each; every decoder of a case gets the same inputs):

* ``demo``: a compact TLG for the NeMo fixture model (BPE units) from the demo LM
  (data/demo/graph/lm.arpa; built into out/bench/wfst-graph), and real log-probs (`DEMO_LOGPROBS`)
  repeated to ``--utterances`` utterances (frame shift 0.08 s). The fixture model is random, so
  there is no meaningful WER: agreement with Kaldi's 1-best is reported.
* ``20k``: a 20k-word synthetic trigram LM (asrdecode bench graph-build's Zipf corpus) with a
  character lexicon, compact TLG (~1.3M states; built once into out/bench/wfst-graph-20k-sep,
  ~90 s), and peaky log-probs over 26 letters + a word-boundary unit ``|`` + blank that spell
  corpus sentences (10% of the letters confused, ``|`` after every word, as a wav2letter /
  wav2vec2 character model emits); WER against those sentences. The TLG reads ``|`` as an
  optional unit between words (build-graph ``word_separator``).
* ``sphinx``: the pocketsphinx en-us HCLG (`harness.sphinx_static_graph`; runs whenever that graph
  exists) with real senone log-likelihoods of data/demo/real (cached in out/bench), scaled by
  1/6.5 as configs/sphinx-en-us.yaml; beam 14, max_active 5000; WER against the transcripts.
* ``--graph/--logprobs``: your own graph folder and npz (log_probs [B,T,V], lengths).

Rows: kaldi-decoder FasterDecoder on one core and on all cores (one process per core,
utterances dealt round robin by length); asrdecode `wfst` with the compiled backend (numba,
``--compiled-threads``) and the torch backend (``--batch`` sizes; every batch size decodes at
least that many utterances); flashlight-text LexiconDecoder + KenLM (20k case).
Beam sweep (``--beams``, default 8 10 12 14 on the demo case): Kaldi one core, compiled one
thread and torch batch ``--sweep-batch`` at each beam.

Every row runs in its own freshly spawned process(es), set up (graph, inputs, numba cache or
KenLM load, one warm-up utterance) before the clock starts; all workers of a row start together.
Memory is measured the same way for every row, in every process of the row:
* ``state MiB``: growth of the resident set over the timed part (VmHWM after minus VmRSS before,
  the peak reset with /proc/self/clear_refs): search state and per-batch buffers;
* ``proc MiB``: the whole process's peak resident set (libraries, graph, inputs, search);
  for multi-process rows the largest worker's.
Columns: frames/s, RTFx at the model frame rate, ratio to Kaldi's one-core throughput, 1-best
identical to Kaldi's (word sequences), WER, the two memory columns, arcs expanded per second and
host syncs per frame (torch). Timings are wall clock: on a shared machine compare the ratios of
one run, not absolute numbers.

flashlight-text's setup (paper 001's CPU baseline), made comparable to the TLG search:
* word boundary: its LexiconDecoder ends a word on the silence token spelled after the word
  (wav2letter lexicons: ``w o r d |``) and, at the lexicon root, lets only the silence token
  repeat. With blank as "silence" and no boundary unit (the previous setup), every extra frame
  of a word's last letter had to be read as blank (~5 nats each here), which cost it most of its
  accuracy (9/32 1-bests as Kaldi, WER 0.24 vs 0.096). Now the inputs have a ``|`` unit, the
  lexicon spells ``word |`` and ``|`` is flashlight's silence token;
* same objective: lm_weight = ln 10 (KenLM scores are log10, graph costs natural log), word
  score 0, silence score 0, no unknown words (unk_score -inf), Viterbi (log_add false), all
  tokens considered per frame (beam_size_token = units);
* pruning: ``--flashlight BEAM_SIZE:THRESHOLD`` settings; ``beam`` = the case's beam. Default
  ``2500:beam`` is paper 001's pairing (same beam; beam_size = max_active / 4) and ``2500:20`` a
  wider threshold: flashlight prunes on scores whose LM look-ahead is smeared from <s>-context
  unigram scores, not pushed in context as in the TLG, so the same threshold prunes harder.
  Its 1-best still differs from Kaldi's where the objectives differ: KenLM scores the exact
  backoff n-gram, the TLG's G lets the search take a backoff epsilon arc even where the n-gram
  exists (cheaper for some singletons), so the TLG path can cost less than KenLM's score of it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, machine_info, parse, sphinx_static_graph, write_report

# torch and asrdecode are imported where needed: every row runs in a spawned child process that
# re-imports this module, and a kaldi-decoder worker should not carry torch's memory.

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "nemo"
# the demo case's log-probs: NeMo's of the earlier, 128-wide ctc_bpe fixture (the figures in docs/ were
# measured on them; the fixture's BPE units are unchanged)
DEMO_LOGPROBS = FIXTURE / "reference" / "ctc_bpe_128.npz"
BENCH = ROOT / "out" / "bench"
LETTERS = list("abcdefghijklmnopqrstuvwxyz")
SEPARATOR = "|"


# ------------------------------------------------------------------ memory
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class ProcessMemory:
    """Memory of this process over a block: `growth_mib` (peak RSS in the block minus RSS before
    it; the peak is reset with /proc/self/clear_refs) and `process_peak_mib` (the process's
    whole peak, including everything loaded before the block)."""

    def __enter__(self) -> ProcessMemory:
        self.setup_peak_kib = _status_kib("VmHWM")
        self.reset = True
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            self.reset = False  # growth then includes the setup peak: an upper bound
        self.before_kib = _status_kib("VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        peak = _status_kib("VmHWM")
        self.growth_mib = max(peak - self.before_kib, 0) / 1024
        self.process_peak_mib = max(peak, self.setup_peak_kib) / 1024


# ------------------------------------------------------------------ inputs
def demo_graph(out: Path, arpa: Path = ROOT / "data" / "demo" / "graph" / "lm.arpa") -> Path:
    """The compact TLG of `arpa`'s bigrams over the NeMo fixture's BPE units, built once into `out`."""
    from asrdecode.graph import GraphBuildConfig, build_graph

    if not (out / "TLG.fst").is_file():
        cfg = GraphBuildConfig(
            arpa=str(arpa),
            model=str(FIXTURE / "ctc_bpe.nemo"),
            lexicon_type="bpe",
            topology="compact",
            max_order=2,
        )
        build_graph(cfg, out)
    return out


def spelled_graph(out: Path, vocab: int = 20000) -> tuple[Path, Path, Path]:
    """(graph folder, ARPA, corpus) of the `vocab`-word synthetic LM (the 20k case's: 20000),
    letters + `|`; built once (the LM beside `out`)."""
    from asrdecode.bench.build_graph import synthetic_lm
    from asrdecode.graph import GraphBuildConfig, build_graph

    lm_dir = out.parent / ("wfst-graph-20k-lm" if vocab == 20000 else f"{out.name}-lm")
    arpa, corpus = lm_dir / f"lm_{vocab}.arpa", lm_dir / f"corpus_{vocab}.txt"
    if not arpa.is_file():
        lm_dir.mkdir(parents=True, exist_ok=True)
        print(f"building the {vocab}-word LM (once) ...", flush=True)
        synthetic_lm(vocab, lm_dir, vocab)
    if not (out / "TLG.fst").is_file():
        print(f"building the {vocab}-word TLG (once) ...", flush=True)
        cfg = GraphBuildConfig(
            arpa=str(arpa),
            unit_list=[*LETTERS, SEPARATOR],
            blank="last",
            lexicon_type="chars",
            word_separator=SEPARATOR,
            topology="compact",
        )
        build_graph(cfg, out, force=True)
    return out, arpa, corpus


def spelled_sentences(corpus: Path, utterances: int) -> list[list[str]]:
    """The 20k case's utterances: `utterances` corpus sentences of 5+ words (seed 1)."""
    lines = [ln.split() for ln in corpus.read_text().splitlines() if len(ln.split()) >= 5]
    rng = np.random.default_rng(1)
    return [lines[i] for i in rng.choice(len(lines), size=utterances, replace=False)]


def spelled_logprobs(
    sentences: list[list[str]], seed: int = 0, confuse: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Peaky CTC log-probs over 26 letters, `|` (column 26) and blank (last) that spell each
    sentence: 1-2 frames per letter, 0-2 blanks between letters (at least one between equal
    letters), a letter confused with a random one with probability `confuse`, 1-2 frames of `|`
    after every word, peak probability 0.5-0.95, noisy rest."""
    rng = np.random.default_rng(seed)
    sep, blank = len(LETTERS), len(LETTERS) + 1
    V = blank + 1
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
            cols += [blank] * int(rng.integers(0, 2)) + [sep] * int(rng.integers(1, 3))
            prev = sep
        cols += [blank] * 2
        seqs.append(cols)
    T = max(len(s) for s in seqs)
    x = np.full((len(seqs), T, V), -30.0, dtype=np.float32)
    for b, cols in enumerate(seqs):
        n = len(cols)
        rest = np.exp(rng.normal(size=(n, V)).astype(np.float32))
        peak = rng.uniform(0.5, 0.95, size=n).astype(np.float32)
        rest[np.arange(n), cols] = 0.0
        rest *= ((1 - peak) / rest.sum(1))[:, None]
        rest[np.arange(n), cols] = peak
        x[b, :n] = np.log(rest)
    return x, np.array([len(s) for s in seqs])


def load_npz(path: Path, utterances: int) -> tuple[np.ndarray, np.ndarray]:
    """log_probs and lengths of an npz, repeated to `utterances` utterances."""
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
        import torch

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


# ------------------------------------------------------------------ workers (child processes)
def _inputs(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    d = np.load(spec["inputs"])
    return d["log_probs"], d["lengths"]


def _setup_kaldi(spec: dict):
    """FasterDecoder over spec["items"] (one utterance at a time, as Kaldi's binaries)."""
    import kaldi_decoder
    import kaldifst

    fst = kaldifst.StdConstFst.read(spec["fst"])
    opts = kaldi_decoder.FasterDecoderOptions(
        beam=spec["beam"], max_active=spec["max_active"], min_active=spec["min_active"]
    )
    lp, lengths = _inputs(spec)
    items = [(i, np.ascontiguousarray(lp[i, : lengths[i]])) for i in spec["items"]]

    def decode_one(x: np.ndarray) -> list[int]:
        dec = kaldi_decoder.FasterDecoder(fst, opts)
        dec.decode(kaldi_decoder.DecodableCtc(x))
        ok, lat = dec.get_best_path()
        return list(kaldifst.get_linear_symbol_sequence(lat)[2]) if ok else []

    decode_one(items[0][1])  # warm-up

    def run() -> dict:
        return {"olabels": {i: decode_one(x) for i, x in items}}

    return run


def _setup_wfst(spec: dict):
    """asrdecode `wfst` (spec backend/threads/batch) over all utterances, batches by length."""
    import torch

    torch.set_num_threads(spec["torch_threads"])
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.models.base import ModelOutput

    cfg = WfstConfig(
        graph=spec["graph"],
        beam=spec["beam"],
        max_active=spec["max_active"],
        min_active=spec["min_active"],
        backend=spec["backend"],
        threads=spec["threads"],
    )
    dec = WfstDecoder(cfg)
    lp, lengths = _inputs(spec)
    shift, blank = spec["shift"], lp.shape[2] - 1

    def output(idx: np.ndarray):
        T = int(lengths[idx].max())
        x = torch.from_numpy(np.ascontiguousarray(lp[idx, :T])).to(spec["device"])
        return ModelOutput(x, torch.from_numpy(lengths[idx]), shift, blank, [])

    dec.decode(output(np.arange(min(2, len(lp)))))  # numba cache / compile, threads, graph on device
    order = np.argsort(-lengths, kind="stable")  # batches of similar length, as the pipeline does
    batches = [
        (idx, output(idx)) for idx in (order[i : i + spec["batch"]] for i in range(0, len(lp), spec["batch"]))
    ]

    def run() -> dict:
        olabels: dict[int, list[int]] = {}
        syncs = frames = arcs = 0
        for idx, out in batches:
            for j, res in zip(idx, dec.decode(out), strict=True):
                olabels[int(j)] = [dec.word_ids.get(w.word, -1) for w in res.words]
            st = dec.last_info["stats"]
            syncs, frames, arcs = syncs + st["syncs"], frames + st["frames"], arcs + st["arcs"]
        return {"olabels": olabels, "syncs": syncs, "frames_stepped": frames, "arcs": arcs}

    return run


def _setup_flashlight(spec: dict):
    """flashlight-text LexiconDecoder + KenLM; the setup of the module docstring."""
    from asrdecode.bench.peers import FlashlightLexiconDecoder

    table = [ln.split() for ln in Path(spec["words"]).read_text().splitlines() if ln.split()]
    wid = {w: int(i) for w, i in table}
    lexicon = {w: [[*w, SEPARATOR]] for w in wid if w.isalpha() and w.islower()}
    dec = FlashlightLexiconDecoder(
        [*LETTERS, SEPARATOR, "<blank>"], "<blank>", SEPARATOR, lexicon, spec["arpa"],
        spec["beam_size"], spec["beam_threshold"],
    )  # fmt: skip
    lp, lengths = _inputs(spec)
    items = [(i, np.ascontiguousarray(lp[i, : lengths[i]])) for i in range(len(lp))]

    def decode_one(x: np.ndarray) -> list[int]:
        return [wid.get(w, -1) for w in dec.words(x)]

    decode_one(items[0][1])

    def run() -> dict:
        return {"olabels": {i: decode_one(x) for i, x in items}}

    return run


JOBS = {"kaldi": _setup_kaldi, "wfst": _setup_wfst, "flashlight": _setup_flashlight}


def _worker(job: str, spec: dict, index: int, messages, go) -> None:
    try:
        run = JOBS[job](spec)
        with ProcessMemory() as mem:
            messages.put(("ready", index, None))
            go.wait()
            result = run()
            end = time.perf_counter()
        result.update(end=end, growth_mib=mem.growth_mib, process_mib=mem.process_peak_mib, reset=mem.reset)
        messages.put(("done", index, result))
    except BaseException:  # noqa: BLE001  (reported to the parent)
        messages.put(("error", index, traceback.format_exc()))


def run_row(job: str, specs: list[dict]) -> dict:
    """One row: a spawned process per spec, set up in parallel, then started together; the row's
    time runs from the start signal to the last worker's end (one monotonic clock)."""
    ctx = mp.get_context("spawn")
    messages, go = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_worker, args=(job, s, i, messages, go), daemon=True) for i, s in enumerate(specs)
    ]
    for p in procs:
        p.start()

    def collect(kind: str) -> list:
        got = []
        while len(got) < len(specs):
            what, index, payload = messages.get()
            if what == "error":
                for p in procs:
                    p.kill()
                raise RuntimeError(f"{job} worker {index} failed:\n{payload}")
            assert what == kind
            got.append(payload)
        return got

    collect("ready")
    start = time.perf_counter()
    go.set()
    done = collect("done")
    for p in procs:
        p.join()
    olabels: dict[int, list[int]] = {}
    for d in done:
        olabels.update(d["olabels"])
    row = {
        "seconds": max(d["end"] for d in done) - start,
        "state_growth_mib": max(d["growth_mib"] for d in done),
        "process_peak_mib": max(d["process_mib"] for d in done),
        "peak_reset": all(d["reset"] for d in done),
        "processes": len(specs),
        "olabels": [olabels[i] for i in sorted(olabels)],
    }
    if "arcs" in done[0]:
        row["arcs"] = sum(d["arcs"] for d in done)
        row["syncs_per_frame_step"] = sum(d["syncs"] for d in done) / max(
            sum(d["frames_stepped"] for d in done), 1
        )
    return row


# ------------------------------------------------------------------ one case
def wer(refs: list[list[str]], hyps: list[list[str]]) -> float:
    import jiwer

    return float(jiwer.wer([" ".join(r) for r in refs], [" ".join(h) or "<none>" for h in hyps]))


def kaldi_row(base: dict, lengths: np.ndarray, beam: float, processes: int) -> dict:
    processes = max(1, min(processes, len(lengths)))  # no process without an utterance
    order = np.argsort(-lengths, kind="stable")
    parts = [sorted(int(i) for i in order[p::processes]) for p in range(processes)]
    row = run_row("kaldi", [{**base, "beam": beam, "items": part} for part in parts])
    return {"decoder": f"kaldi FasterDecoder ({processes} process{'es' if processes > 1 else ''})", **row}


def wfst_row(base: dict, beam: float, backend: str, batch: int, threads: int, args) -> dict:
    spec = {**base, "beam": beam, "backend": backend, "batch": batch, "threads": threads}
    row = run_row("wfst", [{**spec, "torch_threads": args.threads, "device": args.device}])
    name = (
        f"compiled {threads} thread{'s' if threads > 1 else ''}"
        if backend == "compiled"
        else f"torch batch {batch}"
    )
    return {"decoder": name, "backend": backend, "batch": batch, **row}


def finish_rows(rows: list[dict], kaldi: dict, frames: float, shift: float, refs, names) -> None:
    base_fps = frames / kaldi["seconds"]
    for r in rows:
        r["frames_per_second"] = frames / r["seconds"]
        r["rtfx"] = frames * shift / r["seconds"]
        r["ratio_vs_kaldi_1core"] = r["frames_per_second"] / base_fps
        r["same_1best_as_kaldi"] = sum(a == b for a, b in zip(r["olabels"], kaldi["olabels"], strict=True))
        if "arcs" in r:
            r["arcs_per_second"] = r["arcs"] / r["seconds"]
        if refs is not None:
            r["wer"] = wer(refs, [[names.get(w, "?") for w in o] for o in r["olabels"]])


def run_case(
    name: str, key: str, graph_dir: Path, lp, lengths, shift: float, args, refs=None, arpa=None
) -> dict:
    fst_path = next(p for p in (graph_dir / "TLG.fst", graph_dir / "HCLG.fst") if p.is_file())
    inputs = BENCH / "inputs" / f"{key}.npz"
    inputs.parent.mkdir(parents=True, exist_ok=True)
    np.savez(inputs, log_probs=lp, lengths=lengths)
    frames = float(lengths.sum())
    names = {int(i): w for w, i in (ln.split() for ln in (graph_dir / "words.txt").read_text().splitlines())}
    base = {
        "inputs": str(inputs),
        "fst": str(fst_path),
        "graph": str(graph_dir),
        "shift": shift,
        "max_active": args.max_active,
        "min_active": args.min_active,
    }
    beam = args.beam
    print(f"\n{name}: {len(lp)} utterances, {int(frames)} frames", flush=True)
    rows = [kaldi_row(base, lengths, beam, 1)]
    if min(args.kaldi_processes, len(lengths)) > 1:
        rows.append(kaldi_row(base, lengths, beam, args.kaldi_processes))
    for n in args.compiled_threads:
        rows.append(wfst_row(base, beam, "compiled", args.compiled_batch, n, args))
    for b in args.batch:
        rows.append(wfst_row(base, beam, "torch", b, 0, args))
    if arpa is not None and not args.no_flashlight:
        for setting in args.flashlight:
            size, threshold = setting.split(":")
            th = beam if threshold == "beam" else float(threshold)
            spec = {**base, "arpa": str(arpa), "words": str(graph_dir / "words.txt")}
            spec.update(beam_size=int(size), beam_threshold=th)
            try:
                row = run_row("flashlight", [spec])
            except RuntimeError as e:
                print(f"flashlight-text row failed: {str(e).splitlines()[-1]}")
                continue
            rows.append({"decoder": f"flashlight Lexicon+KenLM {size}/{th:g}", **row})
    finish_rows(rows, rows[0], frames, shift, refs, names)
    sweep = []
    if key in args.sweep_cases:
        for b in args.beams:
            k = kaldi_row(base, lengths, b, 1)
            c = wfst_row(base, b, "compiled", args.compiled_batch, 1, args)
            t = wfst_row(base, b, "torch", args.sweep_batch, 0, args)
            finish_rows([k, c, t], k, frames, shift, refs, names)
            sweep.append(
                {
                    "beam": b,
                    "rows": [{k2: v for k2, v in r.items() if k2 != "olabels"} for r in (k, c, t)],
                    "compiled_arcs_per_frame": c["arcs"] / frames,
                }
            )
            print(f"  beam {b}: done", flush=True)
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


def print_case(c: dict) -> None:
    print(
        f"\n== {c['case']}: {c['graph']} ({c['graph_states']} states, {c['graph_arcs']} arcs), "
        f"{c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}, "
        f"max_active {c['options']['max_active']}"
    )
    has_wer = any("wer" in r for r in c["rows"])
    head = f"{'decoder':<38}{'frames/s':>10}{'RTFx':>8}{'vs kaldi':>10}{'same 1-best':>13}"
    print(
        head
        + (f"{'WER':>7}" if has_wer else "")
        + f"{'state MiB':>10}{'proc MiB':>10}{'Marcs/s':>9}{'syncs/fr':>9}"
    )
    for r in c["rows"]:
        arcs = f"{r['arcs_per_second'] / 1e6:>9.2f}" if "arcs_per_second" in r else f"{'-':>9}"
        syncs = f"{r['syncs_per_frame_step']:>9.1f}" if "syncs_per_frame_step" in r else f"{'-':>9}"
        print(
            f"{r['decoder']:<38}{r['frames_per_second']:>10.0f}{r['rtfx']:>8.0f}"
            f"{r['ratio_vs_kaldi_1core']:>10.2f}"
            f"{str(r['same_1best_as_kaldi']) + '/' + str(c['utterances']):>13}"
            + (f"{r.get('wer', float('nan')):>7.3f}" if has_wer else "")
            + f"{r['state_growth_mib']:>10.1f}{r['process_peak_mib']:>10.0f}{arcs}{syncs}"
        )
    if c["beam_sweep"]:
        names = [r["decoder"] for r in c["beam_sweep"][0]["rows"]]
        print(f"  beam sweep (frames/s, ratio to kaldi, same 1-best as kaldi): {', '.join(names)}")
        for s in c["beam_sweep"]:
            parts = [
                f"{r['frames_per_second']:>8.0f} x{r['ratio_vs_kaldi_1core']:<5.2f}"
                + f" {r['same_1best_as_kaldi']:>3}"
                + (f" WER {r['wer']:.3f}" if "wer" in r else "")
                for r in s["rows"]
            ]
            print(
                f"  beam {s['beam']:>5g}: "
                + " | ".join(parts)
                + f" | {s['compiled_arcs_per_frame']:.0f} arcs/frame"
            )


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/wfst_decode.json", threads=1, aliases=("--out",))
    ap.add_argument("--cases", nargs="*", default=["demo", "20k", "sphinx"], help="demo, 20k, sphinx")
    ap.add_argument("--graph", help="your own graph folder (TLG.fst or HCLG.fst, graph.pt, words.txt)")
    ap.add_argument("--logprobs", help="npz with log_probs [B,T,V] and encoder_len/lengths (with --graph)")
    ap.add_argument("--frame-shift", type=float, default=0.08, help="seconds per frame (with --graph)")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8, 32, 128], help="torch backend batch sizes")
    ap.add_argument(
        "--utterances",
        type=int,
        default=0,
        help="utterances per case (default and minimum: the largest --batch)",
    )
    ap.add_argument(
        "--sphinx-batch", type=int, nargs="*", default=[14], help="torch batch sizes, sphinx case"
    )
    ap.add_argument(
        "--compiled-threads", type=int, nargs="*", default=[1, 2], help="compiled backend threads"
    )
    ap.add_argument("--compiled-batch", type=int, default=32, help="utterances per decode() call (compiled)")
    ap.add_argument("--kaldi-processes", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--beam", type=float, default=10.0)
    ap.add_argument("--beams", type=float, nargs="*", default=[8.0, 10.0, 12.0, 14.0], help="beam sweep")
    ap.add_argument("--sweep-cases", nargs="*", default=["demo"], help="cases that get the beam sweep")
    ap.add_argument("--sweep-batch", type=int, default=32, help="torch batch size in the beam sweep")
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--min-active", type=int, default=200)
    ap.add_argument(
        "--flashlight",
        nargs="*",
        default=["2500:beam", "2500:20"],
        help="BEAM_SIZE:THRESHOLD (beam = case beam)",
    )
    ap.add_argument("--no-flashlight", action="store_true")
    ap.add_argument("--device", default="cpu")
    args = parse(ap, argv)
    largest = max(args.batch, default=1)
    if args.utterances and args.utterances < largest:
        print(f"--utterances {args.utterances} < largest batch {largest}: using {largest}")
    args.utterances = max(args.utterances, largest)
    load_start = os.getloadavg()

    cases = []
    if args.graph:
        if not args.logprobs:
            raise SystemExit("--graph needs --logprobs")
        graph_dir = Path(args.graph)
        lp, lengths = load_npz(Path(args.logprobs), args.utterances)
        cases.append(run_case(graph_dir.name, "custom", graph_dir, lp, lengths, args.frame_shift, args))
        print_case(cases[-1])
    if not args.graph and "demo" in args.cases:
        graph_dir = demo_graph(BENCH / "wfst-graph")
        lp, lengths = load_npz(DEMO_LOGPROBS, args.utterances)
        cases.append(run_case("demo TLG (BPE, bigram)", "demo", graph_dir, lp, lengths, 0.08, args))
        print_case(cases[-1])
    if not args.graph and "20k" in args.cases:
        graph_dir, arpa, corpus = spelled_graph(BENCH / "wfst-graph-20k-sep")
        sents = spelled_sentences(corpus, args.utterances)
        lp, lengths = spelled_logprobs(sents)
        name = "20k-word TLG (chars + |, trigram)"
        cases.append(run_case(name, "20k", graph_dir, lp, lengths, 0.04, args, sents, arpa))
        print_case(cases[-1])
    sphinx_dir = sphinx_static_graph()
    if not args.graph and "sphinx" in args.cases and (sphinx_dir / "HCLG.fst").is_file():
        # pocketsphinx's weights as configs/sphinx-en-us.yaml: acoustic scale 1/6.5 applied to the
        # log-likelihoods for every decoder (no word insertion penalty: Kaldi's graph has none)
        lp, lengths, refs = sphinx_loglikes(BENCH / "sphinx-loglikes.npz")
        lp = lp * np.float32(1 / 6.5)
        sub = argparse.Namespace(**{**vars(args), "batch": args.sphinx_batch})
        sub.beam, sub.max_active, sub.min_active = 14.0, 5000, 200
        name = "sphinx en-us HCLG (real speech)"
        cases.append(run_case(name, "sphinx", sphinx_dir, lp, lengths, 0.01, sub, refs))
        print_case(cases[-1])
    elif not args.graph and "sphinx" in args.cases:
        print(f"no {sphinx_dir}/HCLG.fst (a first run of configs/sphinx-en-us.yaml builds it); skipped")

    report = {
        "machine": machine_info(load_start),
        "torch_threads": args.threads,
        "cases": cases,
        "summary": {
            c["case"]: {r["decoder"]: round(r["ratio_vs_kaldi_1core"], 3) for r in c["rows"]} for c in cases
        },
    }
    write_report(args.json, report)


if __name__ == "__main__":
    with contextlib.suppress(RuntimeError):
        mp.set_start_method("spawn")
    main()
