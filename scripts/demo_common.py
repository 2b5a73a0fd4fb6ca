"""Shared helpers for the demo-data scripts: text sources, held-out split, TTS voices, audio I/O.

Everything here is deterministic given a seed, so the scripts that use it can be rerun by anyone
and produce the same sentence lists, voice choices and held-out split.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
CACHE = DATA / "cache"
SAMPLE_RATE = 16000

PS_VERSION = "5.1.1"
APT_TOOLS = {"flite": "flite", "espeak-ng": "espeak-ng", "sox": "sox", "bible": "bible-kjv"}

# ---------------------------------------------------------------------------------------------
# environment checks and downloads


def require_tools(tools: Iterable[str] = APT_TOOLS) -> None:
    """Exit with a clear message when a command-line tool from a Debian package is missing."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(sorted({APT_TOOLS[t] for t in missing}))
        sys.exit(
            f"missing command(s): {', '.join(missing)}\n"
            f"install them with:  apt-get update && apt-get install -y {pkgs}"
            + (" bible-kjv-text" if "bible" in missing else "")
        )


def pocketsphinx_sdist(cache: Path = CACHE) -> Path:
    """Download (once) and unpack the pocketsphinx sdist; return the unpacked source root.

    Only the sdist is fetched (`--no-binary pocketsphinx`; its build tools may come as wheels),
    it is never built or installed.
    """
    root = cache / f"pocketsphinx-{PS_VERSION}"
    if (root / "test" / "data" / "goforward.raw").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"pocketsphinx-{PS_VERSION}.tar.gz"
    if not tarball.exists():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "pocketsphinx",
            "-d",
            str(cache),
            f"pocketsphinx=={PS_VERSION}",
        ]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if "/test/data/" in m.name or "/test/regression/" in m.name]
        tar.extractall(cache, members=members, filter="data")
    return root


# ---------------------------------------------------------------------------------------------
# text

_WORD_RE = re.compile(r"[a-z']+")


def normalize_text(text: str) -> str:
    """Lowercase; keep letters, apostrophes inside words and single spaces."""
    text = text.lower().replace("-", " ")
    words = [w.strip("'") for w in _WORD_RE.findall(text)]
    return " ".join(w for w in words if w)


def real_transcripts() -> set[str]:
    """Transcripts of the real demo clips: never used verbatim in synthetic data."""
    manifest = DATA / "demo" / "real" / "manifest.jsonl"
    fixed = {
        "go forward ten meters",
        "two nine three four zero",
        "ten of clubs",
        "four queen of clubs",
        "seven of clubs",
        "five five",
        "eight of spades four of clubs seven of hearts",
        "feels like these days go on forever",
        "he was not an ill disposed young man",
        "he might even have been made amiable himself",
    }
    if manifest.exists():
        fixed |= {json.loads(line)["text"] for line in manifest.read_text().splitlines() if line}
    return fixed


def split_of(text: str) -> str:
    """Held-out split by construction: a hash of the normalised sentence picks train/dev/test.

    About 2% of all possible sentences are "test" (data/demo/synthetic) and 2% "dev" (the
    training-time WER probe); training never sees either.
    """
    h = int.from_bytes(hashlib.sha1(text.encode()).digest()[:4], "little") % 100
    return "test" if h < 2 else "dev" if h < 4 else "train"


def kjv_clauses(min_words: int = 3, max_words: int = 12) -> list[str]:
    """Short clauses of the King James Bible (Debian bible-kjv), normalised, unique, in order."""
    require_tools(["bible"])
    out = subprocess.run(
        ["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True
    ).stdout
    seen: set[str] = set()
    clauses: list[str] = []
    for line in out.splitlines():
        verse = line.split(" ", 1)[1] if " " in line else ""
        for sent in re.split(r"[.;:?!()]", verse):
            pieces = [sent]
            if len(sent.split()) > max_words:
                pieces = sent.split(",")
            for piece in pieces:
                norm = normalize_text(piece)
                n = len(norm.split())
                if min_words <= n <= max_words and norm not in seen:
                    seen.add(norm)
                    clauses.append(norm)
    return clauses


DIGITS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
RANKS = [
    "ace",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "jack",
    "queen",
    "king",
]
SUITS = ["spades", "hearts", "clubs", "diamonds"]
TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
UNITS = ["meters", "feet", "steps", "yards", "miles", "inches", "degrees", "minutes", "seconds"]


def number_words(n: int) -> str:
    """0 <= n < 1000 as English words (no 'and')."""
    if n < 10:
        return DIGITS[0 if n == 0 else n + 1]
    if n < 20:
        return TEENS[n - 10]
    if n < 100:
        return TENS[n // 10 - 2] + ("" if n % 10 == 0 else " " + number_words(n % 10))
    rest = n % 100
    return number_words(n // 100) + " hundred" + ("" if rest == 0 else " " + number_words(rest))


def template_sentence(rng: random.Random) -> str:
    """A modern-English sentence with digits, card names, numbers or robot-style commands."""
    kind = rng.random()
    if kind < 0.3:  # digit strings, tidigits style
        return " ".join(rng.choice(DIGITS) for _ in range(rng.randint(3, 8)))
    if kind < 0.55:  # card names
        cards = [f"{rng.choice(RANKS)} of {rng.choice(SUITS)}" for _ in range(rng.randint(1, 3))]
        pre = rng.choice(["", "", "", "the ", "draw the ", "play the ", "i have the ", "discard the "])
        return normalize_text(pre + " ".join(cards))
    if kind < 0.8:  # motion commands
        verb = rng.choice(["go", "move", "turn", "walk", "drive", "step", "roll", "head"])
        dirn = rng.choice(
            ["forward", "back", "left", "right", "ahead", "north", "south", "east", "west", "up", "down"]
        )
        num = number_words(rng.choice([rng.randint(1, 20), rng.randint(1, 999)]))
        tail = rng.choice(["", "", " now", " please", " and stop", " then wait"])
        return f"{verb} {dirn} {num} {rng.choice(UNITS)}{tail}"
    # numbers inside short everyday sentences
    subj = rng.choice(
        [
            "the train leaves at",
            "meet me at",
            "the room number is",
            "call me at",
            "it costs",
            "we counted",
            "the answer is",
            "turn to page",
            "there were",
            "she was born in",
            "set the timer for",
        ]
    )
    return f"{subj} {number_words(rng.randint(0, 999))}"


def training_sentences(seed: int, n: int, exclude: set[str]) -> Iterator[tuple[str, str]]:
    """Yield (source, sentence) for training: KJV clauses mixed with ~25% template sentences.

    Held-out ("dev"/"test") sentences and the real-clip transcripts are skipped by construction.
    Sentences repeat only after the KJV pool is exhausted.
    """
    rng = random.Random(seed)
    kjv = [c for c in kjv_clauses() if split_of(c) == "train" and c not in exclude]
    rng.shuffle(kjv)
    k = 0
    produced = 0
    while produced < n:
        if rng.random() < 0.25:
            s = template_sentence(rng)
            if split_of(s) != "train" or s in exclude:
                continue
            yield "template", s
        else:
            yield "kjv", kjv[k % len(kjv)]
            k += 1
        produced += 1


def heldout_sentences(split: str, seed: int, n: int, exclude: set[str]) -> list[tuple[str, str]]:
    """n sentences of the given held-out split ("dev" or "test"), ~70% KJV, ~30% template."""
    rng = random.Random(seed)
    kjv = [c for c in kjv_clauses() if split_of(c) == split and c not in exclude]
    rng.shuffle(kjv)
    n_tpl = round(n * 0.3)
    tpl: list[str] = []
    while len(tpl) < n_tpl:
        s = template_sentence(rng)
        if split_of(s) == split and s not in exclude and s not in tpl:
            tpl.append(s)
    items = [("kjv", s) for s in kjv[: n - n_tpl]] + [("template", s) for s in tpl]
    rng.shuffle(items)
    return items


# ---------------------------------------------------------------------------------------------
# voices and synthesis

FLITE_VOICES = {"kal": 100.0, "kal16": 100.0, "rms": 100.0, "awb": 110.0, "slt": 170.0}
ESPEAK_VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-us-nyc"]
ESPEAK_VARIANTS = ["", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]


@dataclass
class Voice:
    """One TTS rendering setting (engine, voice, speed and pitch)."""

    engine: str  # "flite" | "espeak"
    name: str
    stretch: float = 1.0  # flite duration_stretch (>1 slower)
    f0: float = 0.0  # flite int_f0_target_mean (Hz), 0 = voice default
    speed: int = 175  # espeak words per minute
    pitch: int = 50  # espeak 0-99

    def tag(self) -> str:
        """Short human-readable id."""
        if self.engine == "flite":
            return f"flite:{self.name}:d{self.stretch:.2f}:f{self.f0:.0f}"
        return f"espeak:{self.name}:s{self.speed}:p{self.pitch}"


def random_voice(rng: random.Random, p_flite: float = 0.65) -> Voice:
    """Pick a voice with speed/pitch variety; flite is preferred (closer to natural speech)."""
    if rng.random() < p_flite:
        name = rng.choice(list(FLITE_VOICES))
        f0 = FLITE_VOICES[name] * rng.uniform(0.8, 1.25)
        return Voice("flite", name, stretch=round(rng.uniform(0.8, 1.3), 2), f0=round(f0))
    base = rng.choice(ESPEAK_VOICES)
    var = rng.choice(ESPEAK_VARIANTS)
    return Voice(
        "espeak", base + (f"+{var}" if var else ""), speed=rng.randint(130, 200), pitch=rng.randint(25, 75)
    )


def synthesize(text: str, voice: Voice, out_path: Path) -> float:
    """Render `text` with `voice` to a 16 kHz mono 16-bit file (wav/flac by suffix); return seconds."""
    with tempfile.TemporaryDirectory(prefix="tts_") as tmp:
        raw = Path(tmp) / "tts.wav"
        if voice.engine == "flite":
            cmd = [
                "flite",
                "-voice",
                voice.name,
                "-t",
                text,
                "-o",
                str(raw),
                "--setf",
                f"duration_stretch={voice.stretch}",
            ]
            if voice.f0 > 0:
                cmd += ["--setf", f"int_f0_target_mean={voice.f0}"]
        else:
            cmd = [
                "espeak-ng",
                "-v",
                voice.name,
                "-s",
                str(voice.speed),
                "-p",
                str(voice.pitch),
                "-w",
                str(raw),
                text,
            ]
        subprocess.run(cmd, check=True, capture_output=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        # resample, 16-bit mono, 0.15 s of silence each side so that no word touches the edge
        subprocess.run(
            [
                "sox",
                "-q",
                str(raw),
                "-r",
                str(SAMPLE_RATE),
                "-c",
                "1",
                "-b",
                "16",
                str(out_path),
                "pad",
                "0.15",
                "0.15",
            ],
            check=True,
            capture_output=True,
        )
    return float(sf.info(str(out_path)).duration)


def write_manifest(path: Path, rows: Iterable[dict]) -> None:
    """Write NeMo-style JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_manifest(path: Path) -> list[dict]:
    """Read NeMo-style JSON lines; audio paths are resolved against the manifest's folder."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            p = Path(row["audio_filepath"])
            row["audio_path"] = str(p if p.is_absolute() else path.parent / p)
            rows.append(row)
    return rows


def voice_dict(voice: Voice) -> dict:
    """Voice as a JSON-friendly dict."""
    return asdict(voice)
