"""`asrdecode` command line: parses arguments, calls the library, reports with rich. No logic here."""

from __future__ import annotations

import json
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from asrdecode import __version__
from asrdecode.errors import AsrDecodeError, message_line
from asrdecode.gc_pause import paused_while_loading

console = Console(stderr=True)
out_console = Console()

PATH = click.Path(path_type=Path)  # a path argument or option, given to commands as a Path
debug_option = click.option("--debug", is_flag=True, help="Show tracebacks.")


def path_option(*decls: str, **kwargs: object):
    """A click option whose value is a `Path`."""
    return click.option(*decls, type=PATH, **kwargs)


def say(con: Console, label: str, text: object) -> None:
    """One line on `con`: a markup `label` and `text` as it is (escaped: a file name with
    brackets is not markup) and never wrapped or shortened at the console width (a long path in a
    one-line error stays whole and on one line; control characters are escaped and a message of
    thousands of characters is cut in its middle: `message_line`)."""
    con.print(f"{label}{escape(message_line(str(text)))}", highlight=False, soft_wrap=True)


def _fail(err: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(err)
    say(console, "[bold red]error:[/] ", err)
    sys.exit(2)


def _out_of_memory(err: RuntimeError) -> str:
    """The one-line message for torch's allocation failures (a beam, batch or model too large for
    the device: CPU ``can't allocate memory``, ``torch.OutOfMemoryError``), '' for other errors."""
    import re

    text = str(err)
    if type(err).__name__ != "OutOfMemoryError" and "can't allocate memory" not in text:
        return ""
    size = re.search(r"tried to allocate ([0-9.]+ ?[KMGT]?i?B|[0-9]+ bytes)", text)
    what = f" (tried to allocate {size.group(1)})" if size else ""
    return (
        f"out of memory{what}: lower batch.max_seconds or batch.max_utterances, the decoder's beam or "
        "max_active, or run on a device with more memory; results written so far are kept"
    )


class _Group(click.Group):
    """Turns AsrDecodeError (and common OS errors) into one-line messages unless --debug."""

    def invoke(self, ctx: click.Context):
        debug = "--debug" in sys.argv
        try:
            return super().invoke(ctx)
        except AsrDecodeError as err:
            _fail(err, debug)
        except (OSError, ValueError) as err:
            if debug:
                raise
            _fail(err, debug)
        except RuntimeError as err:
            if debug or not _out_of_memory(err):
                raise
            _fail(AsrDecodeError(_out_of_memory(err)), debug)
        except KeyboardInterrupt:
            console.print(
                "[yellow]interrupted:[/] finished results are kept; rerun the same command to resume"
            )
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="asrdecode")
def main() -> None:
    """asrdecode: batch speech transcription with batched (GPU-style) decoders.

    \b
    Examples:
      asrdecode transcribe data/demo/real --out out/demo
      asrdecode transcribe manifest.jsonl --config configs/ctc-greedy.yaml batch.max_seconds=60 --out out/x
      asrdecode score --ref data/demo/real/manifest.jsonl --hyp out/demo/transcripts.jsonl
      asrdecode info data/models/demo_ctc_bpe.nemo
    """


def _report_table(report: dict) -> Table:
    table = Table(title="asrdecode report", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")  # a long path folds onto more lines, never cut

    def fmt(v, spec="{:.2f}"):
        return "-" if v is None else spec.format(v)

    table.add_row("input", f"{report['input']} ({report['input_kind']})")
    table.add_row("model / decoder", f"{report['model']} / {report['decoder']}")
    table.add_row("device", report["device"])
    table.add_row(
        "utterances",
        f"{report['utterances']} total, {report['decoded_this_run']} decoded now, "
        f"{report['resumed']} resumed, {report['failed']} failed"
        + (f", {report['segmented']} long ones in segments" if report.get("segmented") else ""),
    )
    table.add_row("audio (this run)", f"{report['audio_hours_this_run'] * 3600:.1f} s")
    if report.get("wer") is not None:
        table.add_row(
            "WER / CER",
            f"{report['wer'] * 100:.2f}% / {report['cer'] * 100:.2f}% "
            f"({report['scored_utterances']} utterances)",
        )
    table.add_row("RTFx (wall, warm)", fmt(report.get("rtfx"), "{:.1f}"))
    per = report.get("rtfx_per_stage", {})
    secs = report.get("stage_seconds", {})
    stages = [
        "model: in decode"  # deferred scores: each search worker scores its utterance
        if k == "model" and report.get("scores_deferred")
        else f"{k} {fmt(per.get(k), '{:.0f}')} ({secs.get(k, 0):.2f}s)"
        for k in per
    ]
    table.add_row("RTFx per stage", ", ".join(stages))
    for w in report.get("workers") or []:
        table.add_row(
            f"worker {w['worker']}",
            f"{w['shards']} shards, {w['utterances']} utts, {w['audio_seconds']:.1f} s audio, "
            f"RTFx {fmt(w.get('rtfx'), '{:.1f}')}, peak {fmt(w.get('peak_memory_mb'), '{:.0f}')} MB",
        )
    memory = f"{report['peak_memory_mb']:.0f} MB"
    if report.get("peak_memory_mb_total") is not None:
        memory = (
            f"{report['peak_memory_mb_total']:.0f} MB ({report['peak_memory_mb']:.0f} MB the driver, "
            f"{report['peak_memory_mb_workers']:.0f} MB its workers)"
        )
    table.add_row("peak memory", memory)
    table.add_row("config hash", report["config_hash"])
    return table


def read_boost_file(path: Path) -> dict[str, float]:
    """`word [score]` per line (# comments allowed) -> {word: score}; errors name file:line."""
    from asrdecode.errors import InputError

    if not path.is_file():
        raise InputError(f"{path}: boost file not found")
    table: dict[str, float] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        if len(parts) > 2:
            raise InputError(f"{path}:{number}: expected `word [score]`, got {line.strip()!r}")
        try:
            table[parts[0]] = float(parts[1]) if len(parts) == 2 else 5.0
        except ValueError:
            raise InputError(f"{path}:{number}: score {parts[1]!r} is not a number") from None
    return table


@main.command()
@click.argument("input_path", metavar="INPUT", type=PATH)
@click.argument("overrides", nargs=-1, metavar="[KEY.PATH=VALUE]...")
@path_option(
    "--out",
    "out_dir",
    help="Output folder (results are appended as they come); for a single audio file, FILE.asrdecode "
    "beside it by default.",
)
@path_option("--config", "config_file", help="YAML config (see configs/).")
@click.option("--model", help="Shortcut for model.path=... (a .nemo file or embedded:<name>).")
@click.option("--decoder", help="Shortcut for decoder.type=... (e.g. ctc-greedy).")
@click.option("--device", help="Shortcut for device=... (auto, cpu, cuda, cuda:N).")
@click.option(
    "--language",
    help="The language spoken (e.g. en, de): a Canary model transcribes in it (model.source_lang and "
    "model.target_lang); the English setups take en.",
)
@path_option(
    "--boost",
    "boost_file",
    help="Word boosting for WFST decoders: a file of `word [score]` lines (score 5.0 if omitted).",
)
@click.option("--overwrite", is_flag=True, help="Start fresh instead of resuming into --out.")
@click.option("--strict", is_flag=True, help="Stop at the first unreadable input instead of skipping it.")
@click.option(
    "--save-logprobs",
    is_flag=True,
    help="Also write model log-probs (.npy + logprobs.json) for decoder-only runs.",
)
@click.option(
    "--subtitles",
    help="Shortcut for output.subtitles=...: srt, vtt or srt,vtt (subtitles/<utt>.<fmt> from word times).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    help="Shortcut for engine.type=...: decode in this process, or in worker actors on Ray.",
)
@click.option("--address", help="Shortcut for engine.address=... (ray: auto or ray://host:port).")
@click.option("--workers", type=int, help="Shortcut for engine.workers=N (ray worker actors).")
@click.option("--gpus-per-worker", type=float, help="Shortcut for engine.gpus_per_worker=G.")
@click.option("--print-config", is_flag=True, help="Print the merged config and exit.")
@path_option(
    "--log-file",
    help="Also write the run's events (status, progress, skipped files, report) as JSON lines.",
)
@debug_option
@paused_while_loading()
def transcribe(
    input_path,
    log_file,
    boost_file,
    overrides,
    out_dir,
    config_file,
    model,
    decoder,
    device,
    language,
    overwrite,
    strict,
    save_logprobs,
    subtitles,
    engine,
    address,
    workers,
    gpus_per_worker,
    print_config,
    debug,
) -> None:
    """Transcribe an audio folder, JSONL manifest, Kaldi data dir or saved log-probs folder.

    \b
    INPUT is one of:
      a folder of audio (recursive: wav, flac, ogg, mp3, m4a, webm, mp4, ...)
      a NeMo-style JSONL manifest (audio_filepath, duration, text?, offset?, boost?)
      a Kaldi data dir (wav.scp, text?, segments?)
      a folder written by --save-logprobs (runs only the decoder)
    With no --config and no --model, audio is transcribed as English with the default setup
    (hama's phoneme CTC model, a graph built into the cache on first use, pocketsphinx's full
    trigram applied on the fly by wfst-otf; see --print-config; --model embedded:sphinx-en-us for
    pocketsphinx's HMM instead). Any config key can be overridden as
    KEY.PATH=VALUE (e.g. batch.max_seconds=60). Rerunning into the same --out resumes;
    --overwrite starts again.

    \b
    Examples:
      asrdecode transcribe my_recordings/ --out out/real
      asrdecode transcribe my_recordings/ --decoder let --out out/let
      asrdecode transcribe my_videos/ --subtitles srt,vtt --out out/subs
      asrdecode transcribe syn/manifest.jsonl --model embedded:demo_ctc_bpe --save-logprobs --out out/syn
      asrdecode transcribe out/syn/logprobs --decoder ctc-greedy --out out/syn-redecode
      asrdecode transcribe my_recordings/ --engine ray --workers 4 --out out/ray
    """
    from asrdecode.config import DEFAULT_SETUP, build_config, config_to_yaml, setup_of

    items = list(overrides)
    if model:
        items.append(f"model.path={model}")
    if decoder:
        items.append(f"decoder.type={decoder}")
    if device:
        items.append(f"device={device}")
    if save_logprobs:
        items.append("output.save_logprobs=true")
    if subtitles is not None:
        items.append(f"output.subtitles={subtitles}")
    if boost_file:
        items.append(f"decoder.boost={json.dumps(read_boost_file(boost_file))}")
    for key, value in (
        ("engine.type", engine),
        ("engine.address", address),
        ("engine.workers", workers),
        ("engine.gpus_per_worker", gpus_per_worker),
    ):
        if value is not None:
            items.append(f"{key}={value}")
    setup = setup_of(config_file, items, input_path)
    if language is not None:
        items += language_items(language, setup or config_file)
    cfg = build_config(config_file, items, setup=setup)
    if print_config:
        if setup is not None:
            what = "the default setup" if setup == DEFAULT_SETUP else "the model's own setup"
            out_console.print(
                f"# {what} ({setup}; --model or --config to change)",
                highlight=False,
                soft_wrap=True,
            )
        out_console.print(config_to_yaml(cfg), highlight=False, end="")
        return
    if out_dir is None:
        out_dir = default_out(input_path)

    from asrdecode.pipeline import Transcriber

    progress = Progress(
        TextColumn("[bold]transcribing"),
        BarColumn(),
        TextColumn("{task.fields[utts]} utts"),
        TextColumn("{task.fields[audio]} s audio"),
        TextColumn("RTFx {task.fields[rtfx]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = None

    from asrdecode.io.writers import JsonLog

    log = JsonLog(log_file)
    log.write("start", input=str(input_path), out=str(out_dir), config=cfg.to_dict())

    def on_progress(event: dict) -> None:
        nonlocal task
        log.write("progress", **event)
        rtfx = f"{event['audio_seconds'] / event['elapsed']:.1f}" if event["elapsed"] > 0 else "-"
        # the bar (and its time left) in audio seconds when the inputs' lengths are known
        total, done = event.get("audio_total") or 0.0, event["audio_seconds"]
        if not total:
            total, done = event["total"], event["done"]
        fields = {
            "utts": f"{event['done']}/{event['total']}",
            "audio": f"{event['audio_seconds']:.0f}/{event.get('audio_total') or 0:.0f}",
            "rtfx": rtfx,
        }
        if task is None:
            task = progress.add_task("decode", total=total, **fields)
        progress.update(task, total=total, completed=min(done, total), **fields)

    def on_error(utt_id: str, message: str) -> None:
        log.write("skipped", utt_id=utt_id, message=message)
        say(progress.console, "[yellow]skipped[/] ", f"{utt_id}: {message}")

    def on_status(message: str) -> None:
        log.write("status", message=message)
        say(progress.console, "[dim]", message)

    runner = Transcriber(
        cfg,
        input_path,
        out_dir,
        overwrite=overwrite,
        strict=strict,
        on_progress=on_progress,
        on_error=on_error,
        on_status=on_status,
    )
    with log, progress:
        report = runner.run()
        log.write("report", **report)
    out_console.print(_report_table(report))
    if runner.inputs.kind == "file":  # one recording: its transcript here too
        for row in runner.writer.read_records():
            say(out_console, "[bold]transcript:[/] ", row["pred_text"])
    say(out_console, "", f"results in {out_dir}/ ({', '.join(written_files(out_dir))})")


def language_items(language: str, setup: str | Path | None) -> list[str]:
    """The settings of ``--language``: none for English with an English setup (``setup``: the
    packaged setup or config file the run starts from, English when named ``*en-us*``), else the
    prompt languages of a model that takes them (Canary: transcribe in that language; any other
    model refuses them in one line before it loads)."""
    from asrdecode.errors import ConfigError

    code = language.strip()
    if setup is not None and "en-us" in Path(str(setup)).name:
        if code.lower().replace("_", "-") in ("en", "en-us"):
            return []
        raise ConfigError(
            f"--language {code}: {setup} transcribes English (en) only; another language needs a model "
            f"that takes one, a Canary .nemo checkpoint (--model CANARY.nemo --language {code}; "
            "docs/models.md)"
        )
    return [f"model.source_lang={code}", f"model.target_lang={code}"]


def default_out(input_path: Path) -> Path:
    """The output folder when --out is not given: FILE.asrdecode beside a single audio file;
    any other input needs --out."""
    from asrdecode.io.manifests import AUDIO_EXTENSIONS

    if input_path.is_file() and input_path.suffix.lower() in AUDIO_EXTENSIONS:
        return input_path.with_name(input_path.name + ".asrdecode")
    raise click.UsageError("--out DIR is required (it is optional for a single audio file)")


def written_files(out_dir: Path) -> list[str]:
    """The result files and folders a run left in `out_dir`, in a fixed order."""
    names = ["transcripts.jsonl", "text", "hyp.ctm", "segments.jsonl", "errors.jsonl", "report.json"]
    names.append("stale.jsonl")
    folders = ["lattices", "subtitles", "logprobs"]
    found = [n for n in names if (out_dir / n).is_file()]
    return found + [f"{f}/" for f in folders if (out_dir / f).is_dir()]


@main.command()
@path_option(
    "--ref",
    "ref_path",
    required=True,
    help="References: Kaldi text (utt words...) or JSONL with 'text'.",
)
@path_option(
    "--hyp",
    "hyp_path",
    required=True,
    help="Hypotheses: Kaldi text or JSONL with 'pred_text' (e.g. transcripts.jsonl).",
)
@click.option("--worst", default=5, show_default=True, help="Show the N worst utterances with alignments.")
@click.option("--keep-case", is_flag=True, help="Do not lowercase before scoring.")
@click.option("--keep-punctuation", is_flag=True, help="Do not strip punctuation before scoring.")
@click.option("--per-utt", is_flag=True, help="Print one line per utterance.")
@path_option("--json", "json_out", help="Also write the full score report as JSON.")
@path_option(
    "--compare",
    "compare_path",
    help="A second run's hypotheses: both are scored and compared utterance by utterance, with a "
    "paired bootstrap interval of the WER difference.",
)
@path_option(
    "--plot",
    "plot_path",
    help="Write the per-utterance WER distribution of the run(s) as a plot (.png or .svg).",
)
@debug_option
def score(
    ref_path, hyp_path, worst, keep_case, keep_punctuation, per_utt, json_out, compare_path, plot_path, debug
) -> None:
    """Score hypotheses against references: WER, CER, substitutions/deletions/insertions.

    \b
    Examples:
      asrdecode score --ref data/demo/real/manifest.jsonl --hyp out/real/transcripts.jsonl --worst 3
      asrdecode score --ref REF --hyp out/a/transcripts.jsonl --compare out/b/transcripts.jsonl --plot wer.png
    """
    from asrdecode.scoring import compare_paired, read_transcripts
    from asrdecode.scoring import score as run_score

    refs = read_transcripts(ref_path, field="text")
    runs = {str(hyp_path): read_transcripts(hyp_path, field="pred_text")}
    if compare_path is not None:
        runs[str(compare_path)] = read_transcripts(compare_path, field="pred_text")
    options = {"lowercase": not keep_case, "remove_punctuation": not keep_punctuation}
    reports = {name: run_score(refs, hyps, **options) for name, hyps in runs.items()}
    report = reports[str(hyp_path)]
    d = report.to_dict()
    table = Table(title=f"vs {ref_path}", show_header=True, title_justify="left")
    for col in ("hypotheses", "WER", "CER", "sub", "del", "ins", "ref words", "utts", "missing hyps"):
        table.add_column(col, justify="right")
    for name, r in reports.items():
        rd = r.to_dict()
        table.add_row(
            name,
            f"{rd['wer'] * 100:.2f}%",
            f"{rd['cer'] * 100:.2f}%",
            str(rd["substitutions"]),
            str(rd["deletions"]),
            str(rd["insertions"]),
            str(rd["ref_words"]),
            str(rd["utterances"]),
            str(len(rd.get("missing", []))),
        )
    out_console.print(table)
    per_run = {name: {u["utt_id"]: u for u in r.to_dict()["per_utterance"]} for name, r in reports.items()}
    if compare_path is not None:
        paired = compare_paired(report, reports[str(compare_path)])
        out_console.print(paired.summary(str(hyp_path), str(compare_path)), highlight=False)
        d["compared_with"] = {"hypotheses": str(compare_path), **paired.to_dict()}
    if plot_path is not None:
        from asrdecode.bench.plots import plot_wer_distributions

        plot_wer_distributions(
            {name: [u["wer"] for u in utts.values()] for name, utts in per_run.items()},
            Path(plot_path),
            caption=f"references: {ref_path}",
        )
        say(out_console, "", f"plot in {plot_path}")
    if per_utt:
        for line in d["per_utterance"]:
            out_console.print(
                f"{line['utt_id']}\tWER {line['wer'] * 100:.1f}%\tref: {line['ref']}\thyp: {line['hyp']}",
                highlight=False,
            )
    if worst > 0:
        for text in report.worst(worst):
            out_console.print(text, highlight=False)
    if json_out:
        Path(json_out).write_text(json.dumps(d, indent=2))


@main.command()
@click.argument("path", type=PATH, required=False)
@debug_option
def info(path: Path | None, debug: bool) -> None:
    """Describe a model (.nemo / embedded:NAME), a graph folder, an n-gram LM (ARPA, pocketsphinx
    .lm.bin) or a data set (folder, manifest, Kaldi dir, log-probs); with no PATH, the default
    setup of `transcribe` and its cache.

    \b
    Examples:
      asrdecode info
      asrdecode info embedded:demo_ctc_bpe
      asrdecode info data/demo/real
      asrdecode info data/lm/sphinx-en-us-72k.arpa.gz
    """
    from asrdecode.info import describe, describe_default_setup

    facts = describe(str(path)) if path is not None else describe_default_setup()
    title = str(path) if path is not None else "default setup of transcribe (no --config, no --model)"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in facts.items():
        table.add_row(key, value if isinstance(value, str) else json.dumps(value))
    out_console.print(table)


@contextmanager
def build_progress():
    """A rich display of a graph build: the running stage with a spinner and its elapsed time, then
    one line per finished stage with its seconds (on stderr; plain lines when not a terminal)."""
    from asrdecode.graph.stages import finished_line

    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    )
    tasks: dict[str, int] = {}

    def on_stage(name: str, event: str, seconds: float) -> None:
        if event == "start":
            tasks[name] = progress.add_task(f"graph build: {name}", total=None)
        else:
            progress.remove_task(tasks.pop(name))
            progress.console.print(finished_line(name, seconds), highlight=False)

    with progress:
        yield on_stage


@main.command("build-graph")
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@path_option("--config", "config_file", help="YAML (see configs/graph/).")
@path_option("--out", "out_dir", required=True, help="Graph folder to write.")
@click.option("--force", is_flag=True, help="Rebuild even if the cached inputs and config match.")
@debug_option
def build_graph_cmd(overrides, config_file, out_dir, force, debug) -> None:
    """Build a decoding graph: TLG (CTC models) or HCLG (HMM models) from an ARPA LM + lexicon.

    \b
    Writes graph.pt and graph.safetensors (asrdecode's device format; `format=pt|safetensors|both`),
    TLG.fst/HCLG.fst (OpenFst), words.txt, units.txt and meta.json. The folder is replaced as a
    whole when the build succeeds. Building is cached by the checksums of its inputs and config.
    \b
    Examples:
      asrdecode build-graph --config configs/graph/demo-ctc-bpe-tlg.yaml --out out/graphs/demo
      asrdecode build-graph --config configs/graph/demo-tlg.yaml topology=normal --out out/graphs/n
    """
    from asrdecode.graph import build_graph
    from asrdecode.graph.cache import load_graph_config

    cfg = load_graph_config(config_file, overrides)
    with build_progress() as on_stage:
        meta = build_graph(cfg, out_dir, force=force, on_stage=on_stage)
    table = Table(title=f"graph {out_dir}", show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("cached", str(meta.get("cached", False)))
    for key in ("kind", "topology", "sizes", "seconds", "dropped_lexicon_words"):
        if key in meta:
            value = meta[key]
            table.add_row(key, value if isinstance(value, str) else json.dumps(value))
    out_console.print(table)


@main.group(cls=_Group)
def bench() -> None:
    """Benchmarks: decoders against their peers on the same audio."""


# The benchmark programs of asrdecode.bench: command -> (module, one-line summary). Each module's
# `main(argv)` parses its own options (`asrdecode bench NAME --help`), prints a table and writes JSON.
BENCHMARKS = {
    "wfst": ("wfst_decode", "`wfst` vs kaldi-decoder and flashlight-text on the same graphs and log-probs."),
    "wfst-otf": ("wfst_otf", "`wfst-otf` (small graph + big LM on the fly) vs `wfst` on the big graph."),
    "let": ("let_decode", "`let` vs `wfst-otf` and `wfst` on the same graphs, LMs and log-probs."),
    "wfst-ops": ("wfst_torch_ops", "Torch operations per frame of the `wfst` torch backend."),
    "gpu": ("gpu", "Every decoder on cuda vs the CPU: RTFx, launches and syncs per frame, GPU memory."),
    "lm-backoff": ("lm_backoff", "An LM's backoff read exactly vs as G's cheapest paths; wfst-otf vs wfst."),
    "lattice-scaling": ("lattice_scaling", "Lattice decoding time against input length."),
    "transducer-greedy": ("transducer_greedy", "Transducer greedy decoding vs NeMo's (NeMo's own venv)."),
    "transducer-beam": ("transducer_beam", "Transducer beam search vs NeMo's (NeMo's own venv)."),
    "ctc-beam": ("ctc_beam", "CTC beam search (with a token LM) vs NeMo's beam_batch (NeMo's own venv)."),
    "aed": ("aed_decode", "AED (Canary) greedy and beam search vs NeMo's generators (NeMo's own venv)."),
    "graph-build": ("build_graph", "`asrdecode build-graph` vs Kaldi's recipe: time, memory, size."),
    "first-use": ("first_use", "The first run of the default setup: graph build, then transcription."),
    "long-audio": ("long_audio", "Time and peak memory of 10, 30 and 60-minute inputs."),
    "ray-scaling": ("ray_scaling", "The Ray engine against a local run."),
    "sphinx-scoring": ("sphinx_scoring", "The sphinx HMM's scoring and search time per stage."),
    "real-speech": ("real_speech", "WER and RTFx on every real set, asrdecode vs pocketsphinx."),
    "diagnose-pocketsphinx": (
        "diagnose_pocketsphinx",
        "Per utterance: pocketsphinx's words scored in our model, search error or model difference.",
    ),
}


def _bench_program(name: str, module: str, summary: str) -> None:
    @bench.command(
        name,
        help=f"{summary} Options: asrdecode bench {name} --help.",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def run(args: tuple[str, ...]) -> None:
        import importlib

        program = importlib.import_module(f"asrdecode.bench.{module}")
        sys.argv[0] = f"asrdecode bench {name}"  # argparse's program name
        sys.exit(program.main(list(args)) or 0)


for _name, (_module, _summary) in BENCHMARKS.items():
    _bench_program(_name, _module, _summary)


@bench.command("sweep")
@click.option(
    "--setup",
    "setup_name",
    type=click.Choice(["real", "demo"]),
    default="real",
    show_default=True,
    help="real: the sphinx model's decoders vs pocketsphinx; demo: the demo neural models' decoders.",
)
@path_option("--manifest", help="Another set (default: the setup's).")
@click.option("--systems", help="Comma-separated system names to run (default: all of the setup).")
@path_option("--out", "out_dir", help="Default: out/bench/sweep-SETUP.")
@click.option("--nemo-python", help="A Python with NeMo installed: runs the NeMo peers (demo setup).")
@debug_option
def bench_sweep(
    setup_name: str,
    manifest: Path | None,
    systems: str | None,
    out_dir: Path | None,
    nemo_python: str | None,
    debug: bool,
) -> None:
    """WER against RTFx for every decoder of a setup and its peer, one point per beam.

    Writes sweep.json (every point, per-utterance hypotheses), sweep.md (a table) and sweep.png /
    sweep.svg (WER vs RTFx, log scale, the set, machine, date and load in the caption). Run it on a
    quiet machine: the load average is recorded.

    \b
    Example:
      asrdecode bench sweep --setup real --out out/bench/real
    """
    from asrdecode.bench.sweep import SETUPS, sweep

    setup = SETUPS[setup_name]
    names = [s.strip() for s in systems.split(",")] if systems else None
    out_dir = out_dir or Path("out/bench") / f"sweep-{setup_name}"
    total = sum(
        len(s.values)
        for s in setup.systems
        if (names is None or s.name.split(" (")[0] in names) and (s.peer != "nemo" or nemo_python)
    )
    progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)  # fmt: skip

    with progress:
        task = progress.add_task("points", total=total)

        def on_point(p) -> None:
            progress.console.print(
                f"{p.system:<40} {p.setting:<14} WER {p.wer * 100:5.1f}%  RTFx {p.rtfx:7.2f}", highlight=False
            )
            progress.advance(task)

        sweep(setup, out_dir, manifest, names, on_point, nemo_python)
    say(out_console, "", f"results in {out_dir}/ (sweep.json, sweep.md, sweep.png, sweep.svg)")


@main.command("convert-graph")
@click.argument("fst", type=PATH)
@click.argument("words", type=PATH)
@path_option("--out", "out_dir", required=True, help="Graph folder to write.")
@path_option("--tid2pdf", help="Kaldi transition-id -> pdf map (show-transitions).")
@path_option("--units", help="Optional units.txt to copy beside the graph.")
@click.option(
    "--format",
    "save_format",
    type=click.Choice(["pt", "safetensors", "both"]),
    default="both",
    show_default=True,
    help="Device-format files to write: graph.pt, graph.safetensors or both.",
)
@debug_option
def convert_graph_cmd(fst, words, out_dir, tid2pdf, units, save_format, debug) -> None:
    """Convert an existing OpenFst TLG/HCLG (vector or const) into asrdecode's graph format.

    \b
    Examples:
      asrdecode convert-graph TLG.fst words.txt --out out/graphs/riva
      asrdecode convert-graph HCLG.fst words.txt --tid2pdf transitions.txt --out out/graphs/kaldi
    """
    from asrdecode.graph import convert_openfst_graph

    convert_openfst_graph(fst, words, out_dir, tid2pdf=tid2pdf, units_txt=units, save_format=save_format)
    from asrdecode.graph import describe_graph

    for key, value in describe_graph(out_dir).items():
        say(out_console, "", f"{key}: {value}")


if __name__ == "__main__":
    main()
