"""WER against speed for every decoder of a setup and its peer, one point per beam: the trade-off
curves of paper 001 (fig. 4-5) and paper 000 (fig. 3), as JSON, a markdown table and a plot.

A setup names a test set, the asrdecode systems to run (a config plus the key swept) and the peer.
Every point transcribes the whole set through the normal pipeline (`pipeline.Transcriber`, model
loaded before the clock starts). Its RTFx is the report's: audio seconds over the wall time of
reading, features, acoustic model and search. The pocketsphinx peer is timed the same way, over
its front end, scoring and search per utterance (`start_utt` .. `end_utt`). WER is pooled over the
set; per-utterance hypotheses are kept in the JSON for `asrdecode score`. Nothing is tuned here:
the settings are fixed before the sweep, and the set says whether it was used for tuning anywhere.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.bench.harness import cpu_model
from asrdecode.bench.plots import plot_sweep
from asrdecode.errors import ConfigError


@dataclass
class System:
    """One line of the plot: asrdecode (a run `config` file, if any, plus `overrides`) or a peer
    (with its `options`), at each value of `key`."""

    name: str
    key: str
    values: list
    overrides: list[str] = field(default_factory=list)
    peer: str | None = None  # pocketsphinx | kaldi | flashlight | nemo: the peer's decoder
    config: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # kaldi: graph; flashlight: arpa; nemo: strategy


@dataclass
class Setup:
    name: str
    manifest: str
    note: str  # which set, and whether it was used for tuning anywhere
    systems: list[System]


REAL = Setup(
    name="real",
    manifest="data/real/test/manifest.jsonl",
    note="data/real/test: 17 recordings, held out (never used for tuning)",
    systems=[
        System("asrdecode wfst-otf (default)", "decoder.beam", [9.0, 11.0, 13.0, 15.0]),
        System("asrdecode let", "decoder.beam", [9.0, 11.0, 13.0, 15.0], ["decoder.type=let"]),
        System(
            "asrdecode wfst (small graph only)",
            "decoder.beam",
            [9.0, 11.0, 13.0, 15.0],
            ["decoder.type=wfst"],
        ),
        # pocketsphinx's -beam (and -pbeam); -wbeam follows at the same ratio as its defaults (1e-48, 7e-29)
        System(
            "pocketsphinx 5.1.1 (its en-us.lm.bin)",
            "beam",
            [1e-20, 1e-30, 1e-40, 1e-48, 1e-60],
            peer="pocketsphinx",
        ),
    ],
)

DEMO_TLG = "cache:configs/graph/demo-ctc-bpe-tlg.yaml"
DEMO = Setup(
    name="demo",
    manifest="data/demo/synthetic/manifest.jsonl",
    note="data/demo/synthetic: 30 synthetic sentences held out from the demo models' training",
    systems=[
        System(
            "ctc-greedy",
            "decoder.blank_penalty",
            [0.0],
            ["model.path=embedded:demo_ctc_bpe", "decoder.type=ctc-greedy"],
        ),
        *(
            System(
                f"wfst {backend} (demo TLG)",
                "decoder.beam",
                [8.0, 12.0, 16.0],
                [f"decoder.graph={DEMO_TLG}", f"decoder.backend={backend}"],
                config="configs/wfst.yaml",
            )
            for backend in ("compiled", "torch")
        ),
        System(
            "transducer-greedy",
            "decoder.max_symbols",
            [10],
            ["model.path=embedded:demo_rnnt_bpe", "decoder.type=transducer-greedy"],
        ),
        System("transducer-beam", "decoder.beam_size", [2, 4, 8], config="configs/transducer-beam.yaml"),
        # kaldi-decoder's FasterDecoder on the same TLG and the same log-probs (max_active 10000, min 200)
        System(
            "kaldi-decoder FasterDecoder (demo TLG)",
            "beam",
            [8.0, 12.0, 16.0],
            peer="kaldi",
            options={"graph": DEMO_TLG},
        ),
        # flashlight-text's LexiconDecoder + KenLM on the demo LM (the LM the demo TLG is built from)
        System(
            "flashlight-text LexiconDecoder (demo LM)",
            "beam_size",
            [16, 64, 256],
            peer="flashlight",
            options={"arpa": "data/demo/graph/lm.arpa"},
        ),
        # NeMo's own transcribe() with the demo RNN-T, run by --nemo-python (skipped without it)
        *(
            System(
                f"NeMo {strategy} (demo RNN-T)", param, values, peer="nemo", options={"strategy": strategy}
            )
            for strategy, param, values in (
                ("greedy_batch", "max_symbols", [10]),
                ("malsd_batch", "beam_size", [2, 4, 8]),
            )
        ),
    ],
)

SETUPS = {s.name: s for s in (REAL, DEMO)}
# pocketsphinx's default -wbeam 7e-29 is its default -beam 1e-48 to this power; swept beams keep it
WBEAM_EXPONENT = math.log(7e-29) / math.log(1e-48)


@dataclass
class Point:
    system: str
    setting: str
    wer: float
    rtfx: float
    audio_seconds: float
    seconds: float
    hyps: dict[str, str]


def scored_point(
    system: System, setting: str, refs: dict[str, str], hyps: dict[str, str], audio: float, seconds: float
) -> Point:
    """A peer's point: WER of `hyps` over the utterances with a reference, RTFx = audio / seconds."""
    from asrdecode.scoring import score

    wer = score(refs, {k: v for k, v in hyps.items() if k in refs}).wer
    return Point(system.name, setting, wer, audio / seconds, audio, seconds, hyps)


def read_set(manifest: Path) -> tuple[list, dict[str, str]]:
    from asrdecode.io.manifests import read_inputs

    utts = read_inputs(manifest).utterances
    return utts, {u.utt_id: u.text for u in utts if u.text is not None}


def run_asrdecode(system: System, value, manifest: Path, out: Path) -> Point:
    from asrdecode.config import build_config, setup_of
    from asrdecode.pipeline import Transcriber

    items = [*system.overrides, f"{system.key}={value}"]
    config = system.config
    cfg = build_config(config, items, setup=setup_of(config, items, manifest))
    report = Transcriber(cfg, manifest, out, overwrite=True).run()
    hyps = {
        r["utt_id"]: r["pred_text"]
        for r in map(json.loads, (out / "transcripts.jsonl").read_text().splitlines())
    }
    if report["wer"] is None:
        raise ConfigError(f"{manifest}: no references to score")
    return Point(system.name, f"{system.key.split('.')[-1]}={value}", report["wer"], report["rtfx"],
                 report["audio_hours_this_run"] * 3600, report["wall_seconds"], hyps)  # fmt: skip


def run_pocketsphinx(system: System, beam: float, manifest: Path) -> Point:
    from asrdecode.bench.peers import Pocketsphinx, pcm16

    utts, refs = read_set(manifest)
    peer = Pocketsphinx(beam=beam, pbeam=beam, wbeam=beam**WBEAM_EXPONENT)
    hyps, seconds, audio = {}, 0.0, 0.0
    for u in utts:
        pcm = pcm16(u.audio_path, u.offset, u.duration)
        words, spent = peer.words(pcm)
        hyps[u.utt_id] = " ".join(words)
        seconds += spent
        audio += len(pcm) / 16000
    return scored_point(system, f"beam={beam:g}", refs, hyps, audio, seconds)


@dataclass
class PeerInput:
    """The demo CTC model's log-probs of a set, written once by an asrdecode run for the peers that
    decode log-probs, with that run's reading + features + model seconds (a peer's RTFx adds
    them to its search seconds, so it covers the same work as an asrdecode point)."""

    utterances: list
    meta: Any
    refs: dict[str, str]
    front_seconds: float
    audio_seconds: float

    @classmethod
    def of(cls, manifest: Path, out: Path) -> PeerInput:
        from asrdecode.bench.harness import model_digest
        from asrdecode.config import build_config
        from asrdecode.io.manifests import read_inputs
        from asrdecode.pipeline import Transcriber

        # keyed by the model file: log-probs of another (an earlier demo model) are never reused
        front = out / "runs" / f"peer-logprobs-{model_digest('embedded:demo_ctc_bpe')}"
        if not (front / "report.json").is_file():
            items = [
                "model.path=embedded:demo_ctc_bpe",
                "decoder.type=ctc-greedy",
                "output.save_logprobs=true",
            ]
            Transcriber(build_config(None, items), manifest, front, overwrite=True).run()
        report = json.loads((front / "report.json").read_text())
        inputs = read_inputs(front / "logprobs")
        refs = {u.utt_id: u.text for u in read_inputs(manifest).utterances if u.text is not None}
        front_seconds = sum(report["stage_seconds"].get(k, 0.0) for k in ("load", "features", "model"))
        return cls(
            inputs.utterances,
            inputs.logprobs_meta,
            refs,
            front_seconds,
            report["audio_hours_this_run"] * 3600,
        )

    def log_probs(self, utt) -> np.ndarray:
        from asrdecode.io.manifests import load_logprobs

        return np.ascontiguousarray(load_logprobs(utt, self.meta))

    def point(self, system: System, setting: str, hyps: dict[str, str], seconds: float) -> Point:
        """A point whose time is the peer's search `seconds` plus the front end's."""
        total = seconds + self.front_seconds
        return scored_point(system, setting, self.refs, hyps, self.audio_seconds, total)


def run_kaldi(system: System, beam: float, manifest: Path, out: Path) -> Point:
    """kaldi-decoder's FasterDecoder (one utterance at a time, as Kaldi's binaries) over the TLG of
    `system` with the demo CTC model's log-probs (`PeerInput`)."""
    import kaldi_decoder
    import kaldifst

    from asrdecode.graph.cache import resolve_graph_spec
    from asrdecode.graph.symbols import read_symbols

    data = PeerInput.of(manifest, out)
    graph = Path(resolve_graph_spec(system.options["graph"]))
    fst = kaldifst.StdConstFst.read(str(graph / "TLG.fst"))
    words = read_symbols(graph / "words.txt")
    options = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=10000, min_active=200)
    hyps, seconds = {}, 0.0
    for u in data.utterances:
        x = data.log_probs(u)
        t0 = time.perf_counter()
        decoder = kaldi_decoder.FasterDecoder(fst, options)
        decoder.decode(kaldi_decoder.DecodableCtc(x))
        ok, best = decoder.get_best_path()
        seconds += time.perf_counter() - t0
        labels = kaldifst.get_linear_symbol_sequence(best)[2] if ok else []
        hyps[u.utt_id] = " ".join(words[o] for o in labels if o)
    return data.point(system, f"beam={beam:g}", hyps, seconds)


def run_flashlight(system: System, beam_size: int, manifest: Path, out: Path) -> Point:
    """flashlight-text's LexiconDecoder (paper 001's CPU baseline) with KenLM on the demo LM and a
    lexicon of the LM's words spelled by the demo model's tokenizer, on the same log-probs as the
    kaldi peer (`PeerInput`): LM weight ln 10 (ARPA log10 to natural log, as the TLG), no word
    score, ``beam_threshold`` 25, the model's ``▁`` piece as its silence token."""
    from asrdecode.bench.peers import FlashlightLexiconDecoder
    from asrdecode.lm.ngram_tensor import arpa_unigram_words
    from asrdecode.models.loading import load_model
    from asrdecode.models.loading import resolve_packaged_path as resolve

    data = PeerInput.of(manifest, out)
    model = load_model("embedded:demo_ctc_bpe")
    arpa = str(resolve(system.options["arpa"]))
    words = [w for w in arpa_unigram_words(Path(arpa)) if w != "<unk>"]
    lexicon = {w: [[model.units[i] for i in model.tokenizer.encode(w)]] for w in words}
    decoder = FlashlightLexiconDecoder(
        [*model.units, "<blank>"], "<blank>", "▁", lexicon, arpa, int(beam_size), beam_threshold=25.0
    )
    hyps, seconds = {}, 0.0
    for u in data.utterances:
        x = data.log_probs(u)
        t0 = time.perf_counter()
        words = decoder.words(x)
        seconds += time.perf_counter() - t0
        hyps[u.utt_id] = " ".join(words)
    return data.point(system, f"beam_size={beam_size}", hyps, seconds)


def run_nemo(system: System, value, manifest: Path, out: Path, nemo_python: str) -> Point:
    """NeMo's transcribe() on the demo RNN-T in another Python (`asrdecode.bench.nemo_peer`), its
    RTFx over NeMo's own front end, encoder and decoding, like an asrdecode point's."""
    import subprocess

    from asrdecode.models.loading import resolve_model_path

    utts, refs = read_set(manifest)
    if any(u.offset or u.duration is not None and u.duration < 0 for u in utts):
        raise ConfigError(f"{manifest}: the NeMo peer takes whole files only")
    job = {
        "model": str(resolve_model_path("embedded:demo_rnnt_bpe")),
        "audio": {u.utt_id: str(Path(u.audio_path).resolve()) for u in utts},
        "strategy": system.options["strategy"],
        system.key: value,
    }
    job_file = out / "runs" / "nemo-job.json"
    job_file.parent.mkdir(parents=True, exist_ok=True)
    job_file.write_text(json.dumps(job))
    script = Path(__file__).with_name("nemo_peer.py")
    proc = subprocess.run([nemo_python, str(script), str(job_file)], capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:])[:200]
        raise ConfigError(f"--nemo-python {nemo_python}: the NeMo peer failed ({tail})")
    result = json.loads(lines[-1])
    audio = sum(u.duration or 0.0 for u in utts)
    return scored_point(system, f"{system.key}={value}", refs, result["hyps"], audio, result["seconds"])


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def sweep(
    setup: Setup,
    out: Path,
    manifest: Path | None = None,
    systems: list[str] | None = None,
    on_point: Callable[[Point], None] | None = None,
    nemo_python: str | None = None,
) -> dict:
    """Run every point of `setup` (or of the `systems` named) and write out/sweep.json, sweep.md,
    sweep.png and sweep.svg; returns the JSON. NeMo peers run only with `nemo_python` (a Python
    with NeMo installed); without it they are listed as not run."""
    manifest = Path(manifest or setup.manifest)
    chosen = [
        s for s in setup.systems if systems is None or s.name in systems or s.name.split(" (")[0] in systems
    ]
    if not chosen:
        raise ConfigError(f"no system of setup {setup.name!r} matches {systems}")
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    points, not_run = [], []
    for system in chosen:
        if system.peer == "nemo" and not nemo_python:
            not_run.append(f"{system.name}: no --nemo-python")
            continue
        for value in system.values:
            if system.peer == "nemo":
                point = run_nemo(system, value, manifest, out, nemo_python)
            elif system.peer == "pocketsphinx":
                point = run_pocketsphinx(system, value, manifest)
            elif system.peer == "kaldi":
                point = run_kaldi(system, value, manifest, out)
            elif system.peer == "flashlight":
                point = run_flashlight(system, value, manifest, out)
            else:
                folder = out / "runs" / f"{system.name.split(' (')[0].replace(' ', '-')}-{value}"
                point = run_asrdecode(system, value, manifest, folder)
            points.append(point)
            if on_point is not None:
                on_point(point)
    result = {
        "setup": setup.name,
        "manifest": str(manifest),
        "note": setup.note if manifest == Path(setup.manifest) else f"{manifest} (given on the command line)",
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "points": [asdict(p) for p in points],
        "not_run": not_run,
    }
    (out / "sweep.json").write_text(json.dumps(result, indent=1))
    (out / "sweep.md").write_text(markdown_table(result))
    plot_sweep(result, out / "sweep")
    return result


def markdown_table(result: dict) -> str:
    lines = [
        f"WER and RTFx per setting on {result['note']}; {result['machine']}, {result['date']}, load average "
        f"{result['load_average']['before'][0]:.2f} before / {result['load_average']['after'][0]:.2f} after.",
        "",
        "| system | setting | WER | RTFx |",
        "|---|---|---:|---:|",
    ]
    for p in result["points"]:
        lines.append(f"| {p['system']} | {p['setting']} | {p['wer'] * 100:.1f}% | {p['rtfx']:.2f} |")
    for what in result.get("not_run", []):
        lines.append(f"| {what} | not run | | |")
    return "\n".join(lines) + "\n"
