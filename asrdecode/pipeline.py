"""The transcription loop: inputs → batches → features → model → decoder → writers → report.

Owns the stage timers, resume logic and error accounting; no printing (the CLI reports through
the `on_progress` callback).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from asrdecode.config import RunConfig
from asrdecode.decoders import DecoderContext, DecodeResult, decoder_name, make_decoder
from asrdecode.decoders.base import PendingDecode, set_model_texts, start_decode
from asrdecode.decoders.transducer_greedy import merge_windows
from asrdecode.errors import AsrDecodeError, AudioError, ConfigError, ModelError
from asrdecode.gc_pause import loading_done
from asrdecode.machine import peak_memory_mb
from asrdecode.models.base import ModelOutput

STAGES = ("load", "features", "model", "decode")
T = TypeVar("T")
_END = object()  # the end of `StageTimer.timed`'s items


def resolve_device(spec: str) -> torch.device:
    """`auto` → first CUDA device if present, else CPU; `cuda[:N]` must exist."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ConfigError(f"device '{spec}' is not a torch device (use auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device '{spec}' requested but CUDA is not available on this machine")
    return device


@dataclass
class StageTimer:
    """Wall-clock seconds per stage; synchronises CUDA so device work is attributed correctly."""

    device: torch.device
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    @contextmanager
    def stage(self, name: str, host_only: bool = False):
        """Time the block as stage `name`; ``host_only``: work on the CPU alone (reading), which
        must not wait for the device's queued work (that would undo the overlap with it)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda" and not host_only:
                torch.cuda.synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start

    def timed(self, name: str, items: Iterable[T]) -> Iterator[T]:
        """`items`, each one's production timed as stage `name` (host only: a streamed input's
        reading between batches)."""
        it = iter(items)
        while True:
            with self.stage(name, host_only=True):
                item = next(it, _END)
            if item is _END:
                return
            yield item


@dataclass
class RunStats:
    utterances: int = 0
    decoded: int = 0
    resumed: int = 0
    failed: int = 0
    segmented: int = 0  # inputs longer than batch.segment_seconds, decoded in segments
    segmented_without_lattice: int = 0  # of those, inputs whose lattice was asked for but not written
    # hypotheses an autoregressive decoder stopped at their length limit, without an end token
    unfinished: int = 0
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0

    def add_decoded(self, other: RunStats) -> None:
        """Add the decoding counts of `other` (a worker's part of the run)."""
        self.decoded += other.decoded
        self.failed += other.failed
        self.segmented += other.segmented
        self.segmented_without_lattice += other.segmented_without_lattice
        self.unfinished += other.unfinished
        self.audio_seconds += other.audio_seconds


def one_ahead(started: Iterable[PendingDecode]) -> Iterator[list[DecodeResult]]:
    """The results of batches started in turn (`start_decode`), each collected once the next one
    has been started: while a decoder's workers search a batch (and the next one queues behind
    it), the caller writes the batch before and reads the next, so that no worker waits between
    batches (a decoder that decodes on the calling thread runs one batch after another). A batch
    started but not collected when the caller stops (an error, an interrupt) is cancelled: what no
    worker has started is dropped."""
    pending: PendingDecode | None = None
    try:
        for batch in started:
            previous, pending = pending, batch
            if previous is not None:
                yield previous.result()
        if pending is not None:
            last, pending = pending, None
            yield last.result()
    finally:
        if pending is not None:
            pending.cancel()


def words_of_units(units: list[str]) -> Callable[[list[int]], list[tuple[str, int, int]]]:
    """Group unit ids into words for a bare unit list (saved log-probs): NeMo's text of the units
    (BPE '▁' or a char space/'|'), a space dropped before the vocabulary's punctuation
    (`asrdecode.models.tokenizer.units_words`)."""
    from asrdecode.models.tokenizer import units_words

    return units_words(units)


def text_of_units(units: list[str]) -> Callable[[list[int]], str]:
    """The text of unit ids for a bare unit list, whitespace as NeMo writes it
    (`asrdecode.models.tokenizer.units_text`)."""
    from asrdecode.models.tokenizer import units_text

    return units_text(units)


class Transcriber:
    """One run of `asrdecode transcribe` over an input set into an output folder."""

    def __init__(
        self,
        cfg: RunConfig,
        input_path: str | Path,
        out_dir: str | Path,
        *,
        overwrite: bool = False,
        strict: bool = False,
        on_progress: Callable[[dict], None] | None = None,
        on_error: Callable[[str, str], None] | None = None,
        on_status: Callable[[str], None] | None = None,
    ):
        self.cfg = copy.deepcopy(cfg)  # the run resolves parts of it (the decoder of `auto`)
        self.input_path = Path(input_path)
        self.out_dir = Path(out_dir)
        self.overwrite = overwrite
        self.strict = strict
        self.on_progress = on_progress or (lambda event: None)
        self.on_error = on_error or (lambda utt, msg: None)
        self.on_status = on_status or (lambda msg: None)
        self.device = resolve_device(cfg.device)
        self.timer = StageTimer(self.device)
        self.stats = RunStats()
        self.boost_oov: set[str] = set()  # boost words the decoder's vocabulary does not have
        self.workers: list[dict] = []  # engine.type=ray: one summary per worker
        self.defer_scores = False  # the model's scores left to the decoder's workers (`_load`)
        self.todo_seconds = 0.0  # the known audio seconds of the inputs to decode (progress)

    # ----------------------------------------------------------------- setup
    def _open(self) -> None:
        """Read the inputs and open the output folder (resuming): what is left to decode."""
        from asrdecode.io.manifests import read_inputs
        from asrdecode.io.provenance import run_setup, source_of
        from asrdecode.io.subtitles import subtitle_formats
        from asrdecode.io.writers import OutputWriter

        self.inputs = read_inputs(self.input_path)
        self._check_settings()
        for utt in self.inputs.utterances:  # records name their file wherever they are read from
            if utt.audio_path and "audio_filepath" in utt.record:
                utt.record["audio_filepath"] = source_of(utt)["audio_filepath"]
        output = self.cfg.output
        self.writer = OutputWriter(
            self.out_dir,
            overwrite=self.overwrite,
            subtitles=subtitle_formats(output.subtitles),
            subtitle_style=output.subtitle_style(),
            setup=run_setup(self.cfg, self.inputs.meta),
            sources={u.utt_id: source_of(u) for u in self.inputs.utterances},
        )
        for warning in [*self.inputs.warnings, *self.writer.warnings]:
            self.on_status(f"warning: {warning}")
        done = self.writer.done_ids()
        self.todo = [u for u in self.inputs.utterances if u.utt_id not in done]
        self.stats.utterances = len(self.inputs.utterances)
        self.stats.resumed = len(self.inputs.utterances) - len(self.todo)
        self.input_kind = self.inputs.kind
        self.logprobs_meta = self.inputs.meta
        if self.strict:
            self._check_readable()

    def _check_settings(self) -> None:
        """What the settings name, checked before the output folder is made and anything is loaded:
        the model's file (or embedded name) and family options, the decoder's files."""
        from asrdecode.decoders import check_decoder_files
        from asrdecode.models.loading import check_model_settings

        if self.inputs.kind != "logprobs":
            model = asdict(self.cfg.model)
            prompt = {k: model[k] for k in ("source_lang", "target_lang", "pnc", "timestamps")}
            options = ("head", "attention", "att_context_size", "streaming", "chunk_seconds", "density_floor")
            check_model_settings(model["path"], model["type"], *(model[k] for k in options), prompt=prompt)
        if self.cfg.decoder is not None:
            check_decoder_files(self.cfg.decoder)

    def _check_readable(self) -> None:
        """``--strict``: every input left to decode is a readable file (or saved log-prob
        matrix), before anything is loaded; the first that is not stops the run (`_fail`)."""
        from asrdecode.io.manifests import unreadable

        try:
            for utt in self.todo:
                problem = utt.error or unreadable(utt.logprobs_path or utt.audio_path)
                if problem is None and utt.duration is None and utt.logprobs_path is None:
                    problem = f"{utt.audio_path}: not a readable audio file"
                if problem is not None:
                    self._fail(utt, problem)
        except AudioError:
            self.writer.close()
            raise

    def _load(self) -> None:
        """Load the model (none for saved log-probs) and make the decoder."""
        if self.cfg.threads > 0:
            torch.set_num_threads(self.cfg.threads)
        self.logprob_input = self.input_kind == "logprobs"
        if self.logprob_input:
            meta = self.logprobs_meta
            self.model = None
            self.frame_shift = float(meta["frame_shift"])
            self.units = list(meta["units"])
            self.blank_id = int(meta.get("blank_id", len(self.units)))
            words_of = words_of_units(self.units)
            text_of = text_of_units(self.units)
            self._resolve_auto_decoder("ctc-greedy")
        else:
            from asrdecode.models.loading import load_model

            self.on_status(f"loading model {self.cfg.model.path}")
            model_cfg = self.cfg.model
            options = asdict(model_cfg)
            self.model = load_model(options.pop("path"), options.pop("type"), **options)
            self.model = self.model.to(self.device).eval()
            self.frame_shift = self.model.frame_shift
            self.units = list(self.model.units)
            self.blank_id = self.model.blank_id
            words_of = self.model.tokens_to_words
            text_of = getattr(self.model, "tokens_to_text", None)
            if self.cfg.output.subtitles and not getattr(self.model, "aligns_words", True):
                raise ConfigError(
                    f"output.subtitles: {self.cfg.model.path} gives no word times (an attention "
                    "encoder-decoder times its words only when asked: model.timestamps=yes, canary2 models)"
                )
            self._resolve_auto_decoder(getattr(self.model, "default_decoder", "ctc-greedy"))
        context = DecoderContext(
            units=self.units, blank_id=self.blank_id, frame_shift=self.frame_shift, words_of=words_of,
            text_of=text_of,
        )  # fmt: skip
        graph = getattr(self.cfg.decoder, "graph", None)
        if isinstance(graph, str) and graph.startswith("cache:"):  # built on first use (graph.cache)
            from asrdecode.graph.cache import resolve_graph_spec
            from asrdecode.graph.stages import report_finished

            self.cfg.decoder.graph = resolve_graph_spec(
                graph, report_finished(self.on_status), self.on_status
            )
        self.context = context
        if getattr(self.cfg.decoder, "rescore_lm", ""):
            self.on_status(f"reading the rescoring LM {self.cfg.decoder.rescore_lm}")
        on_the_fly_lm = getattr(self.cfg.decoder, "lm", "")
        if on_the_fly_lm:  # wfst-otf, let: seconds to tens of seconds when the tables are built
            self.on_status(f"reading the LM {on_the_fly_lm} (its tables are built on first use, then cached)")
        start = time.perf_counter()
        self.decoder = make_decoder(self.cfg.decoder, context)
        if on_the_fly_lm:
            self.on_status(f"LM tables ready in {time.perf_counter() - start:.1f} s")
        self.defer_scores = self._scores_deferred()
        if self.cfg.output.save_logprobs:
            from asrdecode.io.manifests import write_logprobs_meta

            write_logprobs_meta(
                self.out_dir / "logprobs",
                self.frame_shift,
                self.blank_id,
                self.units,
                {"model": self.cfg.model.path},
            )

    def _scores_deferred(self) -> bool:
        """Whether the model's scores are left to the decoder's workers (`DeferredScores`): the
        model can defer them (``deferred_output``), the decoder takes them on this device, and no
        log-probs are to be saved."""
        takes = getattr(self.decoder, "takes_deferred_scores", None)
        return (
            self.model is not None
            and hasattr(self.model, "deferred_output")
            and takes is not None
            and takes(self.device)
            and not self.cfg.output.save_logprobs
        )

    def _forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> ModelOutput:
        if self.defer_scores:
            return self.model.deferred_output(feats, feat_lens)
        return self.model.forward_features(feats, feat_lens)

    def _resolve_auto_decoder(self, natural: str) -> None:
        """`decoder.type: auto` → the model's natural decoder (ctc-greedy / transducer-greedy)."""
        if self.cfg.decoder is None:
            from asrdecode.config import validate_decoder_section

            self.cfg.decoder = validate_decoder_section({"type": natural})
            self.on_status(f"decoder: {natural}")

    # ----------------------------------------------------------------- stages
    @torch.inference_mode()
    def _model_output(self, waves: list[torch.Tensor]) -> ModelOutput:
        from asrdecode.audio.batching import pad_batch

        batch, lengths = pad_batch(waves, self.device)
        with self.timer.stage("features"):
            feats, feat_lens = self.model.features(batch, lengths)
        with self.timer.stage("model"):  # deferred scores: made in the decode stage
            out = self._forward(feats, feat_lens)
        return out

    def _warm_up(self) -> None:
        """Run one short batch through every stage so first-call costs are not timed."""
        if self.model is None:
            return
        sr = self.model.sample_rate
        with torch.inference_mode():
            out = self._forward(
                *self.model.features(
                    torch.zeros(1, sr, device=self.device), torch.tensor([sr], device=self.device)
                )
            )
            self.decoder.decode(out)
        self.timer.seconds = dict.fromkeys(STAGES, 0.0)

    def _load_batch(self, utts):
        """Read + resample one batch; failures are reported and dropped (or raised with --strict)."""
        from asrdecode.audio.loading import load_audio, resample_batch

        good, waves, rates = [], [], []
        for utt in utts:
            try:  # a long input comes resampled as it is read, a short one is resampled below
                wave, rate = load_audio(utt, target_sr=self.model.sample_rate)
            except AudioError as err:
                self._fail(utt, str(err))
                continue
            self._warn_if_cut_short(utt)
            good.append(utt)
            waves.append(torch.from_numpy(np.ascontiguousarray(wave)))
            rates.append(rate)
        if not good:
            return [], []
        resampled = resample_batch(waves, rates, self.model.sample_rate, self.device)
        keep_u, keep_w = [], []
        for utt, wave in zip(good, resampled, strict=True):
            if isinstance(wave, Exception):
                self._fail(utt, str(wave))
            else:
                keep_u.append(utt)
                keep_w.append(wave)
        return keep_u, keep_w

    def _warn_if_cut_short(self, utt) -> None:
        """A warning for an input read whole that may yet be cut short (`cut_short_warning`)."""
        from asrdecode.audio.loading import cut_short_warning

        warning = cut_short_warning(utt)
        if warning is not None:
            self.on_status(f"warning: {warning}")

    def _load_logprob_batch(self, utts):
        from asrdecode.io.manifests import load_logprobs

        good, mats = [], []
        for utt in utts:
            try:
                mats.append(torch.from_numpy(np.asarray(load_logprobs(utt), dtype=np.float32)))
                good.append(utt)
            except AsrDecodeError as err:
                self._fail(utt, str(err))
        return good, mats

    def _with_valid_prompts(self, utts: list) -> list:
        """The utterances whose own prompt (an AED model's input record fields: source_lang,
        target_lang, pnc, ...) the model can write; the others fail here, each in one line."""
        utterance_prompt = getattr(self.model, "utterance_prompt", None)
        if utterance_prompt is None:
            return utts
        good = []
        for utt in utts:
            try:
                self.model.prompt_ids(utterance_prompt(utt.record))
                good.append(utt)
            except ModelError as err:
                self._fail(utt, f"{utt.utt_id}: prompt: {err}")
        return good

    def _fail(self, utt, message: str) -> None:
        """One failed input: in errors.jsonl, reported, its audio out of the progress total;
        ``--strict``: the run stops with its message (reported once, as the run's error)."""
        self.stats.failed += 1
        self.writer.write_error(utt, message)
        self.todo_seconds -= utt.duration or 0.0
        if self.strict:
            raise AudioError(message)
        self.on_error(utt.utt_id, message)

    def _save_logprobs(self, utts, out: ModelOutput) -> None:
        from asrdecode.io.manifests import save_logprobs

        lp = out.log_probs.float().cpu().numpy()
        for i, utt in enumerate(utts):
            save_logprobs(
                self.out_dir / "logprobs",
                utt.utt_id,
                lp[i, : int(out.lengths[i])],
                text=utt.text,
                duration=self._duration(utt),
            )

    def _write_lattices(self, utts, results: list[DecodeResult]) -> list[dict | None]:
        """The batch's lattices: Kaldi text entries appended to lattices/lat.ark.txt (one archive
        per run, ``lat.ark,t`` style) and one OpenFst word lattice per utterance
        (lattices/<utt>.fst, rewritten if a resumed run decodes it again). Returns the extra
        transcript fields per utterance (lattice density: arcs per frame)."""
        from urllib.parse import quote

        entries, extras = [], []
        for utt, res in zip(utts, results, strict=True):
            lattice = res.lattice
            if lattice is None or not hasattr(lattice, "to_kaldi_text"):
                extras.append(None)
                continue
            entries.append((utt.utt_id, lattice.to_kaldi_text(utt.utt_id)))
            folder = self.out_dir / "lattices"
            folder.mkdir(parents=True, exist_ok=True)
            lattice.word_fst().write(str(folder / f"{quote(utt.utt_id, safe='')}.fst"))
            extras.append({"lattice_density": round(float(lattice.density()), 4)})
        self.writer.write_lattices(entries)
        return extras

    def _lattice_report(self) -> dict:
        """Average lattice density (arcs per frame) over the utterances with a lattice."""
        dens = [
            r["lattice_density"] for r in self.writer.read_records() if r.get("lattice_density") is not None
        ]
        return {"lattice_density": sum(dens) / len(dens)} if dens else {}

    def _duration(self, utt) -> float:
        if utt.duration is not None:
            return float(utt.duration)
        return 0.0

    # ----------------------------------------------------------------- run
    def run(self) -> dict:
        from asrdecode.audio.batching import plan_batches

        self._open()
        distributed = self.cfg.engine.type == "ray"
        if not distributed:
            try:
                self._load()
            except BaseException:
                self.writer.close()
                self.writer.discard_if_unused()
                raise
        loading_done()  # a collector paused by the command: loading's garbage collected, the rest frozen
        self._warn_if_boosts_unused()
        start = time.perf_counter()
        interrupted = False
        try:
            if self.todo and distributed:
                from asrdecode.engines.ray import decode_on_ray

                self.workers = decode_on_ray(self, start)
            elif self.todo:
                self.todo = self._with_valid_prompts(self.todo)
                if self.model is not None:
                    self.on_status("warming up")
                    self._warm_up()
                self._report_progress(None)
                batch = self.cfg.batch
                self._run_batches(plan_batches(self.todo, batch.max_seconds, batch.max_utterances), start)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.stats.wall_seconds = time.perf_counter() - start
            self.writer.close(order=self.inputs.ids())
        if self.stats.unfinished:
            self.on_status(
                f"warning: {self.stats.unfinished} hypothesis(es) stopped at the decoder's length limit "
                "without an end token (their text may be cut: decoder.max_generation_delta)"
            )
        if self.boost_oov:
            words = sorted(self.boost_oov)
            self.on_status(
                f"warning: {len(words)} boost word(s) not in the graph vocabulary, not boosted: "
                + ", ".join(words[:10])
                + (" ..." if len(words) > 10 else "")
            )
        report = self.report(interrupted)
        self.writer.write_report(report)
        if interrupted:
            raise KeyboardInterrupt
        return report

    def _warn_if_boosts_unused(self) -> None:
        """One warning when inputs carry boost lists (a manifest's ``boost``) that the decoder does
        not apply (word boosting is a WFST decoders' feature)."""
        from asrdecode.decoders import DECODERS, decoder_name

        name = decoder_name(self.cfg.decoder)
        boosted = sum(1 for u in self.todo if u.boost)
        if not boosted or name not in DECODERS or getattr(DECODERS[name], "takes_boost", False):
            return
        takers = ", ".join(n for n, cls in DECODERS.items() if getattr(cls, "takes_boost", False))
        self.on_status(
            f"warning: {boosted} input(s) carry boost lists, which decoder.type={name} does not apply "
            f"(word boosting: {takers})"
        )

    def _report_progress(self, start: float | None, unfinished_seconds: float = 0.0) -> None:
        """Progress so far (`start` None: the run is starting): inputs done of those to decode,
        audio seconds decoded of their known total (``audio_total``, for an estimate of the time
        left); `unfinished_seconds`: audio decoded of an input still in segments."""
        if start is None:
            self.todo_seconds = sum(u.duration or 0.0 for u in self.todo)
        self.on_progress(
            {
                "total": len(self.todo),
                "done": self.stats.decoded + self.stats.failed,
                "audio_seconds": self.stats.audio_seconds + unfinished_seconds,
                "audio_total": self.todo_seconds,
                "elapsed": time.perf_counter() - start if start is not None else 0.0,
            }
        )

    def _start_decode(self, out: ModelOutput, utts) -> PendingDecode:
        """The decoder started on one batch of model outputs (with the utterances' boost lists;
        `start_decode`): its ``result()`` waits for the batch's results."""
        windows = out.extra.get("windows")  # buffered transducer output: a row per window
        if any(u.boost for u in utts):
            boosts = [u.boost for u in utts]
            out.extra["boost"] = [boosts[b] for b in windows.owner] if windows is not None else boosts
        utterance_prompt = getattr(self.model, "utterance_prompt", None)
        prompts = [utterance_prompt(u.record) for u in utts] if utterance_prompt is not None else []
        if any(prompts):
            out.extra["prompt_slots"] = prompts
        with self.timer.stage("decode"):
            pending = start_decode(self.decoder, out)

        def collect() -> list[DecodeResult]:
            with self.timer.stage("decode"):
                results: list[DecodeResult] = pending.result()
                if windows is not None:
                    results = merge_windows(windows, results, self.context.words_of)
                set_model_texts(results, self.context.text_of)
            offset = float(out.extra.get("time_offset", 0.0))
            if offset:  # outputs that run behind the audio and past its end (buffered inference)
                limits = out.extra.get("time_limit") or [float("inf")] * len(results)
                for result, limit in zip(results, limits, strict=True):
                    for w in result.words:
                        w.start = min(max(w.start + offset, 0.0), limit)
                        w.end = min(max(w.end + offset, 0.0), limit)
            info = getattr(self.decoder, "last_info", {})
            self.boost_oov.update(info.get("oov_boost_words", ()))
            self.stats.unfinished += info.get("unfinished", 0)
            return results

        return PendingDecode(collect, pending.cancel)

    def _write(self, utts, results: list[DecodeResult], seconds: list[float], extras=None) -> None:
        self.writer.write_results(
            utts, results, seconds, ctm=self.cfg.output.ctm, extras=extras if extras and any(extras) else None
        )
        self.stats.decoded += len(utts)
        self.stats.audio_seconds += sum(seconds)

    def _start_decode_and_write(self, utts, out: ModelOutput, seconds: list[float]) -> PendingDecode:
        """The batch's decode started; ``result()`` waits for it and writes its results."""
        pending = self._start_decode(out, utts)

        def write() -> list[DecodeResult]:
            results = pending.result()
            extras = self._write_lattices(utts, results)
            if self.cfg.output.save_logprobs and out.log_probs is not None:
                self._save_logprobs(utts, out)
            self._write(utts, results, seconds, extras)
            return results

        return PendingDecode(write, pending.cancel)

    def _segment_seconds(self) -> float:
        """The longest input decoded whole: ``batch.segment_seconds``, but no more than a batch
        (``batch.max_seconds``) or the model (``longest_input_seconds``: an attention
        encoder-decoder's, 40 s) takes; 0 (``batch.segment_seconds=0``): every input whole but for
        the model's limit."""
        batch = self.cfg.batch
        seconds = min(batch.segment_seconds, batch.max_seconds) if batch.segment_seconds > 0 else 0.0
        longest = getattr(self.model, "longest_input_seconds", 0.0)
        return min(seconds, longest) if seconds and longest else seconds or longest

    def _decode_in_segments(self, utt, wave: torch.Tensor | None, run_start: float | None = None) -> None:
        """An input longer than ``batch.segment_seconds``: cut at quiet moments (`cut_stream`),
        the segments decoded in batches like utterances, their results and lattices joined
        (`join_results`, `join_lattices`). `wave` None: the input is read (and resampled) as its
        segments are cut (`audio_blocks`), so that it is never all in memory; a read error then
        fails the input, reported like an unreadable file. With the run's start (`run_start`),
        progress is reported after each batch of segments."""
        from asrdecode.audio.loading import audio_blocks
        from asrdecode.audio.segmenting import cut_stream, join_lattices, join_results
        from asrdecode.io.manifests import save_logprobs
        from asrdecode.io.segment_log import KeptSegment

        rate, batch = self.model.sample_rate, self.cfg.batch
        seconds = self._segment_seconds()
        if wave is None:  # read as it is cut, the reading timed as the load stage
            blocks: Iterable[np.ndarray] = self.timer.timed("load", audio_blocks(utt, rate))
            self._warn_if_cut_short(utt)
        else:
            blocks = [wave.detach().cpu().numpy()]
        per_batch = max(1, min(batch.max_utterances, int(batch.max_seconds // seconds)))
        log = self._segment_log(utt, rate, seconds)
        kept = log.kept() if log is not None else []
        parts: list[DecodeResult] = [k.result for k in kept]  # decoded by an earlier run
        # the audio of the kept segments: not decoded by this run, so not in its progress or RTFx
        kept_seconds = kept[-1].end / rate if kept else 0.0
        self.todo_seconds -= kept_seconds
        log_probs: list[np.ndarray] = []
        outs: list[ModelOutput | None] = []
        starts: list[int] = []  # each segment's first sample
        ends: list[int] = []  # each segment's end (sample); the last one is the input's length

        def started() -> Iterator[PendingDecode]:
            nonlocal kept_seconds
            group: list[np.ndarray] = []
            for first, piece in cut_stream(blocks, rate, seconds):
                starts.append(first)
                ends.append(first + piece.shape[0])
                index = len(starts) - 1
                if index < len(kept):
                    if (kept[index].start, kept[index].end) == (first, ends[-1]):
                        continue  # its result is kept
                    del kept[index:], parts[index:]  # cut elsewhere now: decoded again from here
                    if log is not None:
                        log.keep(kept)
                    self.todo_seconds += kept_seconds - first / rate
                    kept_seconds = first / rate
                group.append(piece)
                if len(group) == per_batch:
                    yield start(group)
                    group = []
            if group:
                yield start(group)

        def start(group: list[np.ndarray]) -> PendingDecode:
            out = self._model_output(group)
            outs.append(out)
            return self._start_decode(out, [utt] * out.lengths.shape[0])

        try:
            for i, results in enumerate(one_ahead(started())):
                parts += results
                if log is not None and any(r.lattice is not None for r in results):
                    log.remove()  # lattices are not kept: the input is decoded whole again
                    log = None
                if log is not None:
                    first = len(parts) - len(results)
                    log.append([KeptSegment(starts[j], ends[j], parts[j]) for j in range(first, len(parts))])
                if run_start is not None:
                    self._report_progress(run_start, ends[len(parts) - 1] / rate - kept_seconds)
                out, outs[i] = outs[i], None
                if self.cfg.output.save_logprobs and out is not None and out.log_probs is not None:
                    lp = out.log_probs.float().cpu().numpy()
                    log_probs += [lp[j, : int(out.lengths[j])] for j in range(lp.shape[0])]
        except AudioError as err:
            if log is not None:
                log.remove()
            self._fail(utt, str(err))
            return
        if log_probs:
            save_logprobs(
                self.out_dir / "logprobs", utt.utt_id, np.concatenate(log_probs),
                text=utt.text, duration=self._duration(utt),
            )  # fmt: skip
        self.stats.segmented += 1
        offsets = [a / rate for a in starts]
        joined = join_results(parts, offsets, self.frame_shift)
        spans = [
            {"start": round(a / rate, 3), "end": round(b / rate, 3), "words": len(p.words)}
            for a, b, p in zip(starts, ends, parts, strict=True)
        ]
        extras = [{"segments": spans}]
        if any(part.lattice is not None for part in parts):
            joined.lattice = join_lattices(parts, offsets, self.frame_shift)
            if joined.lattice is None:
                self.stats.segmented_without_lattice += 1
                self.on_status(
                    f"{utt.utt_id}: no lattice written (a segment of batch.segment_seconds="
                    f"{batch.segment_seconds:g} has none; batch.segment_seconds=0 decodes it whole)"
                )
            else:
                extras = [{**spans_of, **(lattice or {})} for spans_of, lattice in zip(
                    extras, self._write_lattices([utt], [joined]), strict=True
                )]  # fmt: skip
        self._write([utt], [joined], [ends[-1] / rate], extras)
        self.stats.audio_seconds -= kept_seconds  # decoded by an earlier run
        if log is not None:
            log.remove()

    def _segment_log(self, utt, rate: int, seconds: float):
        """Where a long input's decoded segments are kept (`SegmentLog`), or None when they are not:
        log-probs to save (their matrix is the whole input's) or lattices to join."""
        from asrdecode.io.provenance import source_of
        from asrdecode.io.segment_log import SegmentLog

        if self.cfg.output.save_logprobs or getattr(self.cfg.decoder, "want_lattice", False):
            return None
        header = {**source_of(utt), "rate": rate, "segment_seconds": seconds}
        return SegmentLog(self.out_dir, utt.utt_id, header)

    def _run_batches(self, batches: list[list], start: float) -> None:
        """Decode the batches in order, each started before the one before it is written
        (`one_ahead`)."""
        for _ in one_ahead(self._start_batch(utts, start) for utts in batches):
            pass

    def _start_batch(self, utts, start: float) -> PendingDecode:
        """Read one batch and start decoding it; ``result()`` waits for it, writes its results,
        decodes its long inputs in segments and reports progress."""
        segment = self._segment_seconds() if not self.logprob_input else 0.0
        known_long = [segment > 0 and u.duration is not None and u.duration > segment for u in utts]
        streamed = [u for u, long_one in zip(utts, known_long, strict=True) if long_one]  # read as cut
        utts = [u for u, long_one in zip(utts, known_long, strict=True) if not long_one]
        with self.timer.stage("load"):
            if self.logprob_input:
                utts, mats = self._load_logprob_batch(utts)
            else:
                utts, waves = self._load_batch(utts)
        pending: PendingDecode | None = None
        long: list[int] = []
        if utts and self.logprob_input:
            lengths = torch.tensor([m.shape[0] for m in mats], dtype=torch.int64)
            padded = torch.nn.utils.rnn.pad_sequence(mats, batch_first=True).to(self.device)
            out = ModelOutput(padded, lengths.to(self.device), self.frame_shift, self.blank_id, self.units)
            seconds = [
                self._duration(u) or m.shape[0] * self.frame_shift for u, m in zip(utts, mats, strict=True)
            ]
            pending = self._start_decode_and_write(utts, out, seconds)
        elif utts:
            rate = self.model.sample_rate
            limit = self._segment_seconds() * rate
            long = [i for i, w in enumerate(waves) if limit > 0 and w.shape[0] > limit]
            short = [i for i in range(len(utts)) if i not in long]
            if short:
                kept = [waves[i] for i in short]
                pending = self._start_decode_and_write(
                    [utts[i] for i in short], self._model_output(kept), [w.shape[0] / rate for w in kept]
                )

        def finish() -> list[DecodeResult]:
            if pending is not None:
                pending.result()
            for i in long:
                self._decode_in_segments(utts[i], waves[i], start)
            for utt in streamed:
                self._decode_in_segments(utt, None, start)
            self._report_progress(start)
            return []

        return PendingDecode(finish, pending.cancel if pending is not None else lambda: None)

    def report(self, interrupted: bool = False) -> dict:
        """report.json: counts, hours, WER/CER over all finished utterances, RTFx per stage."""
        audio = self.stats.audio_seconds
        stage_seconds = dict(self.timer.seconds)
        compute = sum(stage_seconds.values())
        rtfx = {name: (audio / sec if sec > 0 else None) for name, sec in stage_seconds.items()}
        report = {
            "input": str(self.input_path),
            "input_kind": self.inputs.kind,
            "output": str(self.out_dir),
            "model": self.cfg.model.path if self.input_kind != "logprobs" else "(saved log-probs)",
            "decoder": decoder_name(self.cfg.decoder),
            "device": str(self.device),
            "config_hash": self.cfg.digest(),
            "utterances": self.stats.utterances,
            "decoded_this_run": self.stats.decoded,
            "resumed": self.stats.resumed,
            "failed": self.stats.failed,
            "segmented": self.stats.segmented,
            "segmented_without_lattice": self.stats.segmented_without_lattice,
            "unfinished_hypotheses": self.stats.unfinished,
            "interrupted": interrupted,
            "audio_hours_this_run": audio / 3600,
            "wall_seconds": self.stats.wall_seconds,
            "stage_seconds": stage_seconds,
            # the model's scores made by the decoder's workers: their time is in the decode stage
            "scores_deferred": self.defer_scores,
            "rtfx": audio / self.stats.wall_seconds if self.stats.wall_seconds > 0 and audio else None,
            "rtfx_compute": audio / compute if compute > 0 else None,
            "rtfx_per_stage": rtfx,
            "peak_memory_mb": round(peak_memory_mb(self.device), 1),
            "boost_oov": sorted(self.boost_oov),
            "torch": torch.__version__,
        }
        if self.cfg.engine.type != "local":
            report["engine"] = self.cfg.engine.type
            report["workers"] = self.workers
            # the driver's and every worker process's peaks (workers that died and were replaced
            # count with their replacement's)
            workers = sum(w.get("peak_memory_mb", 0.0) for w in self.workers)
            report["peak_memory_mb_workers"] = round(workers, 1)
            report["peak_memory_mb_total"] = round(report["peak_memory_mb"] + workers, 1)
        report.update(self._accuracy())
        report.update(self._lattice_report())
        return report

    def _accuracy(self) -> dict:
        """WER/CER over every utterance in transcripts.jsonl that has a reference."""
        from asrdecode.scoring import score

        refs = {u.utt_id: u.text for u in self.inputs.utterances if u.text is not None}
        if not refs:
            return {"wer": None, "cer": None, "scored_utterances": 0}
        hyps = self.writer.read_hypotheses()
        hyps = {k: v for k, v in hyps.items() if k in refs}
        refs = {k: v for k, v in refs.items() if k in hyps}
        if not refs:
            return {"wer": None, "cer": None, "scored_utterances": 0}
        sc = score(
            refs,
            hyps,
            lowercase=self.cfg.scoring.lowercase,
            remove_punctuation=self.cfg.scoring.remove_punctuation,
        )
        d = sc.to_dict()
        return {
            "wer": d["wer"],
            "cer": d["cer"],
            "scored_utterances": len(refs),
            "scoring": {k: d[k] for k in ("substitutions", "deletions", "insertions", "ref_words") if k in d},
        }
