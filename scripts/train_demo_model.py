#!/usr/bin/env python3
"""Train the small demo FastConformer-CTC (BPE) on synthetic speech, on CPU, within a time budget.

    .venv/bin/python scripts/train_demo_model.py --hours 8 --minutes 55     # end to end
    .venv/bin/python scripts/train_demo_model.py --eval-only                # WER of the saved model
    .venv/bin/python scripts/train_demo_model.py --arch rnnt --minutes 50 --threads 1   # RNN-T demo
    .venv/bin/python scripts/train_demo_model.py --arch tdt --minutes 50 --threads 1    # TDT demo
    .venv/bin/python scripts/train_demo_model.py --arch rnnt --minutes 70 --threads 1 --lr 1e-3 \
        --warmup 100 --init-transducer data/models/demo_rnnt_bpe.nemo          # train it further
    .venv/bin/python scripts/train_demo_model.py --overfit 16 --no-augment --threads 1 --lr 1e-3 \
        --max-steps 400 --eval-every 25 --work data/cache/overfit      # sanity check: WER -> 0?

`--overfit N` trains on the first N training utterances as one fixed batch and reports their own
greedy WER every --eval-every steps (stopping at 0 %); it writes no checkpoint and no .nemo.
`--no-augment` turns off the waveform augmentation and SpecAugment; `--work DIR` moves the
checkpoint/tokenizer folder (to run experiments side by side).

`--arch rnnt|tdt` trains a FastConformer transducer (NeMo EncDecRNNTBPEModel layout: LSTM prediction
network + joint) with torchaudio's rnnt_loss (RNN-T) or asrdecode.models.transducer_loss.tdt_loss
(TDT). Its encoder, front end and tokenizer are taken from --init-from (default: the embedded CTC
demo model), which is what lets it converge in well under an hour on one CPU thread. Checkpoints go
to data/cache/train_<arch>/, the model to data/models/demo_<arch>_bpe.nemo; WERs use greedy
label-looping transducer decoding. `--init-transducer X.nemo` instead continues a saved transducer:
all its weights (front end, encoder, prediction and joint networks, read with the safe .nemo loader)
and, from X.json, its steps, minutes, dev-WER history and segments, so the new sidecar records the
whole history; the optimiser starts afresh (a .nemo holds no Adam moments), hence a new warm-up, and
--minutes / --max-steps / the cosine schedule count from the start of this segment.

`--arch ctc --init-from X.nemo` with a transducer X puts a new CTC head (a 1x1 convolution over
X's vocabulary) on X's front end, encoder and tokenizer, the encoder trained at --encoder-lr-scale
(the way back: a CTC model from an RNN-T encoder).

End to end: synthesises the corpus if data/cache/synth holds less than --hours of audio
(scripts/make_synthetic_speech.py), trains a sentencepiece BPE tokenizer on the training
sentences, trains with torch's ctc_loss (noise/gain/reverb + SpecAugment-lite), checkpoints
every few minutes (data/cache/train/ckpt.pt, plus the .nemo so that a killed run leaves a usable
model), and at the end of the budget writes --out (.nemo) and its .json sidecar with held-out WERs
(greedy CTC on data/demo/synthetic and data/demo/real, measured on the reloaded .nemo).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import sentencepiece as spm
import soundfile as sf
import torch
import torch.nn.functional as F
import torchaudio.functional as AF

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_common import CACHE, DATA, REPO, SAMPLE_RATE, read_manifest  # noqa: E402

from asrdecode.models.ctc import NemoCTCModel  # noqa: E402
from asrdecode.models.tokenizer import WORD_START, Tokenizer  # noqa: E402
from asrdecode.models.transducer import NemoTransducerModel  # noqa: E402

SYNTH = CACHE / "synth"
WORK = CACHE / "train"  # the CTC run's folder; transducers use train_<arch>
DEFAULT_INIT = REPO / "asrdecode" / "assets" / "demo_ctc_bpe.nemo"
# torchaudio 2.9 marks rnnt_loss deprecated (maintenance phase) but keeps it; say it once, not per step
warnings.filterwarnings("once", message=".*rnnt_loss has been deprecated.*")
EVAL_SETS = {
    "synthetic": DATA / "demo" / "synthetic" / "manifest.jsonl",
    "real": DATA / "demo" / "real" / "manifest.jsonl",
}


def log(msg: str) -> None:
    """Timestamped print."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# data


def ensure_corpus(hours: float, seed: int) -> None:
    """Synthesise the training corpus up to `hours` (no-op when it is already there)."""
    path = SYNTH / "train.jsonl"
    have = sum(r["duration"] for r in read_manifest(path)) / 3600 if path.exists() else 0.0
    if have + 1e-3 < hours or not (SYNTH / "dev.jsonl").exists():
        log(f"corpus has {have:.2f} h < {hours} h: running make_synthetic_speech.py")
        subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "make_synthetic_speech.py"),
                "--hours",
                str(hours),
                "--seed",
                str(seed),
            ],
            check=True,
        )


def select_hours(rows: list[dict], hours: float) -> list[dict]:
    """The first `hours` of audio in manifest (idx) order, so a larger corpus extends a smaller one."""
    rows = sorted(rows, key=lambda r: r.get("idx", 0))
    out, total = [], 0.0
    for r in rows:
        if total >= hours * 3600:
            break
        out.append(r)
        total += r["duration"]
    return out


def train_tokenizer(texts: list[str], vocab_size: int, folder: Path) -> dict[str, bytes]:
    """Train a sentencepiece BPE model (NeMo layout: <unk>=0, no bos/eos/pad); return its files."""
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sorted(set(texts))),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        num_threads=2,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    # NeMo's vocab.txt: every piece but <unk>, word-initial pieces without '▁', others with '##'
    lines = []
    for i in range(1, sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        lines.append(piece[1:] if piece.startswith(WORD_START) else "##" + piece)
    (folder / "vocab.txt").write_text("\n".join(lines) + "\n")
    return {
        name: (folder / name).read_bytes() for name in ("tokenizer.model", "tokenizer.vocab", "vocab.txt")
    }


def load_audio(path: str) -> torch.Tensor:
    """Mono float32 waveform at 16 kHz."""
    data, sr = sf.read(path, dtype="float32", always_2d=True)
    if sr != SAMPLE_RATE:
        raise ValueError(f"{path}: {sr} Hz, expected {SAMPLE_RATE}")
    return torch.from_numpy(np.ascontiguousarray(data[:, 0]))


def make_batches(
    durations: list[float], max_seconds: float, max_utts: int, rng: random.Random
) -> list[list[int]]:
    """Length-bucketed batches whose padded audio (n x longest) stays under max_seconds."""
    order = list(range(len(durations)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    chunk = 2000
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: durations[i])
        cur: list[int] = []
        for i in part:
            if cur and ((len(cur) + 1) * durations[i] > max_seconds or len(cur) >= max_utts):
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def pad_batch(waves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to [B, S] with lengths."""
    lengths = torch.tensor([len(w) for w in waves], dtype=torch.int64)
    out = torch.zeros(len(waves), int(lengths.max()))
    for i, w in enumerate(waves):
        out[i, : len(w)] = w
    return out, lengths


# ---------------------------------------------------------------------------------------------
# augmentation


def augment_batch(x: torch.Tensor, lengths: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Batched waveform augmentation on padded [B, S]: synthetic reverb (10%), coloured noise at
    5-35 dB SNR (30%), random gain; one power-of-two FFT per batch keeps it cheap."""
    b, n = x.shape
    valid = (torch.arange(n)[None, :] < lengths[:, None]).float()
    size = 1 << math.ceil(math.log2(n + 1))

    def power(w: torch.Tensor) -> torch.Tensor:
        return (w.pow(2) * valid).sum(1, keepdim=True) / lengths[:, None] + 1e-10

    p0 = power(x)
    # reverb: exponentially decaying noise as a room response, RT60 0.15-0.6 s
    rev = (torch.rand(b, 1, generator=g) < 0.1).float()
    ir_len = int(0.35 * SAMPLE_RATE)
    t = torch.arange(ir_len)[None, :] / SAMPLE_RATE
    rt60 = 0.15 + 0.45 * torch.rand(b, 1, generator=g)
    ir = torch.randn(b, ir_len, generator=g) * torch.exp(-6.9 * t / rt60)
    ir[:, 0] = 1.0
    wet = torch.fft.irfft(torch.fft.rfft(x, size) * torch.fft.rfft(ir, size), size)[:, :n] * valid
    wet = wet * torch.sqrt(p0 / power(wet))
    x = rev * wet + (1 - rev) * x
    # noise with a 1/f^alpha spectrum (alpha 0-1.5: white to reddish)
    use = (torch.rand(b, 1, generator=g) < 0.3).float()
    alpha = 1.5 * torch.rand(b, 1, generator=g)
    spec = torch.fft.rfft(torch.randn(b, size, generator=g))
    f = torch.arange(spec.shape[1]).clamp(min=1).float()[None, :]
    noise = torch.fft.irfft(spec / f.pow(alpha / 2), size)[:, :n] * valid
    snr_db = 5.0 + 30.0 * torch.rand(b, 1, generator=g)
    noise = noise * torch.sqrt(p0 / power(noise) / 10 ** (snr_db / 10))
    x = x + use * noise
    gain = 10 ** ((-12.0 + 18.0 * torch.rand(b, 1, generator=g)) / 20)
    x = x * gain
    peak = x.abs().amax(1, keepdim=True).clamp(min=0.99)
    return x / peak * 0.99


def spec_augment(
    feats: torch.Tensor,
    lengths: torch.Tensor,
    g: torch.Generator,
    freq_masks: int = 2,
    freq_width: int = 12,
    time_masks: int = 2,
    time_width: float = 0.04,
) -> None:
    """SpecAugment-lite in place on [B, F, T] (masked to 0 = the normalised mean)."""
    b, nf, _ = feats.shape
    for i in range(b):
        t_len = int(lengths[i])
        for _ in range(freq_masks):
            w = int(torch.randint(0, freq_width + 1, (), generator=g))
            f0 = int(torch.randint(0, max(1, nf - w), (), generator=g))
            feats[i, f0 : f0 + w, :t_len] = 0.0
        max_w = max(1, int(time_width * t_len))
        for _ in range(time_masks):
            w = int(torch.randint(0, max_w + 1, (), generator=g))
            t0 = int(torch.randint(0, max(1, t_len - w), (), generator=g))
            feats[i, :, t0 : t0 + w] = 0.0


# ---------------------------------------------------------------------------------------------
# model


def model_config(vocab: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """NeMo-style EncDecCTCModelBPE config (same section layout as NeMo's model_config.yaml)."""
    return {
        "sample_rate": SAMPLE_RATE,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": SAMPLE_RATE,
            "normalize": "per_feature",
            "window_size": 0.025,
            "window_stride": 0.01,
            "window": "hann",
            "features": 80,
            "n_fft": 512,
            "log": True,
            "frame_splicing": 1,
            "dither": 1.0e-05,
            "pad_to": 0,
            "pad_value": 0.0,
        },
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "freq_masks": 2,
            "time_masks": 2,
            "freq_width": 12,
            "time_width": 0.04,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 80,
            "feat_out": -1,
            "n_layers": args.layers,
            "d_model": args.d_model,
            "subsampling": "dw_striding",
            "subsampling_factor": args.subsampling,
            "subsampling_conv_channels": args.sub_channels,
            "causal_downsampling": False,
            "ff_expansion_factor": args.ff,
            "self_attention_model": "rel_pos",
            "n_heads": 4,
            "att_context_size": [-1, -1],
            "att_context_style": "regular",
            "xscaling": True,
            "untie_biases": True,
            "pos_emb_max_len": 5000,
            "conv_kernel_size": 9,
            "conv_norm_type": "batch_norm",
            "conv_context_size": None,
            "dropout": 0.1,
            "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0,
            "dropout_att": 0.1,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
            "feat_in": args.d_model,
            "num_classes": len(vocab),
            "vocabulary": list(vocab),
        },
        "tokenizer": {
            "dir": f"tokenizer_spe_bpe_v{len(vocab)}",
            "type": "bpe",
            "model_path": "nemo:tokenizer.model",
            "vocab_path": "nemo:vocab.txt",
            "spe_tokenizer_vocab": "nemo:tokenizer.vocab",
        },
        "decoding": {"strategy": "greedy_batch", "greedy": {}},
        "target": "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
    }


def transducer_config(ctc_cfg: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """NeMo-style EncDecRNNTBPEModel config around a CTC model's front end, encoder and tokenizer:
    a one-layer LSTM prediction network and a joint network (+ TDT durations for --arch tdt)."""
    cfg = copy.deepcopy(ctc_cfg)
    vocab = list(cfg.pop("decoder")["vocabulary"])
    d_model = int(cfg["encoder"]["d_model"])
    cfg["model_defaults"] = {
        "enc_hidden": d_model,
        "pred_hidden": args.pred_hidden,
        "joint_hidden": args.joint_hidden,
    }
    cfg["decoder"] = {
        "_target_": "nemo.collections.asr.modules.RNNTDecoder",
        "normalization_mode": None,
        "random_state_sampling": False,
        "blank_as_pad": True,
        "vocab_size": len(vocab),
        "prednet": {"pred_hidden": args.pred_hidden, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.0},
    }
    cfg["joint"] = {
        "_target_": "nemo.collections.asr.modules.RNNTJoint",
        "log_softmax": None,
        "preserve_memory": False,
        "fuse_loss_wer": False,
        "num_classes": len(vocab),
        "vocabulary": vocab,
        "jointnet": {
            "joint_hidden": args.joint_hidden,
            "activation": "relu",
            "dropout": 0.1,
            "encoder_hidden": d_model,
            "pred_hidden": args.pred_hidden,
        },
    }
    greedy = {"max_symbols": 10}
    if args.arch == "tdt":
        durations = [int(d) for d in args.durations.split(",")]
        cfg["model_defaults"]["tdt_durations"] = durations
        cfg["joint"]["num_extra_outputs"] = len(durations)
        cfg["loss"] = {
            "loss_name": "tdt",
            "tdt_kwargs": {"durations": durations, "sigma": args.sigma, "omega": 0.0},
        }
        cfg["decoding"] = {"strategy": "greedy_batch", "model_type": "tdt", "durations": durations,
                           "greedy": greedy}  # fmt: skip
    else:
        cfg["loss"] = {"loss_name": "default"}
        cfg["decoding"] = {"strategy": "greedy_batch", "greedy": greedy}
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
    return cfg


def ctc_config_from(transducer_cfg: dict[str, Any]) -> dict[str, Any]:
    """NeMo-style EncDecCTCModelBPE config around a transducer's front end, encoder and tokenizer:
    a new ConvASRDecoder (1x1 convolution) over its vocabulary."""
    kept = ("sample_rate", "preprocessor", "spec_augment", "encoder", "tokenizer")
    cfg = {k: copy.deepcopy(transducer_cfg[k]) for k in kept if k in transducer_cfg}
    vocab = list(transducer_cfg["joint"]["vocabulary"])
    cfg["decoder"] = {
        "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
        "feat_in": int(cfg["encoder"]["d_model"]),
        "num_classes": len(vocab),
        "vocabulary": vocab,
    }
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {}}
    cfg["target"] = "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
    return cfg


def continued_model(path: Path, arch: str) -> tuple[NemoCTCModel | NemoTransducerModel, dict[str, Any]]:
    """A saved .nemo of `arch` to train further (asrdecode's loader: tar + safe weights, no pickle)
    and its sidecar JSON ({} when there is none)."""
    from asrdecode.models.nemo import load_nemo

    model = load_nemo(path, kind="ctc" if arch == "ctc" else "transducer")
    if arch != "ctc" and (model.durations is None) != (arch == "rnnt"):
        sys.exit(f"{path}: a {'TDT' if model.durations else 'RNN-T'} model, but --arch {arch}")
    sidecar = path.with_suffix(".json")
    prior = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    return model, prior


def transducer_loss(
    model: NemoTransducerModel, encoder_out: torch.Tensor, enc_lengths: torch.Tensor, tgt: list[list[int]],
    sigma: float = 0.0,
) -> torch.Tensor:  # fmt: skip
    """Per-token transducer NLL of a batch: teacher-forced prediction network (blank = SOS), full
    joint lattice [B, T, U+1, V+1(+durations)], then torchaudio's rnnt_loss (RNN-T) or our tdt_loss."""
    b, u_max, blank = len(tgt), max(len(t) for t in tgt), model.blank_id
    labels = torch.full((b, u_max + 1), blank, dtype=torch.long)
    targets = torch.zeros((b, u_max), dtype=torch.int32)
    for i, t in enumerate(tgt):
        labels[i, 1 : 1 + len(t)] = torch.tensor(t)
        targets[i, : len(t)] = torch.tensor(t, dtype=torch.int32)
    tgt_len = torch.tensor([len(t) for t in tgt], dtype=torch.int32)
    pred, _ = model.decoder.forward_sequence(labels)
    logits = model.joint(encoder_out[:, : int(enc_lengths.max())], pred)  # rnnt_loss: T = max length
    if model.durations is None:
        nll = AF.rnnt_loss(
            logits.float().contiguous(), targets, enc_lengths.to(torch.int32), tgt_len,
            blank=blank, reduction="none",
        )  # fmt: skip
    else:
        from asrdecode.models.transducer_loss import tdt_loss

        nll = tdt_loss(
            logits[..., : blank + 1], logits[..., blank + 1 :], targets.long(), enc_lengths, tgt_len.long(),
            durations=model.durations, blank=blank, sigma=sigma, reduction="none",
        )  # fmt: skip
    return nll.sum() / tgt_len.sum()


def greedy_token_ids(
    model: NemoCTCModel | NemoTransducerModel, x: torch.Tensor, lens: torch.Tensor
) -> list[list[int]]:
    """Greedy tokens of a padded batch: CTC argmax -> merge repeats -> drop blank, or (transducers)
    label-looping greedy decoding (paper 003 Alg. 3)."""
    res = model(x, lens)
    if isinstance(model, NemoTransducerModel):
        from asrdecode.decoders.transducer_greedy import greedy_decode

        hyps, _ = greedy_decode(model, res.encoder_out, res.lengths)
        return [hyps.transcript[row, : int(hyps.lengths[row])].tolist() for row in range(x.shape[0])]
    best = res.log_probs.argmax(-1)
    out = []
    for row in range(x.shape[0]):
        ids = torch.unique_consecutive(best[row, : int(res.lengths[row])]).tolist()
        out.append([t for t in ids if t != res.blank_id])
    return out


def greedy_texts(
    model: NemoCTCModel | NemoTransducerModel, waves: list[torch.Tensor], batch_seconds: float = 60.0
) -> list[str]:
    """Greedy transcripts (see greedy_token_ids), detokenised."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(waves)), key=lambda i: len(waves[i]))
    out = [""] * len(waves)
    with torch.inference_mode():
        i = 0
        while i < len(order):
            j = i + 1
            while j < len(order) and (j - i + 1) * len(waves[order[j]]) <= batch_seconds * SAMPLE_RATE:
                j += 1
            idx = order[i:j]
            x, lens = pad_batch([waves[k] for k in idx])
            for k, ids in zip(idx, greedy_token_ids(model, x, lens), strict=True):
                out[k] = model.tokenizer.decode(ids)
            i = j
    model.train(was_training)
    return out


def wer(refs: list[str], hyps: list[str]) -> float:
    """Corpus WER (jiwer), robust to empty hypotheses."""
    return float(jiwer.wer(refs, [h if h.strip() else "<empty>" for h in hyps]))


def evaluate_manifest(model: NemoCTCModel | NemoTransducerModel, manifest: Path) -> dict[str, Any]:
    """WER of greedy decoding on one manifest, plus a few examples."""
    rows = read_manifest(manifest)
    hyps = greedy_texts(model, [load_audio(r["audio_path"]) for r in rows])
    refs = [r["text"] for r in rows]
    return {
        "manifest": str(manifest.relative_to(REPO)),
        "utterances": len(rows),
        "wer": round(wer(refs, hyps), 4),
        "cer": round(float(jiwer.cer(refs, hyps)), 4),
        "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps, strict=True))[:5]],
    }


# ---------------------------------------------------------------------------------------------
# saving


def export_nemo(
    model: NemoCTCModel | NemoTransducerModel,
    cfg: dict[str, Any],
    files: dict[str, bytes],
    out: Path,
    info: dict[str, Any],
) -> bool:
    """Write the .nemo and its .json sidecar; False (with a message) if nemo.py is not there yet."""
    try:
        from asrdecode.models.nemo import save_nemo
    except ImportError as exc:
        log(f"cannot write {out} yet ({exc}); the checkpoint in {WORK} is kept")
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    tmp = out.with_suffix(".nemo.tmp")
    save_nemo(model, cfg, tmp, files, dtype=torch.float16)  # half the file (data/README.md)
    tmp.replace(out)
    out.chmod(0o644)  # mkstemp inside save_nemo leaves 0600; the model is meant to be shared
    model.train(was_training)
    info = dict(info, nemo_file=out.name, nemo_bytes=out.stat().st_size)
    out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    return True


def eval_saved(out: Path) -> dict[str, Any]:
    """Reload the saved .nemo (as asrdecode would) and measure greedy WER on the demo sets."""
    from asrdecode.models.nemo import load_nemo

    model = load_nemo(out)
    return {name: evaluate_manifest(model, path) for name, path in EVAL_SETS.items() if path.exists()}


# ---------------------------------------------------------------------------------------------
# training


def train(args: argparse.Namespace) -> None:
    """The whole run: corpus, tokenizer, model, loop, export."""
    t_start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    WORK.mkdir(parents=True, exist_ok=True)

    ensure_corpus(args.hours, args.seed)
    rows = select_hours(read_manifest(SYNTH / "train.jsonl"), args.hours)
    dev_rows = read_manifest(SYNTH / "dev.jsonl")[: args.dev_utts]
    texts = [r["text"] for r in rows]  # the tokenizer's training text (all of it, even for --overfit)
    if args.overfit:  # a fixed batch of training utterances, probed on themselves
        rows = rows[: args.overfit]
        dev_rows = rows
    hours = sum(r["duration"] for r in rows) / 3600
    log(f"training data: {len(rows)} utterances, {hours:.2f} h; dev probe: {len(dev_rows)} utterances")

    transducer = args.arch != "ctc"
    model: NemoCTCModel | NemoTransducerModel
    prior: dict[str, Any] = {}  # --init-transducer: the sidecar of the model being continued
    if args.init_transducer is not None:
        model, prior = continued_model(args.init_transducer, args.arch)
        cfg, files, tokenizer = copy.deepcopy(model.config), dict(model.tokenizer_files), model.tokenizer
        if transducer:
            args.pred_hidden = int(cfg["decoder"]["prednet"]["pred_hidden"])
            args.joint_hidden = int(cfg["joint"]["jointnet"]["joint_hidden"])
            args.sigma = float(cfg.get("loss", {}).get("tdt_kwargs", {}).get("sigma", args.sigma))
        log(
            f"continuing {args.init_transducer}: all weights, {prior.get('steps', 0)} steps and "
            f"{prior.get('train_wall_minutes', 0.0)} min of training so far (final: {prior.get('final')})"
        )
        if prior.get("training_data_hours") not in (None, round(hours, 3)):
            log(f"note: it was trained on {prior['training_data_hours']} h, this segment uses {hours:.3f} h")
    elif transducer:  # front end, encoder and tokenizer from the CTC model; new prediction + joint nets
        from asrdecode.models.nemo import load_nemo

        init = load_nemo(args.init_from, kind="ctc")
        files, tokenizer = dict(init.tokenizer_files), init.tokenizer
        cfg = transducer_config(init.config, args)
        model = NemoTransducerModel.from_config(cfg, tokenizer, files)
        model.preprocessor.load_state_dict(init.preprocessor.state_dict())
        model.encoder.load_state_dict(init.encoder.state_dict())
        log(f"encoder, front end and tokenizer initialised from {args.init_from}")
        del init
    elif args.init_from_given:  # CTC head on a transducer's front end, encoder and tokenizer
        from asrdecode.models.nemo import load_nemo

        init = load_nemo(args.init_from, kind="transducer")
        files, tokenizer = dict(init.tokenizer_files), init.tokenizer
        cfg = ctc_config_from(init.config)
        model = NemoCTCModel.from_config(cfg, tokenizer, files)
        model.preprocessor.load_state_dict(init.preprocessor.state_dict())
        model.encoder.load_state_dict(init.encoder.state_dict())
        log(f"encoder, front end and tokenizer initialised from {args.init_from}; a new CTC head")
        del init
    else:
        files = train_tokenizer(texts, args.vocab, WORK / "tokenizer")
        tokenizer = Tokenizer.from_sentencepiece(files["tokenizer.model"])
        cfg = model_config(tokenizer.units, args)
        model = NemoCTCModel.from_config(cfg, tokenizer, files)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters, vocab {len(tokenizer.units)} + blank")

    targets = [tokenizer.encode(r["text"]) for r in rows]
    # CTC needs at least one output frame per token (+1 between repeats): drop impossible items
    # (a transducer can emit any number of tokens per frame)
    keep = []
    for i, (r, t) in enumerate(zip(rows, targets, strict=True)):
        frames = int(r["duration"] * 100) // args.subsampling
        repeats = sum(1 for a, b in zip(t, t[1:], strict=False) if a == b)
        if len(t) > 0 and (transducer or len(t) + repeats <= frames):
            keep.append(i)
    if len(keep) < len(rows):
        log(f"dropping {len(rows) - len(keep)} utterances too fast for the output frame rate")
    rows = [rows[i] for i in keep]
    targets = [targets[i] for i in keep]
    durations = [r["duration"] for r in rows]
    dev_waves = [load_audio(r["audio_path"]) for r in dev_rows]
    dev_refs = [r["text"] for r in dev_rows]

    encoder_params = list(model.encoder.parameters())
    encoder_ids = {id(p) for p in encoder_params}
    other_params = [p for p in model.parameters() if id(p) not in encoder_ids]
    groups = [
        {
            "params": encoder_params,
            "lr_scale": args.encoder_lr_scale if transducer or args.init_from_given else 1,
        },
        {"params": other_params, "lr_scale": 1.0},
    ]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), weight_decay=1e-3)
    step, epoch, seen_seconds, train_seconds = 0, 0, 0.0, 0.0
    history: list[dict[str, Any]] = []  # dev-WER probes, kept across --resume
    segments: list[dict[str, Any]] = []  # one entry per (re)started run: command, first step
    ckpt_path = WORK / "ckpt.pt"
    # the step and training seconds where this segment's warm-up, cosine schedule and budget start
    # (0 for a fresh run and for --resume of one; the continued model's totals for --init-transducer)
    origin_step, origin_seconds = 0, 0.0
    if args.init_transducer is not None:
        step = int(prior.get("steps", 0))
        train_seconds = 60.0 * float(prior.get("train_wall_minutes", 0.0))
        seen_seconds = float(prior.get("epochs", 0.0)) * 3600 * float(prior.get("training_data_hours", hours))
        epoch = int(prior.get("epochs", 0.0))
        history = list(prior.get("dev_wer_history", []))
        segments = [dict(s) for s in prior.get("segments", [])]
        if segments:
            segments[-1].setdefault("to_step", step)
            segments[-1].setdefault("final", prior.get("final"))
        origin_step, origin_seconds = step, train_seconds
        # a different data order and augmentation draw than the segment(s) before
        rng.seed(args.seed + step)
        g.manual_seed(args.seed + step)
        torch.manual_seed(args.seed + step)
    elif args.resume and ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, epoch, seen_seconds, train_seconds = (
            state["step"],
            state["epoch"],
            state["seen_seconds"],
            state["train_seconds"],
        )
        rng.setstate(state["rng"])
        g.set_state(state["g"])
        history = state.get("history", [])
        segments = state.get("segments", [])
        origin_step, origin_seconds = state.get("origin", (0, 0.0))
        log(f"resumed at step {step} ({train_seconds / 60:.1f} min trained)")
    budget = args.minutes * 60.0
    start_step = step
    segments.append(
        {
            "command": "scripts/train_demo_model.py " + " ".join(sys.argv[1:]),
            "from_step": step,
            **(
                {
                    "continued_from": str(args.init_transducer),
                    "init_sha256": hashlib.sha256(args.init_transducer.read_bytes()).hexdigest(),
                    "optimizer": "fresh AdamW (a .nemo holds no optimiser state)",
                    "lr": args.lr,
                    "warmup_steps": args.warmup,
                    "seed": args.seed + step,
                }
                if args.init_transducer is not None and step == origin_step
                else {}
            ),
        }
    )

    def lr_at(step: int, frac: float) -> float:
        warm = min(1.0, (step - origin_step + 1) / args.warmup)
        return args.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    init_info: dict[str, Any] = {}
    if transducer or args.init_from_given:
        source, new = ("the CTC demo", "prediction and joint networks")
        if not transducer:
            source, new = "a transducer demo", "CTC head"
        init_info = {
            "init_from": str(Path(args.init_from).resolve().relative_to(REPO)),
            "init": f"preprocessor, encoder and tokenizer copied from init_from ({source} model); "
            f"{new} random",
        }
    if args.init_transducer is not None:  # keep how the continued model began
        init_info = {k: prior[k] for k in ("init_from", "init") if k in prior}

    def info(final: bool, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        segments[-1].update(
            to_step=step, train_wall_minutes=round((train_seconds - origin_seconds) / 60, 1), final=final
        )
        return {
            "final": final,
            "model": {
                "ctc": "FastConformer-CTC (NeMo EncDecCTCModelBPE layout)",
                "rnnt": "FastConformer-RNN-T (NeMo EncDecRNNTBPEModel layout)",
                "tdt": "FastConformer-TDT, durations {} (NeMo EncDecRNNTBPEModel layout)",
            }[args.arch].format(getattr(model, "durations", None)),  # a CTC model has no .durations
            **(
                {
                    **init_info,
                    "encoder_lr_scale": args.encoder_lr_scale,
                    "prediction_hidden": args.pred_hidden,
                    "joint_hidden": args.joint_hidden,
                }
                if transducer
                else {**init_info, "encoder_lr_scale": args.encoder_lr_scale}
                if args.init_from_given
                else {}
            ),
            "parameters": n_params,
            "vocab_size": len(tokenizer.units),
            "encoder": {
                k: cfg["encoder"][k]
                for k in (
                    "n_layers",
                    "d_model",
                    "ff_expansion_factor",
                    "n_heads",
                    "subsampling",
                    "subsampling_factor",
                    "conv_kernel_size",
                )
            },
            "training_data_hours": round(hours, 3),
            "training_utterances": len(rows),
            "training_data": "synthetic speech: flite (kal, kal16, slt, rms, awb) + espeak-ng English "
            "voices; KJV clauses + digit/card/number/command templates (scripts/make_synthetic_speech.py)",
            "steps": step,
            "epochs": round(seen_seconds / 3600 / max(hours, 1e-9), 2),
            "train_wall_minutes": round(train_seconds / 60, 1),
            "threads": args.threads,
            "seed": args.seed,
            "batch_seconds": args.batch_seconds,
            "lr": args.lr,
            "torch": torch.__version__,
            "command": "scripts/train_demo_model.py " + " ".join(sys.argv[1:]),
            "segments": segments,
            **(extra or {}),
        }

    def checkpoint(final: bool = False, extra: dict[str, Any] | None = None) -> None:
        torch.save(
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "step": step,
                "epoch": epoch,
                "seen_seconds": seen_seconds,
                "train_seconds": train_seconds,
                "rng": rng.getstate(),
                "g": g.get_state(),
                "config": cfg,
                "tokenizer_files": files,
                "history": history,
                "segments": segments,
                "origin": (origin_step, origin_seconds),
            },
            WORK / "ckpt.tmp",
        )
        (WORK / "ckpt.tmp").replace(ckpt_path)
        export_nemo(model, cfg, files, args.out, info(final, extra))

    if args.init_transducer is not None and not (history and history[-1]["step"] == step):
        t_eval = time.time()  # the starting point of this segment's dev-WER curve
        dev_wer = wer(dev_refs, greedy_texts(model, dev_waves))
        history.append({"step": step, "minutes": round(train_seconds / 60, 1), "dev_wer": round(dev_wer, 4)})
        log(f"step {step} (start): dev WER {dev_wer:.3f} ({time.time() - t_eval:.0f} s, not training time)")
    model.train()
    last_ckpt = time.time()
    t_loop, prior_seconds, step_seconds = time.time(), train_seconds, 0.0
    done = False
    while not done:
        batches = (
            [list(range(len(rows)))]
            if args.overfit
            else make_batches(durations, args.batch_seconds, args.max_utts, rng)
        )
        for batch in batches:
            t0 = time.time()
            x, lens = pad_batch([load_audio(rows[i]["audio_path"]) for i in batch])
            if not args.no_augment:
                x = augment_batch(x, lens, g)
            feats, flens = model.features(x, lens)
            feats = feats.detach()
            if not args.no_augment:
                spec_augment(feats, flens, g)
            res = model.forward_features(feats, flens)
            tgt = [targets[i] for i in batch]
            if transducer:
                loss = transducer_loss(model, res.encoder_out, res.lengths, tgt, sigma=args.sigma)
            else:
                loss = F.ctc_loss(
                    res.log_probs.transpose(0, 1),
                    torch.tensor([t for seq in tgt for t in seq]),
                    res.lengths,
                    torch.tensor([len(t) for t in tgt]),
                    blank=res.blank_id,
                    reduction="mean",
                    zero_infinity=True,
                )
            for group in opt.param_groups:
                group["lr"] = group.get("lr_scale", 1.0) * lr_at(
                    step,
                    (train_seconds - origin_seconds) / budget
                    if args.max_steps == 0
                    else (step - origin_step) / args.max_steps,
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            step += 1
            seen_seconds += sum(durations[i] for i in batch)
            step_seconds += time.time() - t0
            train_seconds = prior_seconds + time.time() - t_loop  # wall clock, incl. dev probes
            if step % args.log_every == 0:
                log(
                    f"step {step} ep {epoch} loss {loss.item():.3f} gnorm {float(gnorm):.2f} "
                    f"lr {opt.param_groups[0]['lr']:.2e} "
                    f"batch {len(batch)}x{max(durations[i] for i in batch):.1f}s "
                    f"{step_seconds / max(step - start_step, 1):.2f} s/step, {train_seconds / 60:.1f} min"
                )
            if step % args.eval_every == 0:
                t_eval = time.time()
                dev_hyps = greedy_texts(model, dev_waves)
                dev_wer = wer(dev_refs, dev_hyps)
                history.append(
                    {"step": step, "minutes": round(train_seconds / 60, 1), "dev_wer": round(dev_wer, 4)}
                )
                log(
                    f"step {step}: dev WER {dev_wer:.3f} CER {float(jiwer.cer(dev_refs, dev_hyps)):.3f} "
                    f"({len(dev_refs)} "
                    f"{'training' if args.overfit else 'held-out synthetic'} utts, "
                    f"{time.time() - t_eval:.0f} s)"
                )
                if args.overfit and dev_wer == 0.0:
                    done = True
                    break
            if not args.overfit and time.time() - last_ckpt > args.ckpt_minutes * 60:
                checkpoint(extra={"dev_wer_history": history})
                last_ckpt = time.time()
                log(f"checkpoint at step {step} -> {ckpt_path}, {args.out}")
            if train_seconds - origin_seconds >= budget or (
                args.max_steps and step - origin_step >= args.max_steps
            ):
                done = True
                break
        epoch += 1

    dev_wer = wer(dev_refs, greedy_texts(model, dev_waves))
    history.append({"step": step, "minutes": round(train_seconds / 60, 1), "dev_wer": round(dev_wer, 4)})
    log(f"finished: {step} steps, {train_seconds / 60:.1f} min training, dev WER {dev_wer:.3f}")
    if args.overfit:
        for ref, hyp in list(zip(dev_refs, greedy_texts(model, dev_waves), strict=True))[:4]:
            log(f"   ref: {ref}\n   hyp: {hyp}")
        return
    checkpoint(final=True, extra={"dev_wer_history": history})
    if args.skip_heldout:  # experiments: keep data/demo held out
        return
    try:
        results = eval_saved(args.out)
    except ImportError as exc:
        log(f"no asrdecode.models.nemo yet ({exc}); run --export-only later")
        return
    extra = {
        "dev_wer_history": history,
        "heldout_wer": {k: v["wer"] for k, v in results.items()},
        "eval": results,
        "total_wall_minutes": round((time.time() - t_start) / 60, 1),
    }
    export_nemo(model, cfg, files, args.out, info(True, extra))
    for name, res in results.items():
        log(f"{name}: WER {res['wer']:.3f} CER {res['cer']:.3f} on {res['utterances']} utterances")
    log(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) and {args.out.with_suffix('.json')}")


def plot_curves(sidecars: list[Path], png: Path) -> None:
    """Dev WER (%) against training minutes, one line per model sidecar (its ``dev_wer_history``:
    the probe on the 120 held-out synthetic dev utterances), labelled with the model's kind, its
    final held-out synthetic WER and its command; also written as SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for path in sidecars:
        info = json.loads(path.read_text())
        hist = info["dev_wer_history"]
        held = info.get("heldout_wer", {}).get("synthetic")
        label = f"{path.stem}: {info.get('model', '').split(' (')[0]}"
        if held is not None:
            label += f", held-out synthetic {held * 100:.1f}%"
        ax.plot([h["minutes"] for h in hist], [h["dev_wer"] * 100 for h in hist], marker=".", label=label)
    ax.set_xlabel("training minutes (one CPU thread)")
    ax.set_ylabel("dev WER % (120 held-out synthetic utterances)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, "scripts/train_demo_model.py --plot; commands in each model's .json", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    fig.savefig(png.with_suffix(".svg"))
    print(f"wrote {png} and {png.with_suffix('.svg')}")


def export_only(args: argparse.Namespace) -> None:
    """Turn data/cache/train/ckpt.pt into --out (for a run that ended before nemo.py existed)."""
    state = torch.load(WORK / "ckpt.pt", weights_only=False)
    files = state.get("tokenizer_files") or {
        n: (WORK / "tokenizer" / n).read_bytes() for n in ("tokenizer.model", "tokenizer.vocab", "vocab.txt")
    }
    model_type = NemoCTCModel if args.arch == "ctc" else NemoTransducerModel
    model = model_type.from_config(
        state["config"], Tokenizer.from_sentencepiece(files["tokenizer.model"]), files
    )
    model.load_state_dict(state["model"])
    sidecar = args.out.with_suffix(".json")
    info = json.loads(sidecar.read_text()) if sidecar.exists() else {"steps": state["step"]}
    export_nemo(model, state["config"], files, args.out, info)
    results = eval_saved(args.out)
    info.update(heldout_wer={k: v["wer"] for k, v in results.items()}, eval=results)
    export_nemo(model, state["config"], files, args.out, info)
    print(json.dumps(info["heldout_wer"], indent=2))


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--hours", type=float, default=8.0, help="synthetic training audio to use (made if missing)"
    )
    ap.add_argument(
        "--minutes", type=float, default=55.0, help="wall-clock training budget (incl. dev probes)"
    )
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: time budget only)")
    ap.add_argument("--arch", choices=["ctc", "rnnt", "tdt"], default="ctc", help="model type to train")
    ap.add_argument(
        "--out", type=Path, default=None, help="the .nemo to write (default data/models/demo_<arch>_bpe.nemo)"
    )
    ap.add_argument(
        "--init-from",
        type=Path,
        default=DEFAULT_INIT,
        help="rnnt/tdt: a CTC .nemo giving encoder + tokenizer; ctc: a transducer .nemo (a new CTC head)",
    )
    ap.add_argument(
        "--continue",
        "--init-transducer",
        dest="init_transducer",
        type=Path,
        default=None,
        help="continue this saved .nemo of --arch (all weights, a fresh optimiser and schedule; history "
        "from its .json)",
    )
    ap.add_argument(
        "--encoder-lr-scale",
        type=float,
        default=0.5,
        help="encoder lr factor (rnnt/tdt; ctc with --init-from)",
    )
    ap.add_argument("--pred-hidden", type=int, default=160, help="rnnt/tdt: LSTM size")
    ap.add_argument("--joint-hidden", type=int, default=160, help="rnnt/tdt: joint hidden size")
    ap.add_argument("--durations", default="0,1,2,3,4", help="tdt: durations (frames)")
    ap.add_argument("--sigma", type=float, default=0.0, help="tdt: logit under-normalisation (TDT paper)")
    ap.add_argument("--d-model", type=int, default=144)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--ff", type=int, default=4, help="ff_expansion_factor")
    ap.add_argument("--sub-channels", type=int, default=64, help="subsampling_conv_channels")
    ap.add_argument("--subsampling", type=int, default=4, choices=[4, 8], help="dw_striding factor")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--batch-seconds", type=float, default=60.0, help="padded audio seconds per batch")
    ap.add_argument("--max-utts", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dev-utts", type=int, default=120)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--resume", action="store_true", help="continue from data/cache/train/ckpt.pt")
    ap.add_argument(
        "--work", type=Path, default=None, help="checkpoint/tokenizer folder (default data/cache/train)"
    )
    ap.add_argument(
        "--overfit",
        type=int,
        default=0,
        help="sanity check: train on N utterances, print their WER, save nothing",
    )
    ap.add_argument("--no-augment", action="store_true", help="no waveform augmentation, no SpecAugment")
    ap.add_argument("--skip-heldout", action="store_true", help="experiments: no WER on data/demo at the end")
    ap.add_argument("--export-only", action="store_true", help="write --out from the last checkpoint")
    ap.add_argument("--eval-only", action="store_true", help="WER of --out on data/demo/{synthetic,real}")
    ap.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="plot the dev-WER curves of the --curves sidecars (.json next to each .nemo) and exit",
    )
    ap.add_argument("--curves", type=Path, nargs="+", default=[], metavar="JSON", help="sidecars for --plot")
    args = ap.parse_args()
    if args.plot is not None:
        plot_curves(args.curves, args.plot)
        return
    # --init-from for --arch ctc: a transducer's encoder under a new CTC head (rnnt/tdt: always)
    args.init_from_given = args.arch == "ctc" and args.init_from != DEFAULT_INIT
    if args.init_transducer is not None and args.resume:
        ap.error("--continue excludes --resume")
    if args.init_transducer is not None and not args.init_transducer.is_file():
        ap.error(f"--continue {args.init_transducer}: no such file")
    global WORK
    if args.arch != "ctc":
        WORK = CACHE / f"train_{args.arch}"
    if args.work is not None:
        WORK = args.work
    if args.out is None:
        args.out = DATA / "models" / f"demo_{args.arch}_bpe.nemo"
    torch.set_num_threads(args.threads)
    if args.eval_only:
        for name, res in eval_saved(args.out).items():
            print(
                f"{name}: WER {res['wer']:.3f} CER {res['cer']:.3f} "
                f"({res['utterances']} utts, {res['manifest']})"
            )
            for ex in res["examples"]:
                print(f"   ref: {ex['ref']}\n   hyp: {ex['hyp']}")
    elif args.export_only:
        export_only(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
