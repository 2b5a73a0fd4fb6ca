"""A run on Ray: the inputs are cut into shards, worker actors decode them, the driver writes.

Each worker actor (`ShardWorker`) loads the model and decoder once (``engine.cpus_per_worker`` /
``engine.gpus_per_worker`` reserved for it) and decodes shard after shard with the same batching,
segmenting and error handling as a local run (`pipeline.Transcriber`). It returns the shard's
transcript records, lattice entries and error lines. The driver process alone writes the output
folder, as shards finish, through the same `OutputWriter` as a local run. So resuming, the lock
on ``--out``, errors.jsonl and the final input-order rewrite are the same; only lattice ``.fst``
files are written by the workers, into ``--out/lattices`` (a folder the workers must see).

A worker that dies (killed, out of memory, node lost) is replaced by a new actor and its shard goes
to it; a shard whose workers died `MAX_SHARD_ATTEMPTS` times ends the run with one line. A model
that cannot be loaded ends the run with that one-line error.
"""

from __future__ import annotations

import copy
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asrdecode.errors import AsrDecodeError, ConfigError, one_line
from asrdecode.machine import peak_memory_mb

if TYPE_CHECKING:
    from asrdecode.io.manifests import Utterance
    from asrdecode.pipeline import RunStats, Transcriber

MAX_SHARD_ATTEMPTS = 3
SHARDS_PER_WORKER = 4  # more shards than workers: a slow shard does not leave the others idle


class ShardOutput:
    """Stands in for `OutputWriter` inside a worker: keeps one shard's outputs for the driver."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.lattices: list[tuple[str, str]] = []
        self.errors: list[tuple[str, str | None, str]] = []

    def write_results(self, utts, results, seconds=None, ctm: bool = True, extras=None) -> None:
        from asrdecode.io.writers import batch_records

        self.records += batch_records(utts, results, seconds, extras)

    def write_lattices(self, entries) -> None:
        self.lattices += list(entries)

    def write_error(self, utt, error, path: str | None = None) -> None:
        from asrdecode.io.writers import error_entry

        self.errors.append(error_entry(utt, error, path))


@dataclass
class ShardResult:
    records: list[dict]
    lattices: list[tuple[str, str]]
    errors: list[tuple[str, str | None, str]]
    worker: str
    decoder: str
    stats: RunStats  # the shard's counts (decoded, failed, segmented, audio seconds)
    seconds: float
    stage_seconds: dict[str, float]
    boost_oov: list[str] = field(default_factory=list)
    scores_deferred: bool = False  # the worker's search threads scored the utterances
    peak_memory_mb: float = 0.0  # the worker process's peak so far (resident, or the GPU's)


class ShardWorker:
    """One worker: the model and decoder of the run's config, loaded once, decoding shards with a
    `transcriber` of the driver's class (the engine runs the pipeline's loop, handed to it: it does
    not import the pipeline)."""

    def __init__(
        self, transcriber: type[Transcriber], cfg: Any, input_kind: str, logprobs_meta: dict, out_dir: str
    ) -> None:
        self.problem: AsrDecodeError | None = None
        cfg = threads_within(cfg, max(1, int(cfg.engine.cpus_per_worker)))
        self.transcriber = transcriber(cfg, "", out_dir)
        self.transcriber.input_kind = input_kind
        self.transcriber.logprobs_meta = logprobs_meta
        self.transcriber.todo = []  # progress is reported by the driver
        try:
            self.transcriber._load()
            self.transcriber._warm_up()
        except AsrDecodeError as err:  # reported by run(): a one-line error, not a dead actor
            self.problem = err

    def run(self, utts: list[Utterance]) -> ShardResult:
        from asrdecode.audio.batching import plan_batches

        if self.problem is not None:
            raise self.problem
        t = self.transcriber
        from asrdecode.decoders import decoder_name

        t.writer, t.stats, t.boost_oov = ShardOutput(), type(t.stats)(), set()
        t.timer.seconds = dict.fromkeys(t.timer.seconds, 0.0)
        start = time.perf_counter()
        utts = t._with_valid_prompts(utts)  # an AED model's per-utterance prompts, as a local run checks them
        t._run_batches(plan_batches(utts, t.cfg.batch.max_seconds, t.cfg.batch.max_utterances), start)
        out: ShardOutput = t.writer
        return ShardResult(
            out.records,
            out.lattices,
            out.errors,
            worker=f"{socket.gethostname()}:{os.getpid()}",
            decoder=decoder_name(t.cfg.decoder),
            stats=t.stats,
            seconds=time.perf_counter() - start,
            stage_seconds=dict(t.timer.seconds),
            boost_oov=sorted(t.boost_oov),
            scores_deferred=t.defer_scores,
            peak_memory_mb=round(peak_memory_mb(t.device), 1),
        )


WORKER = ShardWorker  # the actor class (tests put a failing one here)


def threads_within(cfg: Any, cpus: int) -> Any:
    """A copy of `cfg` whose "all cores" thread settings (torch ``threads``, ``model.threads``,
    ``decoder.threads``: 0) use the worker's `cpus` instead: workers sharing a machine must not
    each start a thread per core."""
    cfg = copy.deepcopy(cfg)
    if cfg.threads == 0:
        cfg.threads = cpus
    if cfg.model.threads == 0:
        cfg.model.threads = cpus
    if getattr(cfg.decoder, "threads", None) == 0:
        cfg.decoder.threads = cpus
    return cfg


def make_shards(utts: list[Utterance], count: int) -> list[list[Utterance]]:
    """`count` shards of about equal audio: longest first, each to the lightest shard so far."""
    count = max(1, min(count, len(utts)))
    shards: list[list[Utterance]] = [[] for _ in range(count)]
    load = [0.0] * count
    for utt in sorted(utts, key=lambda u: -(u.duration or 0.0)):
        k = load.index(min(load))
        shards[k].append(utt)
        load[k] += utt.duration or 1.0
    return [s for s in shards if s]


def _start_ray(address: str | None):
    try:
        import ray
    except ImportError:
        raise ConfigError("engine.type=ray needs the ray package: pip install 'asrdecode[ray]'") from None
    if ray.is_initialized():
        return ray, False
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except Exception as err:  # ConnectionError, ValueError, RuntimeError: all mean "no cluster"
        where = address or "a local instance"
        text = " ".join(str(err).split())[:200]
        raise ConfigError(f"engine.address: cannot start or join Ray ({where}): {text}") from None
    return ray, True


def decode_on_ray(t: Transcriber, start: float) -> list[dict]:
    """Decode `t.todo` on Ray workers and write the results through `t.writer` as shards finish;
    returns one summary per worker (shards, utterances, audio seconds, busy seconds, RTFx)."""
    engine = t.cfg.engine
    if t.cfg.output.save_logprobs:
        raise ConfigError(
            "output.save_logprobs is not available with engine.type=ray (use engine.type=local)"
        )
    ray, started = _start_ray(engine.address)
    try:
        return _schedule(ray, t, start)
    finally:
        if started:
            ray.shutdown()


def _schedule(ray, t: Transcriber, start: float) -> list[dict]:
    engine = t.cfg.engine
    actor_cls = ray.remote(num_cpus=engine.cpus_per_worker, num_gpus=engine.gpus_per_worker)(WORKER)

    def new_actor():
        return actor_cls.remote(type(t), t.cfg, t.input_kind, t.logprobs_meta, str(t.out_dir))

    shards = make_shards(t.todo, engine.workers * SHARDS_PER_WORKER)
    slots = min(engine.workers, len(shards))
    t.on_status(f"ray: {len(shards)} shards on {slots} workers")
    t._report_progress(None)
    actors = [new_actor() for _ in range(slots)]
    queue, running = deque(range(len(shards))), {}
    attempts = [0] * len(shards)
    workers: dict[str, dict] = {}

    def submit(slot: int) -> None:
        if queue:
            k = queue.popleft()
            attempts[k] += 1
            running[actors[slot].run.remote(shards[k])] = (slot, k)

    try:
        for slot in range(slots):
            submit(slot)
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            slot, k = running.pop(ref)
            try:
                result: ShardResult = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                if attempts[k] >= MAX_SHARD_ATTEMPTS:
                    first = shards[k][0].utt_id
                    raise AsrDecodeError(
                        f"ray: shard {k} ({len(shards[k])} utterances from {first!r}) lost its worker "
                        f"{attempts[k]} times; last: {one_line(err, 300)}"
                    ) from None
                t.on_status(f"ray: a worker died ({one_line(err, 80)}); shard {k} goes to a new worker")
                ray.kill(actors[slot])
                actors[slot] = new_actor()
                queue.appendleft(k)
                submit(slot)
                continue
            except ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                if isinstance(cause, AsrDecodeError):
                    raise cause from None
                raise
            _write_shard(t, result, start)
            summary = workers.setdefault(
                result.worker,
                {
                    "worker": result.worker,
                    "shards": 0,
                    "utterances": 0,
                    "audio_seconds": 0.0,
                    "busy_seconds": 0.0,
                },
            )
            summary["shards"] += 1
            summary["utterances"] += result.stats.decoded + result.stats.failed
            summary["audio_seconds"] += result.stats.audio_seconds
            summary["busy_seconds"] += result.seconds
            summary["peak_memory_mb"] = max(summary.get("peak_memory_mb", 0.0), result.peak_memory_mb)
            submit(slot)
    finally:
        for actor in actors:
            ray.kill(actor)
    for summary in workers.values():
        busy = summary["busy_seconds"]
        summary["rtfx"] = summary["audio_seconds"] / busy if busy > 0 else None
    return list(workers.values())


def _write_shard(t: Transcriber, result: ShardResult, start: float) -> None:
    """The driver's half of a shard: write it, count it, report progress."""
    t.writer.write_lattices(result.lattices)
    t.writer.write_records(result.records, ctm=t.cfg.output.ctm)
    t.writer.write_errors(result.errors)
    for utt_id, _, message in result.errors:
        t.on_error(utt_id, message)
    if t.cfg.decoder is None:
        from asrdecode.config import validate_decoder_section

        t.cfg.decoder = validate_decoder_section({"type": result.decoder})
    t.stats.add_decoded(result.stats)
    for name, seconds in result.stage_seconds.items():
        t.timer.seconds[name] = t.timer.seconds.get(name, 0.0) + seconds
    t.boost_oov.update(result.boost_oov)
    t.defer_scores = t.defer_scores or result.scores_deferred
    t._report_progress(start)
