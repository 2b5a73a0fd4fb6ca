"""Media containers libsndfile cannot open (M4A, WebM, Matroska, MP4 video), read by FFmpeg through
PyAV: the same samples as libsndfile reads from a WAV of the same 16-bit samples where the codec is
lossless, spans equal to slices of the whole read, lossy codecs aligned with their input, and
one-line errors for what cannot be read."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
import torch

from asrdecode.audio.containers import SEEK_PREROLL_SECONDS, ContainerAudio, encode_audio
from asrdecode.audio.loading import audio_blocks, load_audio, resample
from asrdecode.errors import AudioError
from asrdecode.io.manifests import AUDIO_EXTENSIONS, Utterance, probe_duration, read_audio_folder

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000


def real_speech(seconds: float, channels: int = 1) -> np.ndarray:
    """data/demo/real's clips joined to `seconds`, as 16-bit samples scaled to float32 ``[n, c]``
    (the second channel at half level)."""
    clips = [sf.read(p, dtype="int16")[0] for p in sorted(glob.glob(str(ROOT / "data/demo/real/*.wav")))]
    mono = np.resize(np.concatenate(clips), int(seconds * RATE))
    both = np.stack([mono, mono // 2], axis=1)[:, :channels]
    return both.astype(np.float32) / 32768


def write(path: Path, samples: np.ndarray, codec: str | None = None) -> Path:
    encode_audio(str(path), [samples[i : i + 40000] for i in range(0, len(samples), 40000)], RATE, codec)
    return path


@pytest.mark.parametrize(("name", "codec"), [("speech.m4a", "alac"), ("speech.mka", None)])
@pytest.mark.parametrize("channels", [1, 2])
def test_lossless_containers_give_libsndfiles_samples(tmp_path, name, codec, channels):
    """ALAC in M4A and 16-bit PCM in Matroska (millisecond timestamps) hold the WAV's samples:
    read whole, down-mixed or one channel, and as a span (a seek in M4A), bit for bit."""
    samples = real_speech(7.3, channels)
    sf.write(tmp_path / "speech.wav", samples, RATE, subtype="PCM_16")
    media = write(tmp_path / name, samples, codec)
    assert 0 <= probe_duration(media) - len(samples) / RATE <= 1.001e-3  # Matroska: a tick over
    for channel in [None, *range(channels)]:
        for offset, duration in [(0.0, None), (0.2, 1.5), (3.1, 2.0), (6.0, None)]:
            span = {"offset": offset, "duration": duration, "channel": channel}
            want, _ = load_audio(Utterance("u", str(tmp_path / "speech.wav"), **span))
            got, rate = load_audio(Utterance("u", str(media), **span))
            assert rate == RATE and np.array_equal(got, want), (channel, offset)


def test_a_seek_lands_where_decoding_from_the_start_would(tmp_path, monkeypatch):
    """AAC (lossy, with priming) in M4A: a span read after a seek is the same span of the whole
    decode, in place (no lag). The samples are equal but for the noise that AAC's noise substitution
    draws from a generator the whole decode has run longer (a few thousandths); the seek was used."""
    media = write(tmp_path / "memo.m4a", real_speech(12.0))
    whole, _ = load_audio(Utterance("u", str(media)))
    seeks: list[int] = []
    real_seek = av.container.InputContainer.seek

    def counted(self, offset, **kw):
        seeks.append(offset)
        return real_seek(self, offset, **kw)

    monkeypatch.setattr(av.container.InputContainer, "seek", counted)
    for offset in [0.1, 2.0, 3.0, 7.77, 11.5]:
        got, _ = load_audio(Utterance("u", str(media), offset=offset, duration=0.4))
        start = int(round(offset * RATE))
        assert len(got) == int(0.4 * RATE)
        assert np.abs(got - whole[start : start + len(got)]).max() < 5e-3, offset
    assert len(seeks) == 4  # not for the span within the pre-roll of the start
    assert SEEK_PREROLL_SECONDS < 2.0


def test_lossy_codecs_are_aligned_with_their_input(tmp_path):
    """AAC in M4A and Opus in WebM (48 kHz): the encoder's priming is dropped, so the decoded samples
    line up with the input (no lag) at a codec's signal-to-noise ratio, with its length."""
    samples = real_speech(5.0)[:, 0]
    for name, rate in [("memo.m4a", RATE), ("web.webm", 48000)]:
        got, got_rate = load_audio(Utterance("u", str(write(tmp_path / name, samples[:, None]))))
        assert got_rate == rate, name
        got = resample(torch.from_numpy(got), rate, RATE).numpy()
        assert abs(len(got) - len(samples)) <= 1024, name
        n = min(len(got), len(samples))
        noise = got[:n] - samples[:n]
        snr = 10 * np.log10(np.sum(samples[:n] ** 2) / np.sum(noise**2))
        assert snr > 15, (name, snr)


def test_a_long_container_is_read_in_blocks_as_a_wav_is(tmp_path, monkeypatch):
    """`audio_blocks` (the streamed reading of long inputs) over an M4A gives `load_audio`'s
    samples in blocks of READ_BLOCK_FRAMES, resampled as they come."""
    import asrdecode.audio.loading as loading

    monkeypatch.setattr(loading, "READ_BLOCK_FRAMES", 5000)
    media = write(tmp_path / "long.m4a", real_speech(40.0), codec="alac")
    utt = Utterance("u", str(media), duration=probe_duration(media))
    whole, _ = load_audio(utt, 8000)
    assert np.array_equal(np.concatenate(list(audio_blocks(utt, 8000))), whole)


def test_folders_list_containers(tmp_path):
    for name in ["a.m4a", "b.WEBM", "c.mp4"]:
        assert Path(name).suffix.lower() in AUDIO_EXTENSIONS
        write(tmp_path / name, real_speech(0.5), "alac" if name.endswith("mp4") else None)
    sf.write(tmp_path / "d.wav", real_speech(0.5), RATE)
    inputs = read_audio_folder(tmp_path)
    assert [u.utt_id for u in inputs.utterances] == ["a", "b", "c", "d"]
    durations = [u.duration for u in inputs.utterances]
    assert all(abs(d - 0.5) <= 0.03 for d in durations), durations  # AAC: a frame of priming


def video_without_sound(path: Path) -> Path:
    with av.open(str(path), "w", format="mp4") as out:
        video = out.add_stream("mpeg4", rate=10)
        video.width, video.height, video.pix_fmt = 32, 32, "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
    return path


def test_unreadable_containers_are_one_line_errors(tmp_path):
    """Each failure is one AudioError naming the file: not media, cut in half, no sound track, a
    playlist (refused: FFmpeg may read local files only, with the demuxers of single files)."""
    memo = write(tmp_path / "memo.m4a", real_speech(3.0)).read_bytes()
    (tmp_path / "half.m4a").write_bytes(memo[: len(memo) // 2])
    (tmp_path / "notes.m4a").write_text("not audio\n")
    (tmp_path / "list.m4a").write_text("#EXTM3U\n#EXTINF:10,\nhttp://127.0.0.1:9/a.ts\n#EXT-X-ENDLIST\n")
    (tmp_path / "list.m3u8").write_text((tmp_path / "list.m4a").read_text())
    (tmp_path / "noise.xyz").write_bytes(bytes(range(256)) * 8)
    video_without_sound(tmp_path / "film.mp4")
    expected = {
        "half.m4a": "truncated or corrupt",
        "notes.m4a": "not a media file",
        "list.m4a": "not a media file",
        "list.m3u8": "format not recognised",
        "noise.xyz": "format not recognised",
        "film.mp4": "no audio stream",
    }
    for name, problem in expected.items():
        with pytest.raises(AudioError) as err:
            load_audio(Utterance("u", str(tmp_path / name)))
        message = str(err.value)
        assert message.startswith(f"{tmp_path / name}: ") and problem in message and "\n" not in message


def test_the_reader_closes_its_file_on_a_failed_open(tmp_path):
    video = video_without_sound(tmp_path / "film.mp4")
    with pytest.raises(ValueError, match="no audio stream"):
        ContainerAudio(str(video))


def test_cli_transcribes_containers_as_their_wavs(tmp_path):
    """The default setup over a folder: a long recording as WAV and as lossless M4A (read as its
    segments are cut: streamed), and a short clip as WAV, ALAC, AAC and Opus. The lossless copies
    give the WAVs' words and times; the lossy ones are transcribed too; nothing fails."""
    from helpers.cli import read_jsonl, run

    gap = np.zeros((int(1.2 * RATE), 1), np.float32)
    clips = [
        sf.read(ROOT / "data/demo/real" / f"{name}.wav", dtype="int16", always_2d=True)[0] / np.float32(32768)
        for name in ["ps_goforward", "ps_tidigits_dhd.2934z", "ps_cards_001"]
    ]
    long = np.concatenate([part for clip in clips for part in (clip, gap)]).astype(np.float32)
    folder = tmp_path / "in"
    folder.mkdir()
    sf.write(folder / "long.wav", long, RATE, subtype="PCM_16")
    write(folder / "long.m4a", long, "alac")
    sf.write(folder / "clip.wav", clips[0], RATE, subtype="PCM_16")
    write(folder / "clip_alac.m4a", clips[0], "alac")
    write(folder / "clip_aac.m4a", clips[0])
    write(folder / "clip_opus.webm", clips[0])
    run("transcribe", str(folder), "batch.segment_seconds=4", "--out", str(tmp_path / "out"))
    words = {r["utt_id"]: r["words"] for r in read_jsonl(tmp_path / "out" / "transcripts.jsonl")}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["failed"] == 0 and report["segmented"] == 2
    assert words["long-m4a"] == words["long-wav"] and len(words["long-wav"]) > 5
    assert words["clip_alac"] == words["clip"]
    assert words["clip_aac"] and words["clip_opus"]


def test_raw_streams_are_counted_not_estimated(tmp_path):
    """A raw AAC (ADTS) stream has no length but FFmpeg's estimate from its bitrate (off either way:
    0.9 s short on a 48 s file, which cut its end off; too long, a file reads as truncated): its
    samples are counted; spans of it are decoded from the start
    (a raw stream seeks by bytes), the same samples as the whole read."""
    samples = real_speech(20.0)
    raw = tmp_path / "memo.aac"
    with av.open(str(raw), "w", format="adts") as out:
        stream = out.add_stream("aac", rate=RATE, layout="mono")
        pcm = np.round(samples[:, 0] * 32768).astype(np.int16)[None]
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate, frame.pts = RATE, 0
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with av.open(str(raw)) as c:
        estimate = c.duration / 1e6
    whole, _ = load_audio(Utterance("u", str(raw)))
    assert len(whole) >= len(samples) and abs(estimate * RATE - len(whole)) > 100  # not the length
    assert probe_duration(raw) == len(whole) / RATE
    for offset in [1.0, 9.5, 18.0]:
        got, _ = load_audio(Utterance("u", str(raw), offset=offset, duration=1.5))
        start = int(round(offset * RATE))
        assert np.array_equal(got, whole[start : start + len(got)]) and len(got) == int(1.5 * RATE)


def test_info_counts_the_formats_of_a_folder(tmp_path):
    """`asrdecode info` on a folder names each file's format as the library that reads it does,
    with its rate and channels, counted (an unreadable file too)."""
    from asrdecode.info import describe_dataset

    speech = real_speech(0.5)
    sf.write(tmp_path / "a.wav", speech, RATE, subtype="PCM_16")
    sf.write(tmp_path / "b.wav", speech, RATE, subtype="PCM_16")
    write(tmp_path / "c.m4a", real_speech(0.5, channels=2))
    (tmp_path / "d.mp4").write_text("not a video")
    formats = describe_dataset(str(tmp_path))["audio formats"]
    assert formats == "WAV PCM_16, 16000 Hz, 1 ch: 2; mov aac, 16000 Hz, 2 ch: 1; unreadable: 1"
