"""Build random-weight NeMo transducer checkpoints and NeMo's reference outputs (run by hand, never by tests).

NeMo is not a dependency of asrdecode: this script runs in a separate venv outside the project,
made with (the committed fixtures were made in this one; a CPU build of torch):

    python3 -m venv /work/nemo-venv
    nice -n 10 /work/nemo-venv/bin/pip install "torch==2.13.0+cpu"
    nice -n 10 /work/nemo-venv/bin/pip install "nemo-toolkit[asr]==3.0.0" "torch==2.13.0+cpu"

The committed models are as small as each family allows (``TINY_ENCODER``: 80 mels, dw_striding x8,
a 2-layer FastConformer with d_model 16 and 2 heads; prediction and joint networks 16 wide; ConvASR
blocks of 16-32 channels), so that the checkout travels (tests/test_tree_size.py). Their BPE-128
tokenizer is the one the fixtures always had with the lowercase-only normalizer of
`slim_sentencepiece`. Rebuild them in this order (each set reads the models before it):

    P="/work/nemo-venv/bin/python scripts/make_nemo_fixtures.py --out tests/fixtures/nemo"
    for s in base tiny ctc; do $P --set $s; done
    for n in aed_canary2 aed_canary aed_bpe aed_timestamps; do $P --set aed --only $n; done
    for s in attention streaming buffered buffered-rnnt; do $P --set $s; done
    /work/nemo-venv/bin/python scripts/make_nemo_beam_references.py
    /work/nemo-venv/bin/python scripts/make_nemo_ctc_beam_references.py
    for s in deep deep-float64 punct spaces pack; do $P --set $s; done

Sets (``--set``):

* ``deep``: ``quartznet_deep`` and ``citrinet_deep`` — ConvASR CTC models as deep as QuartzNet 15x5
  (1 + 15 x 5 + 2 blocks, dilation 2) and Citrinet (1 + 3 x 7 x 5 + 1 blocks, squeeze-excitation,
  stride_last + stride_add), 8 channels, kernels scaled by ``kernel_size_factor`` 0.25, QuartzNet's
  64-mel front end, character labels with ``' . , ?``; each convolution's weights scaled by
  exp(N(0, 1)) and every BatchNorm's statistics measured on the fixture batch (`far_batchnorm`:
  running variances 2e-5..1300); references: NeMo's log-probs of two real inputs of 12.6 and
  11.5 s (the clips joined, `long_inputs` in tests/helpers/nemo_audio.py), each alone, its
  ``transcribe`` texts alone and batched, and its own batched-vs-single difference.
* ``deep-float64``: no new model; the deep stacks' references in float64 (`deep_float64_reference`):
  NeMo's features of the long inputs, its float64 log-probs and greedy text of them, and how far its
  float32 log-probs are from those (the deep stacks' float32 results depend on the CPU).
* ``punct``: ``punct_bpe128.model`` (`punct_tokenizer`: 128 BPE pieces trained on sentences with
  "don't", "o'clock", "'tis", "it's.", incl. ``▁'`` and ``▁-``) and ``reference/punct.json``: the
  fixtures of `PUNCT_MODELS` given it (or, char models, `CHAR_PUNCT_LABELS`) by
  tests/helpers/nemo_vocab.py (weights unchanged), NeMo's ``transcribe`` tokens, texts and word
  offsets for every head, greedy and `PUNCT_BEAMS`, and NeMo's detokenisation of the sentences and
  of random token sequences (`detok_table`).
* ``spaces``: ``reference/spaces.json`` (`spaces_reference`): NeMo's text of token sequences with a
  space at either end or twice in a row (`SPACE_CHAR_TEXTS`, `SPACE_BPE_TEXTS`), from crafted CTC
  log-probs through the CTC decoding of a punctuation fixture and from the tokens through its
  transducer decoding (NeMo keeps those spaces in its text).
* ``pack``: every plain-tar ``.nemo`` of ``--out`` rewritten gzipped (`gzip_nemo`: the same members,
  about 40% of the bytes; NeMo and asrdecode read either) and the references' ``sha256`` updated.

* ``base``: ``ctc_bpe`` (``EncDecCTCModelBPE``), ``rnnt_bpe`` and ``tdt_bpe`` (``EncDecRNNTBPEModel``,
  TDT durations 0..4), each rebuilt from its own committed config at the tiny sizes; the
  transducers' references add NeMo's greedy with the token LM (``lm_tokens.arpa``, alpha 0.5),
  ``malsd_batch`` with and without it and, for RNN-T, ``maes_batch`` (`decodings_of`), with the exact
  merged decoding configs in ``reference/<name>.json`` (``decodings``).
* ``tiny``: ``rnnt_char`` — ``EncDecRNNTModel`` with a
  character vocabulary; ``rnnt_lstm2`` — ``EncDecRNNTBPEModel`` (the fixture BPE-128 tokenizer) whose
  prediction network is a 2-layer LSTM; ``hybrid_rnnt_ctc`` / ``hybrid_tdt_ctc`` —
  ``EncDecHybridRNNTCTCBPEModel`` (BPE-128) with an RNN-T or TDT transducer and an ``aux_ctc`` head
  (re-drawn by ``tune_ctc_head``; references add ``ctc_logprobs`` and NeMo's greedy CTC output);
  ``rnnt_local`` — ``EncDecRNNTBPEModel`` whose encoder uses ``rel_pos_local_attn`` with
  ``att_context_size [8, 8]`` (NeMo's sliding-window attention, as parakeet models do for long audio);
  ``rnnt_streaming`` — a cache-aware streaming encoder (causal downsampling, causal convolutions,
  ``chunked_limited`` attention, ``att_context_size [[16, 3], [16, 0]]``: references for both). All:
  the FastConformer of ``rnnt_bpe.nemo``.
  Writes ``<name>.nemo``, ``reference/<name>.npz`` and ``reference/<name>.json`` (``encoder_out``
  [B, D, T'], ``greedy_*`` -1 padded, ``joint_*`` for frames 0..4 of utterance 0 after <SOS>). Only
  ``ctc_bpe``'s reference holds the batch's ``features``: every model has its front end, and
  `batch_features` checks that NeMo's features of each are those, bit for bit.
* ``small`` (for asrdecode bench transducer-greedy, ~56 MB each, not committed): ``rnnt_small`` and
  ``tdt_small`` (durations 0..4) — NeMo's FastConformer-Transducer "Small" row (d_model 176, 16 layers,
  4 heads, ff x4, conv kernel 9, pred/joint 320, 1 LSTM layer) with a 1024-token BPE tokenizer trained
  here on the words of data/lm/sphinx-en-us-72k.arpa.gz. Only ``<name>.nemo`` + a small JSON.

Every model is built from config after ``torch.manual_seed(seed)`` (nothing downloaded), then only its
joint output layers are re-drawn so that greedy decoding is not degenerate (a random encoder's frames
all point one way: random heads never emit blank or loop on one token): ``joint.enc`` orthogonal to the
mean encoder direction; ``joint.pred`` scaled by ``pred_gain``; each token row of the last joint Linear
points where the projected prediction output *drops* after that token was fed (so a token discourages
its own repetition) plus noise; blank and duration rows random; the blank bias is bisected so greedy
decoding emits ~0.3 tokens per encoder frame, for each ``pred_gain`` of a small grid, and the grid
point with the fewest max_symbols hits / repeats is kept. The model is then saved with ``save_to``,
restored with ``ASRModel.restore_from`` and all references are computed from the restored model.

    /work/nemo-venv/bin/python scripts/make_nemo_fixtures.py --set tiny --out tests/fixtures/nemo
    /work/nemo-venv/bin/python scripts/make_nemo_fixtures.py --set small --out out/nemo-small
    /work/nemo-venv/bin/python scripts/make_nemo_fixtures.py --set attention --out tests/fixtures/nemo

``--set ctc``: ``conformer_ctc_char`` — ``EncDecCTCModel``, a Conformer (not Fast) encoder with
``striding`` subsampling 4x and kernel 31, character labels (the shared ctc_bpe config otherwise);
``quartznet_char`` and ``citrinet_bpe`` — ConvASR encoders in the QuartzNet (char) and Citrinet
(BPE-128, squeeze-excitation, strided residual blocks) layouts, scaled down.

``--set streaming``: no new model; NeMo's cache-aware streaming simulation of ``rnnt_streaming`` for
both of its contexts (`streaming_reference`), written to ``reference/rnnt_streaming_stream.npz``.

``--set buffered``: no new model; NeMo's buffered chunked inference (``FrameBatchASR``) of ``ctc_bpe``
on a 79 s input (`buffered_reference`), written to ``reference/ctc_bpe_buffered.npz``.
``--set buffered-rnnt``: no new model; NeMo's buffered inference of the transducer ``rnnt_bpe``
(``BatchedFrameASRRNNT``, "middle" merge) on the same input (`buffered_rnnt_reference`), written to
``reference/rnnt_bpe_buffered.npz``.

``--set aed`` (one model per run: ``--only NAME``; NeMo restores a timestamp model after the first):
Canary-like ``EncDecMultiTaskModel`` fixtures trained 300 steps on the clips' transcripts
(``AED_SPECS``: canary2 / canary prompts, pre- / post-LN decoders, the aggregate or a single
sentencepiece tokenizer, frame tokens) and NeMo's references: features, encoder states,
teacher-forced log-probs, greedy, beam (each utterance alone and batched), a ``de`` prompt,
``transcribe`` texts and word times. ``--set aed-large``: an 87M-parameter random model for
``asrdecode bench aed --large``.

``--set attention``: no new model; NeMo's ``change_attention_model("rel_pos_local_attn", [8, 8])`` on the
shared ctc_bpe / rnnt_bpe fixtures and their outputs (`attention_switch_reference`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import hashlib
import io
import json
import platform
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "nemo"
CHAR_LABELS = [" ", *"abcdefghijklmnopqrstuvwxyz", "'"]
MAX_SYMBOLS = 10
TARGET_RATE = 0.3  # greedy tokens per encoder frame after tuning
JOINT_FRAMES = 5
# the committed models' sizes: the smallest that still exercise each family (80 mels, dw_striding x8)
TINY_ENCODER = {"d_model": 16, "n_heads": 2, "n_layers": 2, "subsampling_conv_channels": 8}
TINY_PRED = TINY_JOINT = 16
LM_ALPHA = 0.5  # the token LM's weight in the references that use lm_tokens.arpa
QUIET_PIECES = ("<unk>", "\u2581")  # BPE outputs the tuned heads never pick (their texts space words apart)

SPECS = {
    # --set base: the RNN-T and TDT models the other sets start from, with NeMo's LM-fused greedy and
    # batched beam decodings (`extra_decodings`)
    "rnnt_bpe": {"set": "base", "seed": 1, "vocab": "bpe128", "pred_layers": 1, "durations": None},
    "tdt_bpe": {"set": "base", "seed": 2, "vocab": "bpe128", "pred_layers": 1, "durations": [0, 1, 2, 3, 4]},
    "rnnt_char": {"set": "tiny", "seed": 11, "vocab": "char", "pred_layers": 1, "durations": None},
    "rnnt_lstm2": {"set": "tiny", "seed": 12, "vocab": "bpe128", "pred_layers": 2, "durations": None},
    "hybrid_rnnt_ctc": {
        "set": "tiny",
        "seed": 31,
        "vocab": "bpe128",
        "pred_layers": 1,
        "durations": None,
        "hybrid": True,
    },
    "hybrid_tdt_ctc": {
        "set": "tiny",
        "seed": 32,
        "vocab": "bpe128",
        "pred_layers": 1,
        "durations": [0, 1, 2, 3, 4],
        "hybrid": True,
    },
    "rnnt_local": {  # NeMo's sliding-window (Longformer) attention, the parakeet long-form setting
        "set": "tiny",
        "seed": 33,
        "vocab": "bpe128",
        "pred_layers": 1,
        "durations": None,
        "encoder": {"self_attention_model": "rel_pos_local_attn", "att_context_size": [8, 8]},
    },
    "rnnt_streaming": {  # cache-aware streaming FastConformer (NeMo's *_streaming configs), offline
        "set": "tiny",
        "seed": 34,
        "vocab": "bpe128",
        "pred_layers": 1,
        "durations": None,
        "encoder": {
            "causal_downsampling": True,
            "att_context_style": "chunked_limited",
            "att_context_size": [[16, 3], [16, 0]],
            "conv_context_size": "causal",
        },
    },
    "rnnt_small": {"set": "small", "seed": 21, "vocab": "bpe1024", "pred_layers": 1, "durations": None},
    "tdt_small": {
        "set": "small",
        "seed": 22,
        "vocab": "bpe1024",
        "pred_layers": 1,
        "durations": [0, 1, 2, 3, 4],
    },
}
SMALL_ENCODER = {  # NeMo fast-conformer_transducer_bpe.yaml, "Small (14M)" row
    "n_layers": 16, "d_model": 176, "n_heads": 4, "conv_kernel_size": 9, "ff_expansion_factor": 4,
    "subsampling_conv_channels": 256, "xscaling": True,
}  # fmt: skip
ENCODER_KEYS = (
    "n_layers", "d_model", "n_heads", "ff_expansion_factor", "subsampling", "subsampling_factor",
    "subsampling_conv_channels", "conv_kernel_size",
)  # fmt: skip


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name.removeprefix("./"): tf.extractfile(m).read() for m in tf.getmembers() if m.isreg()}


def tiny_sizes(cfg: dict) -> dict:
    """A FastConformer CTC or transducer config (a plain dict) at the `TINY_ENCODER` sizes."""
    cfg["encoder"].update(TINY_ENCODER)
    d_model = TINY_ENCODER["d_model"]
    if "joint" in cfg:
        cfg["model_defaults"].update(enc_hidden=d_model, pred_hidden=TINY_PRED, joint_hidden=TINY_JOINT)
        cfg["decoder"]["prednet"]["pred_hidden"] = TINY_PRED
        cfg["joint"]["jointnet"].update(
            encoder_hidden=d_model, pred_hidden=TINY_PRED, joint_hidden=TINY_JOINT
        )
    else:
        cfg["decoder"]["feat_in"] = d_model
    return cfg


def base_config(durations: list[int] | None) -> dict:
    """The committed RNN-T (or TDT) fixture's model config at the tiny sizes, as a plain dict."""
    src = FIX / ("tdt_bpe.nemo" if durations else "rnnt_bpe.nemo")
    return tiny_sizes(yaml.safe_load(_members(src)["model_config.yaml"]))


def slim_sentencepiece(data: bytes, lowercase: bool) -> bytes:
    """The same sentencepiece model (pieces, ids, scores, whitespace handling) with a small normalizer
    in place of the ~240 KB NFKC table sentencepiece embeds by default: A-Z folded to a-z (the rule
    the fixture BPE-128's case folding needs) or none. Idempotent; lowercase ASCII encodes as before."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(data)
    charsmap = b""
    if lowercase:
        with tempfile.TemporaryDirectory() as tmp:
            rules, text = Path(tmp) / "lower.tsv", Path(tmp) / "text.txt"
            rules.write_text("".join(f"{c:X}\t{c + 32:X}\n" for c in range(ord("A"), ord("Z") + 1)))
            text.write_text("hello world this is a tiny text\n" * 50)
            spm.SentencePieceTrainer.train(
                input=str(text), model_prefix=str(Path(tmp) / "lower"), vocab_size=20, model_type="bpe",
                normalization_rule_tsv=str(rules), minloglevel=2,
            )  # fmt: skip
            rule_model = sentencepiece_model_pb2.ModelProto()
            rule_model.ParseFromString((Path(tmp) / "lower.model").read_bytes())
            charsmap = rule_model.normalizer_spec.precompiled_charsmap
    model.normalizer_spec.name = "lowercase" if lowercase else "identity"
    model.normalizer_spec.precompiled_charsmap = charsmap
    slim = model.SerializeToString()
    before = spm.SentencePieceProcessor(model_proto=data)
    after = spm.SentencePieceProcessor(model_proto=slim)
    texts = [line.split(" ", 1)[1] for line in (FIX / "audio" / "text").read_text().splitlines()]
    for text in texts + ["Go Forward"] * lowercase:
        if before.encode(text) != after.encode(text):
            raise SystemExit(f"slim_sentencepiece: {text!r} encodes differently")
    return slim


def bpe128_dir(tmp: Path) -> Path:
    """The fixture BPE-128 sentencepiece files, unpacked for NeMo's tokenizer setup (the model with
    the lowercase-only normalizer of `slim_sentencepiece`)."""
    members = _members(FIX / "rnnt_bpe.nemo")
    out = tmp / "bpe128"
    if out.is_dir():
        return out
    out.mkdir()
    for name, data in members.items():
        if name.endswith("_tokenizer.model"):
            (out / "tokenizer.model").write_bytes(slim_sentencepiece(data, lowercase=True))
        if name.endswith("_vocab.txt"):
            (out / "vocab.txt").write_bytes(data)
        if name.endswith("_tokenizer.vocab"):
            (out / "tokenizer.vocab").write_bytes(data)
    return out


def canary_bpe_dir(tmp: Path, special: list[str]) -> Path:
    """One sentencepiece BPE model (256 pieces) trained on the words of the project's pocketsphinx LM
    with Canary's special tokens as user-defined symbols: the layout of canary-1b-v2's tokenizer."""
    import sentencepiece as spm

    out = tmp / "canary_bpe"
    out.mkdir(exist_ok=True)
    words = (bpe1024_dir(tmp) / "vocab.txt").read_text()  # makes bpe1024's folder: its pieces as text
    text = out / "words.txt"
    text.write_text(words.replace("\u2581", ""))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(out / "tokenizer"), vocab_size=256 + len(special), model_type="bpe",
        character_coverage=1.0, num_threads=1, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        user_defined_symbols=special, normalization_rule_name="identity", minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    (out / "vocab.txt").write_text("".join(sp.id_to_piece(i) + "\n" for i in range(sp.get_piece_size())))
    text.unlink()
    return out


def bpe1024_dir(tmp: Path) -> Path:
    """A 1024-token BPE sentencepiece model trained on the words of the project's pocketsphinx LM."""
    import sentencepiece as spm

    words = []
    with gzip.open(ROOT / "data" / "lm" / "sphinx-en-us-72k.arpa.gz", "rt") as f:
        section = False
        for line in f:
            if line.startswith("\\1-grams:"):
                section = True
                continue
            if section and line.startswith("\\"):
                break
            parts = line.split("\t")
            if section and len(parts) >= 2 and parts[1].strip() not in ("<s>", "</s>", "<unk>"):
                words.append(parts[1].strip().lower())
    out = tmp / "bpe1024"
    if out.is_dir():  # trained once per run
        return out
    out.mkdir()
    text = out / "words.txt"
    text.write_text("\n".join(words) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(out / "tokenizer"), vocab_size=1024, model_type="bpe",
        character_coverage=1.0, num_threads=1, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        normalization_rule_name="nmt_nfkc_cf", minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    (out / "vocab.txt").write_text("".join(sp.id_to_piece(i) + "\n" for i in range(sp.get_piece_size())))
    text.unlink()
    return out


def model_config(name: str, tmp: Path):
    """(model class, OmegaConf config) for one spec."""
    from omegaconf import OmegaConf

    spec = SPECS[name]
    cfg = base_config(spec["durations"])
    cfg.pop("nemo_version", None)
    cfg.pop("target", None)
    for section in ("train_ds", "test_ds"):
        cfg[section] = None
    if spec["set"] == "small":
        cfg["encoder"].update(SMALL_ENCODER)
        cfg["model_defaults"].update(enc_hidden=176, pred_hidden=320, joint_hidden=320)
        cfg["decoder"]["prednet"]["pred_hidden"] = 320
        cfg["joint"]["jointnet"].update(encoder_hidden=176, pred_hidden=320, joint_hidden=320)
    cfg["decoder"]["prednet"]["pred_rnn_layers"] = spec["pred_layers"]
    cfg["encoder"].update(spec.get("encoder", {}))
    if spec["vocab"] == "char":
        from nemo.collections.asr.models import EncDecRNNTModel

        cfg.pop("tokenizer")
        cfg["labels"] = list(CHAR_LABELS)
        cfg["decoder"]["vocab_size"] = len(CHAR_LABELS)
        cfg["joint"]["num_classes"] = len(CHAR_LABELS)
        cfg["joint"]["vocabulary"] = list(CHAR_LABELS)
        return EncDecRNNTModel, OmegaConf.create(cfg)
    from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel

    folder = bpe128_dir(tmp) if spec["vocab"] == "bpe128" else bpe1024_dir(tmp)
    cfg["tokenizer"] = {"dir": str(folder), "type": "bpe"}
    for key in ("labels",):
        cfg.pop(key, None)
    cfg["joint"].pop("vocabulary", None)
    cfg["decoder"].pop("vocab_size", None)
    cfg["joint"].pop("num_classes", None)
    if spec.get("hybrid"):  # NeMo's fastconformer_hybrid_*_ctc_bpe.yaml: aux_ctc with a ConvASRDecoder
        cfg["aux_ctc"] = {
            "ctc_loss_weight": 0.3,
            "use_cer": False,
            "ctc_reduction": "mean_batch",
            "decoder": {
                "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
                "feat_in": cfg["encoder"]["d_model"],
                "num_classes": -1,
                "vocabulary": [],
            },
            "decoding": {"strategy": "greedy"},
        }
        return EncDecHybridRNNTCTCBPEModel, OmegaConf.create(cfg)
    return EncDecRNNTBPEModel, OmegaConf.create(cfg)


def set_greedy(model, loop_labels: bool = True) -> dict:
    """greedy_batch, max_symbols 10, no CUDA graphs; returns the overrides."""
    from omegaconf import OmegaConf

    over = {
        "strategy": "greedy_batch",
        "greedy": {"max_symbols": MAX_SYMBOLS, "loop_labels": loop_labels, "use_cuda_graph_decoder": False},
    }
    if model.cfg.decoding.get("model_type") == "tdt":
        over["tdt_include_token_duration"] = True
    base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
    model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
    return over


@torch.inference_mode()
def greedy(model, enc: torch.Tensor, enc_len: torch.Tensor) -> list:
    return model.decoding.rnnt_decoder_predictions_tensor(
        encoder_output=enc, encoded_lengths=enc_len, return_hypotheses=True
    )


def greedy_stats(hyps, enc_len: torch.Tensor) -> dict:
    """Tokens per frame and the degeneracies the tuning avoids."""
    tokens = [h.y_sequence.tolist() for h in hyps]
    frames = [torch.as_tensor(h.timestamp).tolist() for h in hyps]
    n_tok = sum(len(t) for t in tokens)
    hits = sum(sum(1 for f in set(fr) if fr.count(f) >= MAX_SYMBOLS) for fr in frames)
    repeats = sum(sum(1 for a, b in zip(t, t[1:], strict=False) if a == b) for t in tokens)
    return {
        "rate": n_tok / float(enc_len.sum()),
        "tokens": n_tok,
        "max_symbols_hits": hits,
        "repeats": repeats,
        "distinct_tokens": len({x for t in tokens for x in t}),
        "distinct_outputs": len({tuple(t) for t in tokens}),
        "empty_outputs": sum(1 for t in tokens if not t),
    }


def quiet_rows(model) -> list[int]:
    """The output rows of `QUIET_PIECES` in a BPE model's vocabulary (none for characters)."""
    vocab = list(model.tokenizer.vocab) if hasattr(model, "tokenizer") and model.tokenizer else []
    return [i for i, piece in enumerate(vocab) if piece in QUIET_PIECES]


@torch.inference_mode()
def tune_heads(model, enc: torch.Tensor, enc_len: torch.Tensor, seed: int) -> dict:
    """Re-draw the joint output layers so greedy decoding is not degenerate (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed + 1000)
    joint, dec = model.joint, model.decoder
    frames = torch.cat([enc[b, :, : int(enc_len[b])].T for b in range(enc.shape[0])])  # [N, D]
    u = frames.mean(0)
    u = u / u.norm()
    w_enc = torch.empty_like(joint.enc.weight)
    torch.nn.init.orthogonal_(w_enc, gain=4.0, generator=gen)
    joint.enc.weight.copy_(w_enc - (w_enc @ u)[:, None] * u[None])
    joint.enc.bias.zero_()
    pred0 = joint.pred.weight.clone()
    out_layer = joint.joint_net[-1]
    n_out = out_layer.weight.shape[0]
    n_dur = (
        len(model.cfg.decoding.get("durations") or []) if model.cfg.decoding.get("model_type") == "tdt" else 0
    )
    blank = n_out - n_dur - 1
    vocab = blank
    # prediction-net outputs after random histories h (starting with <SOS>) and after h + token k
    hist = torch.randint(0, vocab, (16, 3), generator=gen)
    sos = torch.full((16, 1), blank, dtype=torch.long)
    g_h, state = dec.predict(torch.cat([sos, hist], 1), state=None, add_sos=False, batch_size=16)
    g_h = g_h[:, -1]  # [16, H]
    states = [s.repeat_interleave(vocab, dim=1) for s in state]
    toks = torch.arange(vocab).repeat(16)[:, None]
    g_hk, _ = dec.predict(toks, state=states, add_sos=False, batch_size=16 * vocab)
    g_hk = g_hk[:, -1].reshape(16, vocab, -1)
    noise_rows = torch.randn(n_out, out_layer.weight.shape[1], generator=gen)
    best = None
    for pred_gain in (1.0, 2.0, 4.0, 8.0):
        joint.pred.weight.copy_(pred0 * pred_gain)
        p_h = joint.pred(g_h).mean(0)  # [J]
        p_hk = joint.pred(g_hk).mean(0)  # [V, J]
        rows = torch.relu(p_h[None] - p_hk)
        rows = rows / rows.norm(dim=1, keepdim=True).clamp(min=1e-6) * 4.0
        weight = noise_rows * 4.0
        weight[:vocab] = rows + 0.5 * noise_rows[:vocab]
        out_layer.weight.copy_(weight)
        out_layer.bias.zero_()
        out_layer.bias[quiet_rows(model)] = -30.0
        lo, hi = -40.0, 60.0
        for _ in range(14):  # more blank bias -> fewer tokens
            mid = 0.5 * (lo + hi)
            out_layer.bias[blank] = mid
            stats = greedy_stats(greedy(model, enc, enc_len), enc_len)
            lo, hi = (mid, hi) if stats["rate"] > TARGET_RATE else (lo, mid)
        out_layer.bias[blank] = 0.5 * (lo + hi)
        stats = greedy_stats(greedy(model, enc, enc_len), enc_len)
        score = (
            abs(stats["rate"] - TARGET_RATE) * 10
            + stats["max_symbols_hits"]
            + stats["repeats"] / max(stats["tokens"], 1) * 10
            + stats["empty_outputs"] * 5
        )
        cand = {"pred_gain": pred_gain, "blank_bias": round(float(out_layer.bias[blank]), 3), **stats}
        print(f"  tune pred_gain={pred_gain}: {cand} score={score:.3f}", flush=True)
        if best is None or score < best[0]:
            best = (score, cand, [p.clone() for p in (joint.pred.weight, out_layer.weight, out_layer.bias)])
    _, cand, (w_pred, w_out, b_out) = best
    joint.pred.weight.copy_(w_pred)
    out_layer.weight.copy_(w_out)
    out_layer.bias.copy_(b_out)
    return cand


@torch.inference_mode()
def tune_ctc_head(model, enc: torch.Tensor, enc_len: torch.Tensor, seed: int, head=None, gain=4.0) -> dict:
    """A CTC head (1x1 conv over encoder frames) re-drawn like the joint: token rows orthogonal to the
    mean encoder direction (so frames disagree on their best token), scaled to logits of about `gain`
    spread, blank bias bisected so that ~30% of the valid frames' argmax is a token."""
    gen = torch.Generator().manual_seed(seed + 2000)
    head = head if head is not None else model.ctc_decoder  # a hybrid's aux CTC head by default
    conv = head.decoder_layers[0]
    frames = torch.cat([enc[b, :, : int(enc_len[b])].T for b in range(enc.shape[0])])  # [N, D]
    u = frames.mean(0)
    u = u / u.norm()
    w = torch.randn(conv.weight.shape[0], conv.weight.shape[1], generator=gen)
    w = (w - (w @ u)[:, None] * u[None]) * (gain / frames.std(0).norm())
    conv.weight.copy_(w[:, :, None])
    conv.bias.zero_()
    conv.bias[quiet_rows(model)] = -30.0
    blank = conv.weight.shape[0] - 1

    def token_rate() -> float:
        logits = head(encoder_output=enc)
        best = logits.argmax(-1)
        valid = torch.arange(best.shape[1])[None] < enc_len[:, None]
        return float(((best != blank) & valid).sum() / valid.sum())

    lo, hi = -40.0, 60.0
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        conv.bias[blank] = mid
        lo, hi = (mid, hi) if token_rate() > TARGET_RATE else (lo, mid)
    conv.bias[blank] = 0.5 * (lo + hi)
    return {"ctc_blank_bias": round(float(conv.bias[blank]), 3), "ctc_token_frames": token_rate()}


@torch.inference_mode()
def ctc_reference(model, enc: torch.Tensor, enc_len: torch.Tensor) -> dict[str, np.ndarray]:
    """A hybrid's CTC head: log-probs [B, T, V+1] and NeMo's greedy CTC decoding of them (its
    hypotheses hold the per-frame argmax labels, blanks and repeats included, and the text)."""
    logprobs = model.ctc_decoder(encoder_output=enc)
    hyps = model.ctc_decoding.ctc_decoder_predictions_tensor(
        logprobs, decoder_lengths=enc_len, return_hypotheses=True
    )
    labels = [torch.as_tensor(h.y_sequence).tolist() for h in hyps]
    return {
        "ctc_logprobs": logprobs.float().numpy(),
        "ctc_greedy_frame_labels": padded(labels),
        "ctc_greedy_frame_labels_len": np.array([len(t) for t in labels], dtype=np.int32),
        "ctc_greedy_text": np.array([h.text for h in hyps]),
    }


def audio_batch() -> dict[str, np.ndarray]:
    """The six clips of audio/ in the order of audio/text, float32, zero-padded: the batch the tests
    read (tests/helpers/nemo_audio.py, which needs only numpy and soundfile)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_audio import audio_batch as fixture_batch

    return fixture_batch()


@torch.inference_mode()
def front(model, audio: dict[str, np.ndarray]):
    feats, feats_len = model.preprocessor(
        input_signal=torch.from_numpy(audio["audio"]), length=torch.from_numpy(audio["audio_len"])
    )
    enc, enc_len = model.encoder(audio_signal=feats, length=feats_len)
    return feats, feats_len, enc, enc_len


def batch_features(
    name: str, out: Path, feats: torch.Tensor, feats_len: torch.Tensor
) -> dict[str, np.ndarray]:
    """``features`` and ``features_len`` for ``ctc_bpe``'s reference; every other model has the same
    preprocessor config, and its NeMo features are checked to be ctc_bpe's, bit for bit, instead of
    being stored again (``features_len`` only)."""
    if name == "ctc_bpe":
        return {"features": feats.numpy(), "features_len": feats_len.numpy()}
    stored = np.load(out / "reference" / "ctc_bpe.npz", allow_pickle=False)
    if not np.array_equal(stored["features"], feats.numpy()):
        raise SystemExit(f"{name}: NeMo's features differ from ctc_bpe's")
    return {"features_len": feats_len.numpy()}


def padded(rows: list[list[int]]) -> np.ndarray:
    out = np.full((len(rows), max(1, max(len(r) for r in rows))), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@torch.inference_mode()
def joint_reference(model, enc: torch.Tensor) -> dict[str, np.ndarray]:
    """Joint check for frames 0..4 of utterance 0 after the <SOS> step (blank id, zero state)."""
    joint, dec = model.joint, model.decoder
    frames = enc[0, :, :JOINT_FRAMES].T.contiguous()
    blank = dec.blank_idx
    g, (h, c) = dec.predict(torch.tensor([[blank]]), state=None, add_sos=False, batch_size=1)
    f = joint.project_encoder(frames)
    p = joint.project_prednet(g[0, 0])
    logits = joint.joint_net(f + p)
    nemo_out = joint.joint_after_projection(f[None, :, None], p[None, None, None])[0, :, 0]
    n_tok = blank + 1
    out = {
        "joint_encoder_frames": frames,
        "joint_enc_proj": f,
        "joint_pred_sos_out": g[0, 0],
        "joint_pred_sos_h": h[:, 0],
        "joint_pred_sos_c": c[:, 0],
        "joint_pred_proj": p,
        "joint_logits": logits,
        "joint_logprobs": logits[:, :n_tok].log_softmax(-1),
        "joint_nemo_cpu_output": nemo_out,
    }
    if logits.shape[-1] > n_tok:
        out["joint_duration_logprobs"] = logits[:, n_tok:].log_softmax(-1)
    return {k: v.float().numpy() for k, v in out.items()}


def hyp_arrays(hyps, prefix: str, tdt: bool) -> dict[str, np.ndarray]:
    tokens = [h.y_sequence.tolist() for h in hyps]
    out = {
        f"{prefix}_tokens": padded(tokens),
        f"{prefix}_tokens_len": np.array([len(t) for t in tokens], dtype=np.int32),
        f"{prefix}_text": np.array([h.text for h in hyps]),
        f"{prefix}_score": np.array([float(h.score) for h in hyps], dtype=np.float32),
        f"{prefix}_timestamps": padded([torch.as_tensor(h.timestamp).tolist() for h in hyps]),
    }
    if tdt:
        out[f"{prefix}_durations"] = padded([torch.as_tensor(h.token_duration).tolist() for h in hyps])
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def gzip_nemo(path: Path) -> bool:
    """Rewrite a plain-tar ``.nemo`` as a gzipped tar with the same members (NeMo and asrdecode
    read either; about a third of the bytes: the mel filterbank is mostly zeros), deterministically
    (member and gzip times 0). False if it was gzipped already."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        return False
    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz,
        tarfile.open(fileobj=io.BytesIO(data)) as src,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src.getmembers():
            member.mtime = 0
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
    path.write_bytes(out.getvalue())
    return True


def pack_fixtures(out: Path) -> dict:
    """``--set pack``: every plain-tar ``.nemo`` in ``out`` gzipped (`gzip_nemo`), the ``sha256``
    of the references that name it updated."""
    packed = {}
    for path in sorted(out.glob("*.nemo")):
        before = sha256(path)
        if gzip_nemo(path):
            packed[path.name] = (before, sha256(path))
    for ref in sorted((out / "reference").glob("*.json")):
        text = ref.read_text()
        new = text
        for old_hash, new_hash in packed.values():
            new = new.replace(old_hash, new_hash)
        if new != text:
            ref.write_text(new)
    return {name: hashes[1] for name, hashes in packed.items()}


def save_reference(out: Path, name: str, path: Path, model, arrays: dict, seed: int) -> tuple[Path, dict]:
    """Write ``reference/<name>.npz``; returns its folder and the report's common fields."""
    ref = out / "reference"
    ref.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(ref / f"{name}.npz", **arrays)
    info = {
        "model": name,
        "class": type(model).__name__,
        "sha256": sha256(path),
        "npz_sha256": sha256(ref / f"{name}.npz"),
        "seed": seed,
    }
    return ref, info


def _jasper(filters, repeat, kernel, stride=1, dilation=1, residual=False, **extra) -> dict:
    block = {"filters": filters, "repeat": repeat, "kernel": [kernel], "stride": [stride]}
    block.update(dilation=[dilation], dropout=0.0, residual=residual, separable=True, **extra)
    return block


CONVASR = "nemo.collections.asr.modules.ConvASREncoder"
SE = {"se": True, "se_context_size": -1, "se_reduction_ratio": 8}
STRIDE = {"stride_last": True, "residual_mode": "stride_add"}
CTC_SPECS = {  # CTC models built from the committed ctc_bpe.nemo config with another encoder / vocabulary
    # --set base: the FastConformer CTC itself, its head soft (gain 0.6: about the flat log-probs of the
    # earlier, wider fixture, whose many near alternatives the WFST and lattice tests need)
    "ctc_bpe": {"seed": 40, "vocab": "bpe128", "encoder": {}, "gain": 0.6},
    "conformer_ctc_char": {  # Conformer-CTC (not Fast): striding subsampling 4x, kernel 31, char labels
        "seed": 41,
        "vocab": "char",
        "encoder": {"subsampling": "striding", "subsampling_factor": 4, "conv_kernel_size": 31},
    },
    "quartznet_char": {  # QuartzNet layout (separable convs, residual repeats, ReLU), char labels
        "seed": 42,
        "vocab": "char",
        "encoder": {
            "_target_": CONVASR, "feat_in": 80, "activation": "relu", "conv_mask": True,
            "jasper": [
                _jasper(16, 1, 11, stride=2),
                _jasper(16, 2, 13, residual=True),
                _jasper(24, 2, 15, residual=True),
                _jasper(24, 1, 29, dilation=2),
                _jasper(32, 1, 1),
            ],
        },
    },
    "citrinet_bpe": {  # Citrinet layout (squeeze-excitation, stride_last + stride_add, swish), BPE-128
        "seed": 43,
        "vocab": "bpe128",
        "encoder": {
            "_target_": CONVASR, "feat_in": 80, "activation": "swish", "conv_mask": True,
            "jasper": [
                _jasper(16, 1, 5, **SE),
                _jasper(16, 2, 11, stride=2, residual=True, **SE, **STRIDE),
                _jasper(16, 2, 13, residual=True, **SE),
                _jasper(24, 2, 15, stride=2, residual=True, **SE, **STRIDE),
                _jasper(24, 1, 41, **SE),
                _jasper(32, 1, 1),
            ],
        },
    },
}  # fmt: skip


def build_ctc(name: str, out: Path) -> dict:
    """A random-weight CTC model (head tuned as `tune_ctc_head`), saved, restored, and NeMo's
    features, encoder output, log-probs and greedy CTC decoding on the fixture batch."""
    from nemo.collections.asr.models import ASRModel, EncDecCTCModel, EncDecCTCModelBPE
    from omegaconf import OmegaConf

    spec = CTC_SPECS[name]
    cfg = tiny_sizes(yaml.safe_load(_members(FIX / "ctc_bpe.nemo")["model_config.yaml"]))
    for key in ("nemo_version", "target", "tokenizer"):
        cfg.pop(key, None)
    for section in ("train_ds", "test_ds"):
        cfg[section] = None
    if spec["vocab"] == "char":
        cfg["validation_ds"] = None
    if "_target_" in spec["encoder"]:  # another encoder class: its whole section
        cfg["encoder"] = dict(spec["encoder"])
        cfg["decoder"]["feat_in"] = spec["encoder"]["jasper"][-1]["filters"]
    else:
        cfg["encoder"].update(spec["encoder"])
    torch.manual_seed(spec["seed"])
    if spec["vocab"] == "char":
        cfg["labels"] = list(CHAR_LABELS)
        cfg["decoder"].update(num_classes=len(CHAR_LABELS), vocabulary=list(CHAR_LABELS))
        model = EncDecCTCModel(cfg=OmegaConf.create(cfg)).eval()
    else:
        cfg["tokenizer"] = {"dir": str(bpe128_dir(Path(tempfile.mkdtemp()))), "type": "bpe"}
        cfg["decoder"].update(num_classes=-1, vocabulary=[])
        model = EncDecCTCModelBPE(cfg=OmegaConf.create(cfg)).eval()
    audio = audio_batch()
    _, _, enc, enc_len = front(model, audio)
    tuning = tune_ctc_head(model, enc, enc_len, spec["seed"], head=model.decoder, gain=spec.get("gain", 4.0))
    path = out / f"{name}.nemo"
    model.save_to(str(path))
    restored = ASRModel.restore_from(str(path), map_location="cpu").eval()
    feats, feats_len, enc, enc_len = front(restored, audio)
    with torch.inference_mode():
        log_probs = restored.decoder(encoder_output=enc)
        hyps = restored.decoding.ctc_decoder_predictions_tensor(
            log_probs, decoder_lengths=enc_len, return_hypotheses=True
        )
    labels = [torch.as_tensor(h.y_sequence).tolist() for h in hyps]
    blank = log_probs.shape[-1] - 1
    tokens = [[t for i, t in enumerate(row) if t != blank and (i == 0 or t != row[i - 1])] for row in labels]
    arrays = {
        "utt_ids": audio["utt_ids"],
        "audio_len": audio["audio_len"],
        **batch_features(name, out, feats, feats_len),
        "encoder_out": enc.numpy(),
        "encoder_len": enc_len.numpy(),
        "log_probs": log_probs.float().numpy(),
        "greedy_frame_labels": padded(labels),
        "greedy_frame_labels_len": np.array([len(t) for t in labels], dtype=np.int32),
        "greedy_tokens": padded(tokens),  # the frame labels with repeats merged and blanks dropped
        "greedy_tokens_len": np.array([len(t) for t in tokens], dtype=np.int32),
        "greedy_text": np.array([h.text for h in hyps]),
        "greedy_score": np.array([float(h.score) for h in hyps], dtype=np.float32),
    }
    ref, info = save_reference(out, name, path, restored, arrays, spec["seed"])
    info |= {
        "encoder": OmegaConf.to_container(restored.cfg.encoder),
        "vocabulary": list(restored.decoder.vocabulary),
        "tuning": tuning,
        "texts": [h.text for h in hyps],
        "versions": versions(),
    }
    (ref / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def plain_config(cfg) -> dict:
    """An OmegaConf decoding config as JSON: enums by value, the token LM by its file name."""
    import enum

    from omegaconf import OmegaConf

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, str) and value == str(FIX / "lm_tokens.arpa"):
            return "lm_tokens.arpa"
        return value

    return plain(OmegaConf.to_container(cfg, resolve=True))


def decodings_of(tdt: bool) -> dict[str, dict]:
    """The overrides of the base models' extra references: greedy with the token LM, ALSD++ with and
    without it (lm_weighted_full, late pruning) and, for RNN-T, AES++ (NeMo's defaults)."""
    lm = {"ngram_lm_model": str(FIX / "lm_tokens.arpa"), "ngram_lm_alpha": LM_ALPHA}
    greedy = {"max_symbols": MAX_SYMBOLS, "loop_labels": True, "use_cuda_graph_decoder": False}
    beam = {"beam_size": 4, "return_best_hypothesis": True, "score_norm": True, "allow_cuda_graphs": False}
    out = {
        "greedy_lm": {"strategy": "greedy_batch", "greedy": {**greedy, **lm}},
        "malsd": {"strategy": "malsd_batch", "beam": {**beam, "max_symbols": MAX_SYMBOLS}},
        "malsd_lm": {
            "strategy": "malsd_batch",
            "beam": {
                **beam,
                "max_symbols": MAX_SYMBOLS,
                **lm,
                "blank_lm_score_mode": "lm_weighted_full",
                "pruning_mode": "late",
            },
        },  # fmt: skip
    }
    if tdt:
        out["greedy_lm"]["tdt_include_token_duration"] = True
    else:
        out["maes"] = {
            "strategy": "maes_batch",
            "beam": {**beam, "maes_num_steps": 2, "maes_expansion_beta": 2, "maes_expansion_gamma": 2.3},
        }
    return out


@torch.inference_mode()
def extra_decodings(model, enc: torch.Tensor, enc_len: torch.Tensor, tdt: bool) -> tuple[dict, dict]:
    """NeMo's `decodings_of` on the restored model's encoder output: (arrays, report entries with the
    exact merged decoding config). TDT: the LM-fused greedy's per-token durations of each utterance
    decoded alone as well (``greedy_lm_durations_single``; README: NeMo's batched TDT greedy can
    report another frame's duration)."""
    from omegaconf import OmegaConf

    arrays, report = {}, {}
    saved = OmegaConf.to_container(model.cfg.decoding)  # each decoding from this one, not the last
    for label, over in decodings_of(tdt).items():
        base = OmegaConf.create(saved)
        model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
        hyps = greedy(model, enc, enc_len)
        arrays.update(hyp_arrays(hyps, label, tdt))
        single = [
            greedy(model, enc[b : b + 1, :, : int(enc_len[b])], enc_len[b : b + 1])[0]
            for b in range(len(hyps))
        ]
        if tdt and label == "greedy_lm":
            arrays[f"{label}_durations_single"] = padded(
                [torch.as_tensor(h.token_duration).tolist() for h in single]
            )
        report[label] = {
            "overrides": plain_config(OmegaConf.create(over)),
            "decoding_config": plain_config(model.cfg.decoding),
            "nemo_decoder": type(model.decoding.decoding).__name__,
            "batch_equals_single_utterance": all(
                h.y_sequence.tolist() == o.y_sequence.tolist() for h, o in zip(hyps, single, strict=True)
            ),
        }
    set_greedy(model)
    return arrays, report


def build(name: str, out: Path, tmp: Path) -> dict:
    from nemo.collections.asr.models import ASRModel

    spec = SPECS[name]
    cls, cfg = model_config(name, tmp)
    torch.manual_seed(spec["seed"])
    model = cls(cfg=cfg).eval()
    audio = audio_batch()
    _, _, enc, enc_len = front(model, audio)
    set_greedy(model)
    tuning = tune_heads(model, enc, enc_len, spec["seed"])
    if spec.get("hybrid"):
        tuning.update(tune_ctc_head(model, enc, enc_len, spec["seed"]))
    path = out / f"{name}.nemo"
    model.save_to(str(path))
    restored = ASRModel.restore_from(str(path), map_location="cpu").eval()
    same = all(
        torch.equal(v, restored.state_dict()[k])
        for k, v in model.state_dict().items()
        if "num_batches" not in k
    )
    if not same:
        raise SystemExit(f"{name}: restored weights differ")
    overrides = set_greedy(restored)
    feats, feats_len, enc, enc_len = front(restored, audio)
    hyps = greedy(restored, enc, enc_len)
    tdt = spec["durations"] is not None
    single = [
        greedy(restored, enc[b : b + 1, :, : int(enc_len[b])], enc_len[b : b + 1])[0]
        for b in range(len(hyps))
    ]
    batch_vs_single = all(
        h.y_sequence.tolist() == s.y_sequence.tolist()
        and torch.as_tensor(h.timestamp).tolist() == torch.as_tensor(s.timestamp).tolist()
        for h, s in zip(hyps, single, strict=True)
    )
    info = {
        "model": name,
        "class": type(restored).__name__,
        "nemo_file": path.name,
        "nemo_bytes": path.stat().st_size,
        "sha256": sha256(path),
        "seed": spec["seed"],
        "parameters": sum(p.numel() for p in restored.parameters()),
        "versions": versions(),
        "vocabulary": spec["vocab"],
        "vocab_size": int(restored.decoder.vocab_size),
        "blank_id": int(restored.decoder.blank_idx),
        "pred_rnn_layers": spec["pred_layers"],
        "durations": spec["durations"],
        "encoder": {k: restored.cfg.encoder[k] for k in ENCODER_KEYS},
        "tuning": tuning,
        "greedy_stats": greedy_stats(hyps, enc_len),
        "decoding_overrides": overrides,
        "nemo_decoder": [
            type(restored.decoding.decoding).__name__,
            type(restored.decoding.decoding.decoding_computer).__name__,
        ],
        "checks": {
            "save_restore_weights_identical": same,
            "greedy_batch_equals_single_utterance": batch_vs_single,
        },
    }
    if spec["set"] == "small":
        (out / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
        return info
    arrays = {
        "utt_ids": audio["utt_ids"],
        "audio_len": audio["audio_len"],
        **batch_features(name, out, feats, feats_len),
        "encoder_out": enc.numpy(),
        "encoder_len": enc_len.numpy(),
        **hyp_arrays(hyps, "greedy", tdt),
        **joint_reference(restored, enc),
    }
    if tdt:  # per-token durations of single-utterance decoding (tests/fixtures/nemo/README.md)
        arrays["greedy_durations_single"] = padded(
            [torch.as_tensor(h.token_duration).tolist() for h in single]
        )
    if spec.get("hybrid"):
        arrays.update(ctc_reference(restored, enc, enc_len))
    if spec["set"] == "base":
        extra, decodings = extra_decodings(restored, enc, enc_len, tdt)
        arrays.update(extra)
        info["decodings"] = {"greedy": {"overrides": overrides}, **decodings}
    choices = spec.get("encoder", {}).get("att_context_size")
    if choices and isinstance(choices[0], list):  # multi-lookahead: every other context too
        for i, context in enumerate(choices[1:], 1):
            restored.encoder.set_default_att_context_size(context)
            _, _, enc_i, enc_len_i = front(restored, audio)
            arrays[f"encoder_out_ctx{i}"] = enc_i.numpy()
            arrays.update(hyp_arrays(greedy(restored, enc_i, enc_len_i), f"greedy_ctx{i}", tdt))
        restored.encoder.set_default_att_context_size(choices[0])
    ref = out / "reference"
    ref.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(ref / f"{name}.npz", **arrays)
    info["utterances"] = [
        {
            "utt_id": str(u),
            "tokens": h.y_sequence.tolist(),
            "timestamps": torch.as_tensor(h.timestamp).tolist(),
            "text": h.text,
            "score": float(h.score),
        }
        for u, h in zip(audio["utt_ids"], hyps, strict=True)
    ]
    info["arrays"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()}
    info["npz_sha256"] = sha256(ref / f"{name}.npz")
    (ref / f"{name}.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


AED_SPECS = {  # Canary-like EncDecMultiTaskModel: the ctc_bpe front end and encoder, a Transformer decoder
    "aed_canary2": {  # canary2 prompt, pre-LN decoder, encoder 128 -> decoder 96 (a projection)
        "seed": 51, "prompt_format": "canary2", "pre_ln": True, "dec_hidden": 32, "dec_layers": 2,
        "tokens": [
            "<|endoftext|>", "<|startoftranscript|>", "<|nopnc|>", "<|pnc|>", "<|nospeech|>",
            "<|startofcontext|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
            "<|nodiarize|>", "<|emo:undefined|>", "<|en|>", "<|de|>",
        ],
    },
    "aed_canary": {  # canary (1.0) prompt, post-LN decoder, no projection (as wide as the encoder)
        "seed": 52, "prompt_format": "canary", "pre_ln": False, "d_model": 32, "dec_hidden": 32,
        "dec_layers": 2,
        "tokens": ["translate", "transcribe", "en", "de"],
    },
    "aed_bpe": {  # canary2 prompt with one sentencepiece model holding the special tokens (canary-1b-v2's
        # CanaryBPETokenizer) instead of the aggregate tokenizer
        "seed": 55, "prompt_format": "canary2", "pre_ln": True, "dec_hidden": 32, "dec_layers": 2,
        "tokenizer": "bpe",
        "tokens": [
            "<|endoftext|>", "<|startoftranscript|>", "<|nopnc|>", "<|pnc|>", "<|nospeech|>",
            "<|startofcontext|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
            "<|nodiarize|>", "<|emo:undefined|>", "<|en|>", "<|de|>", "<pad>",
        ],
    },
    "aed_timestamps": {  # aed_canary2 trained to write Canary 2's frame tokens around each word
        "seed": 54, "prompt_format": "canary2", "pre_ln": True, "dec_hidden": 32, "dec_layers": 2,
        "timestamps": True,
        "tokens": [
            "<|endoftext|>", "<|startoftranscript|>", "<|nopnc|>", "<|pnc|>", "<|nospeech|>",
            "<|startofcontext|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
            "<|nodiarize|>", "<|emo:undefined|>", "<|en|>", "<|de|>", *[f"<|{i}|>" for i in range(64)],
        ],
    },
}  # fmt: skip
AED_TRAIN_STEPS = 300
AED_BEAM = {"beam_size": 4, "len_pen": 1.0, "max_generation_delta": 50}


def aed_config(name: str, tmp: Path) -> dict:
    """An EncDecMultiTaskModel config in the layout of NeMo's fast-conformer_aed.yaml, scaled down:
    the ctc_bpe preprocessor and encoder, dropout off, no SpecAugment."""
    from nemo.collections.common.tokenizers import CanaryTokenizer

    spec = AED_SPECS[name]
    base = yaml.safe_load(_members(FIX / "ctc_bpe.nemo")["model_config.yaml"])
    encoder = dict(base["encoder"], dropout=0.0, dropout_pre_encoder=0.0, dropout_att=0.0)
    encoder["d_model"] = spec.get("d_model", encoder["d_model"])
    hidden = spec["dec_hidden"]
    if spec.get("tokenizer") == "bpe":
        tokenizer = {
            "dir": str(canary_bpe_dir(tmp, spec["tokens"])), "type": "bpe",
            "custom_tokenizer": {
                "_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryBPETokenizer"
            },
        }  # fmt: skip
    else:
        spl = tmp / f"{name}_spl"
        CanaryTokenizer.build_special_tokenizer(spec["tokens"], spl, force_rebuild=True)
        special = spl / "tokenizer.model"  # special tokens only: no normalizer needed
        special.write_bytes(slim_sentencepiece(special.read_bytes(), lowercase=False))
        bpe = bpe128_dir(tmp)
        tokenizer = {
            "dir": None, "type": "agg",
            "langs": {"spl_tokens": {"dir": str(spl), "type": "bpe"}, "en": {"dir": str(bpe), "type": "bpe"},
                      "de": {"dir": str(bpe), "type": "bpe"}},
            "custom_tokenizer": {
                "_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryTokenizer",
                "tokenizers": None,
            },
        }  # fmt: skip
    return {
        "sample_rate": 16000,
        "prompt_format": spec["prompt_format"],
        "prompt_defaults": [
            {"role": "user", "slots": {"source_lang": "en", "target_lang": "en", "pnc": "yes"}}
        ],
        "model_defaults": {
            "asr_enc_hidden": encoder["d_model"], "lm_enc_hidden": hidden, "lm_dec_hidden": hidden,
        },
        "train_ds": None, "validation_ds": None, "test_ds": None,
        "tokenizer": tokenizer,
        "preprocessor": base["preprocessor"],
        "spec_augment": None,
        "encoder": encoder,
        "transf_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 0, "hidden_size": hidden, "inner_size": 4 * hidden, "num_attention_heads": 4,
            "ffn_dropout": 0.0, "attn_score_dropout": 0.0, "attn_layer_dropout": 0.0, "mask_future": False,
            "pre_ln": True, "pre_ln_final_layer_norm": True,
        },
        "transf_decoder": {
            "_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
            "model_name": None, "pretrained": False, "encoder": None, "pre_ln_final_layer_norm": True,
            "config_dict": {
                "max_sequence_length": 128, "num_token_types": 0, "embedding_dropout": 0.0,
                "learn_positional_encodings": False, "hidden_size": hidden, "inner_size": 4 * hidden,
                "num_layers": spec["dec_layers"], "num_attention_heads": 4, "ffn_dropout": 0.0,
                "attn_score_dropout": 0.0, "attn_layer_dropout": 0.0, "hidden_act": "relu",
                "pre_ln": spec["pre_ln"], "vocab_size": None,
            },
        },
        "head": {
            "_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
            "num_layers": 1, "activation": "relu", "log_softmax": True, "hidden_size": hidden,
            "num_classes": None, "dropout": 0.0, "use_transformer_init": True,
        },
        "decoding": {"strategy": "beam", "return_best_hypothesis": True,
                     "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": 50}},
        "loss": {"_target_": "nemo.collections.common.losses.smoothed_cross_entropy.SmoothedCrossEntropyLoss",
                 "label_smoothing": 0.0, "pad_id": None},
        "optim": {"name": "adam", "lr": 1e-3},
    }  # fmt: skip


def aed_prompt_slots(name: str) -> dict:
    slots = {"source_lang": "en", "target_lang": "en", "pnc": "yes"}
    if AED_SPECS[name]["prompt_format"] == "canary":
        slots["task"] = "transcribe"
    else:  # canary2 asks for every slot (NeMo's defaults for its inference prompts)
        stamps = "yes" if AED_SPECS[name].get("timestamps") else "no"
        slots.update(decodercontext="", emotion="<|emo:undefined|>", itn="no", timestamp=stamps, diarize="no")
    return slots


def timed_text(text: str, samples: int) -> str:
    """A transcript with Canary 2's frame tokens around each word (``<|0|>go<|4|> <|5|>forward<|9|>``):
    synthetic times, the utterance's encoder frames shared evenly among its words (the fixture
    checks how times are read, not where words are)."""
    frames = samples // 160 // 8
    words = text.split()
    parts = []
    for i, word in enumerate(words):
        start, end = (
            i * frames // len(words),
            max((i + 1) * frames // len(words) - 1, i * frames // len(words)),
        )
        parts.append(f"<|{start}|>{word}<|{end}|>")
    return " ".join(parts)


def aed_sequences(model, name: str, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompt + text + end token of each transcript, padded with <pad>: (ids [B, L], lengths,
    prompt length)."""
    rows, prompt_len = [], None
    for text in texts:
        turns = [
            {"role": "user", "slots": aed_prompt_slots(name)},
            {"role": "assistant", "slots": {"text": text, "prompt_language": "en"}},
        ]
        enc = model.prompt.encode_dialog(turns)
        rows.append(enc["input_ids"].tolist())
        prompt_len = len(enc["context_ids"])
    pad = model.tokenizer.pad_id
    ids = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, torch.tensor([len(r) for r in rows]), prompt_len


def train_aed(model, name: str, audio: dict, texts: list[str], steps: int) -> list[float]:
    """Teacher-forced cross-entropy on the six clips' transcripts (Adam, lr 1e-3): enough for the
    decoder to write them, so that greedy and beam search have real choices to make."""
    ids, lengths, prompt_len = aed_sequences(model, name, texts)
    # copies: in training mode NeMo's preprocessor dithers its input in place
    signal, signal_len = torch.tensor(audio["audio"]), torch.tensor(audio["audio_len"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    positions = torch.arange(ids.shape[1] - 1)[None, :]
    mask = (positions >= prompt_len - 1) & (positions < lengths[:, None] - 1)
    losses = []
    model.train()
    for _ in range(steps):
        log_probs, _, _, _ = model.forward(
            input_signal=signal, input_signal_length=signal_len, transcript=ids[:, :-1],
            transcript_length=lengths - 1,
        )  # fmt: skip
        nll = -log_probs.gather(-1, ids[:, 1:, None])[..., 0]
        loss = (nll * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    model.eval()
    return losses[:: max(1, steps // 10)] + [losses[-1]]


def aed_decode(model, enc_states, enc_mask, prompt: torch.Tensor, decoding: dict, len_pen=None) -> list:
    """NeMo's decoding of the encoder states after ``prompt``. NeMo 3.0.0's MultiTaskDecoding reads
    ``beam.length_penalty``, which its beam config does not have (it has ``len_pen``, unread), so a
    length penalty is set on the beam search generator itself (``len_pen``)."""
    from omegaconf import OmegaConf

    model.change_decoding_strategy(OmegaConf.create(decoding))
    if len_pen is not None:
        model.decoding.decoding.beam_search.len_pen = len_pen
    return model.decoding.decode_predictions_tensor(
        encoder_hidden_states=enc_states, encoder_input_mask=enc_mask,
        decoder_input_ids=prompt.repeat(enc_states.shape[0], 1), return_hypotheses=True,
    )  # fmt: skip


AED_LARGE = {"encoder": {"d_model": 512, "n_heads": 8, "n_layers": 4}, "dec_hidden": 1024, "dec_layers": 4}


def build_aed_large(out: Path) -> dict:
    """For `asrdecode bench aed --large`: a Canary-like model with a 4-layer, 1024-wide decoder
    (8 heads), a 512-wide encoder and BPE-1024 language models, random weights (not trained; its
    hypotheses run to their length limit), saved as ``aed_large.nemo``."""
    from nemo.collections.asr.models import EncDecMultiTaskModel
    from omegaconf import OmegaConf

    with tempfile.TemporaryDirectory() as tmp:
        cfg = aed_config("aed_canary2", Path(tmp))
        bpe = bpe1024_dir(Path(tmp))
        for lang in ("en", "de"):
            cfg["tokenizer"]["langs"][lang]["dir"] = str(bpe)
        cfg["encoder"].update(AED_LARGE["encoder"])
        hidden = AED_LARGE["dec_hidden"]
        cfg["model_defaults"].update(asr_enc_hidden=512, lm_enc_hidden=hidden, lm_dec_hidden=hidden)
        cfg["transf_decoder"]["config_dict"].update(
            hidden_size=hidden, inner_size=4 * hidden, num_layers=AED_LARGE["dec_layers"],
            num_attention_heads=8, max_sequence_length=512,
        )  # fmt: skip
        cfg["head"]["hidden_size"] = hidden
        torch.manual_seed(53)
        model = EncDecMultiTaskModel(cfg=OmegaConf.create(cfg)).eval()
        path = out / "aed_large.nemo"
        model.save_to(str(path))
    return {"path": str(path), "parameters": sum(p.numel() for p in model.parameters()), **AED_LARGE}


def build_aed(name: str, out: Path) -> dict:
    """A Canary-like model trained briefly on the fixture clips, saved, restored, and NeMo's
    features, encoder states, teacher-forced decoder log-probs, greedy and beam decodings (the
    beam search one utterance at a time, all beams and scores) and ``transcribe`` texts."""
    from nemo.collections.asr.models import ASRModel, EncDecMultiTaskModel
    from omegaconf import OmegaConf

    spec = AED_SPECS[name]
    audio = audio_batch()
    texts = dict(line.split(" ", 1) for line in (FIX / "audio" / "text").read_text().splitlines())
    batch_texts = [texts[str(u)] for u in audio["utt_ids"]]
    if spec.get("timestamps"):
        batch_texts = [timed_text(t, int(n)) for t, n in zip(batch_texts, audio["audio_len"], strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(spec["seed"])
        model = EncDecMultiTaskModel(cfg=OmegaConf.create(aed_config(name, Path(tmp))))
        torch.set_num_threads(2)
        losses = train_aed(model, name, audio, batch_texts, AED_TRAIN_STEPS)
        torch.set_num_threads(1)
        path = out / f"{name}.nemo"
        model.save_to(str(path))
    restored = ASRModel.restore_from(str(path), map_location="cpu").eval()
    signal, signal_len = torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"])
    ids, lengths, prompt_len = aed_sequences(restored, name, batch_texts)
    with torch.inference_mode():
        feats, feats_len = restored.preprocessor(input_signal=signal, length=signal_len)
        tf_log_probs, enc_len, enc_states, enc_mask = restored.forward(
            input_signal=signal, input_signal_length=signal_len, transcript=ids[:, :-1],
            transcript_length=lengths - 1,
        )  # fmt: skip
    slots = aed_prompt_slots(name)
    turns = [{"role": "user", "slots": dict(slots)}]
    prompt = restored.prompt.encode_dialog(turns)["context_ids"][None, :]
    greedy = aed_decode(restored, enc_states, enc_mask, prompt, {"strategy": "greedy"})
    slots_de = {**slots, "target_lang": "de", "pnc": "no"}  # canary: the task becomes translate
    if "task" in slots_de:
        slots_de["task"] = "translate"
    prompt_de = restored.prompt.encode_dialog([{"role": "user", "slots": slots_de}])["context_ids"][None, :]
    greedy_de = aed_decode(restored, enc_states, enc_mask, prompt_de, {"strategy": "greedy"})
    beam_one = aed_decode(
        restored, enc_states, enc_mask, prompt,
        {"strategy": "beam", "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": 50}},
    )  # fmt: skip
    beams, beams_as_configured = [], []
    for b in range(enc_states.shape[0]):  # one utterance at a time: NeMo tiles the prompt's states by batch
        n = int(enc_len[b])
        nbest = aed_decode(
            restored, enc_states[b : b + 1, :n], enc_mask[b : b + 1, :n], prompt,
            {"strategy": "beam", "beam": {**AED_BEAM, "return_best_hypothesis": False}}, AED_BEAM["len_pen"],
        )[0]  # fmt: skip
        beams.append(list(nbest))  # NeMo's decoded n-best list of this utterance
        unpenalised = aed_decode(
            restored, enc_states[b : b + 1, :n], enc_mask[b : b + 1, :n], prompt,
            {"strategy": "beam", "beam": {**AED_BEAM, "return_best_hypothesis": False}},
        )[0]  # fmt: skip
        beams_as_configured.append(list(unpenalised))
    beam_batch = aed_decode(
        restored, enc_states, enc_mask, prompt, {"strategy": "beam", "beam": AED_BEAM}, AED_BEAM["len_pen"]
    )
    # every beam's score of the batched search (NeMo tiles the prompt's cached states by batch)
    with torch.inference_mode():
        batch_scores = restored.decoding.decoding.beam_search(
            encoder_hidden_states=enc_states, encoder_input_mask=enc_mask,
            decoder_input_ids=prompt.repeat(enc_states.shape[0], 1), return_beam_scores=True,
        )[1]  # fmt: skip
    restored.change_decoding_strategy(OmegaConf.create({"strategy": "greedy"}))
    wavs = [str(FIX / "audio" / f"{u}.wav") for u in audio["utt_ids"]]
    stamps = bool(spec.get("timestamps"))
    transcribed = restored.transcribe(wavs, batch_size=6, **slots, **({"timestamps": True} if stamps else {}))
    k = AED_BEAM["beam_size"]
    arrays = {
        "utt_ids": audio["utt_ids"],
        **batch_features(name, out, feats, feats_len),
        "encoder_states": enc_states.numpy(),
        "encoder_len": enc_len.numpy(),
        "prompt": prompt[0].numpy(),
        "teacher_ids": ids.numpy(),
        "teacher_len": lengths.numpy(),
        "teacher_log_probs": tf_log_probs.float().numpy(),
        "greedy_tokens": padded([h.y_sequence.tolist() for h in greedy]),
        "greedy_tokens_len": np.array([len(h.y_sequence) for h in greedy], dtype=np.int32),
        "greedy_text": np.array([h.text for h in greedy]),
        "prompt_de": prompt_de[0].numpy(),
        "greedy_de_tokens": padded([h.y_sequence.tolist() for h in greedy_de]),
        "greedy_de_tokens_len": np.array([len(h.y_sequence) for h in greedy_de], dtype=np.int32),
        "greedy_de_text": np.array([h.text for h in greedy_de]),
        "beam1_tokens": padded([h.y_sequence.tolist() for h in beam_one]),
        "beam1_tokens_len": np.array([len(h.y_sequence) for h in beam_one], dtype=np.int32),
        "beam_tokens": padded([h.y_sequence.tolist() for hyps in beams for h in hyps]),
        "beam_tokens_len": np.array([len(h.y_sequence) for hyps in beams for h in hyps], dtype=np.int32),
        "beam_scores": np.array([float(h.score) for hyps in beams for h in hyps], dtype=np.float32),
        "beam_text": np.array([h.text for hyps in beams for h in hyps]),
        "beam_configured_text": np.array([h.text for hyps in beams_as_configured for h in hyps]),
        "beam_configured_scores": np.array(
            [float(h.score) for hyps in beams_as_configured for h in hyps], dtype=np.float32
        ),
        "beam_batch_scores": torch.stack([s.float() for s in batch_scores]).numpy(),
        "beam_batch_tokens": padded([h.y_sequence.tolist() for h in beam_batch]),
        "beam_batch_tokens_len": np.array([len(h.y_sequence) for h in beam_batch], dtype=np.int32),
        "transcribe_text": np.array([h.text if hasattr(h, "text") else str(h) for h in transcribed]),
    }
    ref, info = save_reference(out, name, path, restored, arrays, spec["seed"])
    info |= {
        "prompt_format": spec["prompt_format"],
        "prompt_slots": slots,
        "prompt_tokens": restored.tokenizer.ids_to_tokens(prompt[0].tolist()),
        "prompt_de_slots": slots_de,
        "prompt_de_tokens": restored.tokenizer.ids_to_tokens(prompt_de[0].tolist()),
        "train_steps": AED_TRAIN_STEPS,
        "train_loss": losses,
        "beam": AED_BEAM,
        "beam_note": "beam_*: len_pen set on NeMo's BeamSearchSequenceGenerator; beam_configured_*: NeMo "
        "decoding as configured, whose len_pen MultiTaskDecoding does not read (length penalty 0)",
        "beams_per_utterance": k,
        "greedy_texts": [h.text for h in greedy],
        "transcribe_texts": arrays["transcribe_text"].tolist(),
        "transcribe_word_times": [
            [
                {k: w[k] for k in ("word", "start", "end", "start_offset", "end_offset")}
                for w in h.timestamp["word"]
            ]
            for h in transcribed
        ]
        if stamps
        else None,
        "train_texts": batch_texts,
        "beam_texts": [[h.text for h in hyps] for hyps in beams],
        "beam_batch_texts": [h.text for h in beam_batch],
        "versions": versions(),
    }
    (ref / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def versions() -> dict[str, str]:
    import nemo

    return {"nemo": nemo.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "threads": str(torch.get_num_threads())}  # fmt: skip


LOCAL_WINDOW = [8, 8]


@torch.inference_mode()
def attention_switch_reference(out: Path) -> dict:
    """NeMo's own switch of a full-attention model to sliding-window attention:
    ``change_attention_model("rel_pos_local_attn", [8, 8])`` on the shared ``ctc_bpe.nemo`` and
    ``rnnt_bpe.nemo`` (no new weights), then encoder outputs (and CTC log-probs / RNN-T greedy) on the
    fixture batch, written to ``reference/<name>_local8.npz``."""
    from nemo.collections.asr.models import ASRModel

    audio = audio_batch()
    info = {}
    for name in ("ctc_bpe", "rnnt_bpe"):
        model = ASRModel.restore_from(str(FIX / f"{name}.nemo"), map_location="cpu").eval()
        model.change_attention_model("rel_pos_local_attn", LOCAL_WINDOW)
        model.eval()  # the new attention modules are created in training mode (dropout on)
        _, _, enc, enc_len = front(model, audio)
        arrays = {"encoder_out": enc.numpy(), "encoder_len": enc_len.numpy()}
        if name == "ctc_bpe":
            arrays["log_probs"] = model.decoder(encoder_output=enc).float().numpy()
        else:
            set_greedy(model)
            arrays.update(hyp_arrays(greedy(model, enc, enc_len), "greedy", tdt=False))
        path = out / "reference" / f"{name}_local8.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **arrays)
        info[name] = {"sha256": sha256(path), "window": LOCAL_WINDOW, "versions": versions()}
    return info


STREAMING_CONTEXTS = ([16, 3], [16, 0])


@torch.inference_mode()
def streaming_reference(out: Path) -> dict:
    """NeMo's cache-aware streaming simulation of ``rnnt_streaming.nemo`` for each of its trained
    contexts, one utterance of the fixture batch at a time, as NeMo's
    ``speech_to_text_cache_aware_streaming_infer.py`` runs it: ``CacheAwareStreamingAudioBuffer``
    (features of the whole utterance, no online normalization, first chunk not padded), then per
    chunk ``encoder.cache_aware_stream_step`` (the joined encoder outputs) and, in a second pass,
    ``conformer_stream_step`` with greedy decoding carried across chunks (the tokens and text).
    Written to ``reference/rnnt_streaming_stream.npz``: ``encoder_out_ctx{i}`` [B, D, T'] with
    ``encoder_len_ctx{i}``, ``greedy_ctx{i}_tokens`` (-1 padded) and ``greedy_ctx{i}_text``."""
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model = ASRModel.restore_from(str(FIX / "rnnt_streaming.nemo"), map_location="cpu").eval()
    set_greedy(model)
    audio = audio_batch()
    arrays: dict[str, np.ndarray] = {}

    def chunks(b: int):
        buffer = CacheAwareStreamingAudioBuffer(
            model=model, online_normalization=False, pad_and_drop_preencoded=False
        )
        buffer.append_audio(audio["audio"][b, : int(audio["audio_len"][b])].astype(np.float32), stream_id=-1)
        for step, (chunk, length) in enumerate(iter(buffer)):
            drop = 0 if step == 0 else model.encoder.streaming_cfg.drop_extra_pre_encoded
            yield chunk, length, drop, buffer.is_buffer_empty()

    for i, ctx in enumerate(STREAMING_CONTEXTS):
        model.encoder.set_default_att_context_size(ctx)
        model.encoder.setup_streaming_params()
        encoded, tokens, texts = [], [], []
        for b in range(len(audio["audio_len"])):
            cache = model.encoder.get_initial_cache_state(batch_size=1)
            parts = []
            for chunk, length, drop, last in chunks(b):
                enc, enc_len, *cache = model.encoder.cache_aware_stream_step(
                    processed_signal=chunk, processed_signal_length=length, cache_last_channel=cache[0],
                    cache_last_time=cache[1], cache_last_channel_len=cache[2], keep_all_outputs=last,
                    drop_extra_pre_encoded=drop,
                )  # fmt: skip
                parts.append(enc[0, :, : int(enc_len[0])])
            encoded.append(torch.cat(parts, dim=-1))
            cache = model.encoder.get_initial_cache_state(batch_size=1)
            hyps = pred = None
            for chunk, length, drop, last in chunks(b):
                pred, texts_now, *cache, hyps = model.conformer_stream_step(
                    processed_signal=chunk, processed_signal_length=length, cache_last_channel=cache[0],
                    cache_last_time=cache[1], cache_last_channel_len=cache[2], keep_all_outputs=last,
                    previous_hypotheses=hyps, previous_pred_out=pred, drop_extra_pre_encoded=drop,
                    return_transcription=True,
                )  # fmt: skip
            tokens.append(hyps[0].y_sequence.tolist())
            texts.append(hyps[0].text)
        t_max = max(e.shape[-1] for e in encoded)
        arrays[f"encoder_out_ctx{i}"] = np.stack(
            [np.pad(e.numpy(), ((0, 0), (0, t_max - e.shape[-1]))) for e in encoded]
        )
        arrays[f"encoder_len_ctx{i}"] = np.array([e.shape[-1] for e in encoded], dtype=np.int64)
        arrays[f"greedy_ctx{i}_tokens"] = padded(tokens)
        arrays[f"greedy_ctx{i}_text"] = np.array(texts)
    path = out / "reference" / "rnnt_streaming_stream.npz"
    np.savez_compressed(path, **arrays)
    return {"sha256": sha256(path), "contexts": STREAMING_CONTEXTS, "versions": versions()}


BUFFERED = {"chunk_seconds": 1.6, "buffer_seconds": 4.0, "model_stride": 8}  # NeMo's script defaults


def buffered_plan(model) -> tuple[float, float, float, int, int]:
    """NeMo's buffered-inference scripts' arithmetic for `model` and `BUFFERED`: (model stride in
    seconds, chunk seconds, buffer seconds, ``tokens_per_chunk``, ``mid_delay``)."""
    import math

    stride = model.cfg.preprocessor.window_stride * BUFFERED["model_stride"]
    chunk, buffer = BUFFERED["chunk_seconds"], BUFFERED["buffer_seconds"]
    tokens_per_chunk = math.ceil(chunk / stride)
    mid_delay = math.ceil((chunk + (buffer - chunk) / 2) / stride)
    return stride, chunk, buffer, tokens_per_chunk, mid_delay


def long_input() -> np.ndarray:
    """The 60-90 s input of the buffered-inference reference: the fixture clips (sorted by name)
    four times over, each followed by 0.3 s of silence (tests build the same array)."""
    import soundfile

    clips = [soundfile.read(p, dtype="float32")[0] for p in sorted((FIX / "audio").glob("*.wav"))]
    gap = np.zeros(4800, dtype=np.float32)
    return np.concatenate([piece for _ in range(4) for clip in clips for piece in (clip, gap)])


@torch.inference_mode()
def buffered_reference(out: Path) -> dict:
    """NeMo's buffered chunked inference of ``ctc_bpe.nemo`` on `long_input`, as its
    ``speech_to_text_buffered_infer_ctc.py`` runs it: ``FrameBatchASR(frame_len=1.6,
    total_buffer=4.0)``, ``tokens_per_chunk = ceil(chunk / model stride seconds)``, ``mid_delay =
    ceil((chunk + (buffer - chunk) / 2) / model stride seconds)``, ``read_audio_file`` (the audio
    padded by ``mid_delay`` frames), ``transcribe(tokens_per_chunk, mid_delay, keep_logits=True)``.
    Written to ``reference/ctc_bpe_buffered.npz``: ``text``, the kept ``log_probs`` [T', V+1] and
    the greedy ``tokens`` before merging (``unmerged``)."""

    import soundfile
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.utils.streaming_utils import FrameBatchASR

    model = ASRModel.restore_from(str(FIX / "ctc_bpe.nemo"), map_location="cpu").eval()
    stride, chunk, buffer, tokens_per_chunk, mid_delay = buffered_plan(model)
    frame_asr = FrameBatchASR(asr_model=model, frame_len=chunk, total_buffer=buffer, batch_size=4)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "long.wav"
        soundfile.write(wav, long_input(), 16000, subtype="FLOAT")
        frame_asr.reset()
        frame_asr.read_audio_file(str(wav), mid_delay, stride)
        text, log_probs = frame_asr.transcribe(tokens_per_chunk, mid_delay, keep_logits=True)
    path = out / "reference" / "ctc_bpe_buffered.npz"
    np.savez_compressed(
        path,
        text=np.array(text),
        log_probs=log_probs.float().numpy(),
        unmerged=np.array(frame_asr.unmerged, dtype=np.int32),
        seconds=np.array(len(long_input()) / 16000.0),
    )
    return {"sha256": sha256(path), **BUFFERED, "tokens_per_chunk": tokens_per_chunk, "mid_delay": mid_delay,
            "versions": versions()}  # fmt: skip


@torch.inference_mode()
def buffered_rnnt_reference(out: Path) -> dict:
    """NeMo's buffered inference of the transducer ``rnnt_bpe.nemo`` on `long_input`, as its
    ``speech_to_text_buffered_infer_rnnt.py`` runs it with the "middle" merge: the default
    ``RNNTDecodingConfig`` with ``strategy=greedy_batch``, ``preserve_alignments=True``,
    ``fused_batch_size=-1``; ``BatchedFrameASRRNNT(frame_len=1.6, total_buffer=4.0)``, the
    audio padded by ``mid_delay`` frames (``read_audio_file``), ``transcribe(tokens_per_chunk,
    mid_delay)``. Written to ``reference/rnnt_bpe_buffered.npz``: ``text``, the merged token ids
    (``unmerged``) and every window's greedy tokens with their frames (``window_tokens``,
    ``window_frames``, ``window_index``)."""

    import soundfile
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.submodules.rnnt_decoding import RNNTDecodingConfig
    from nemo.collections.asr.parts.utils.streaming_utils import BatchedFrameASRRNNT
    from omegaconf import OmegaConf, open_dict

    model = ASRModel.restore_from(str(FIX / "rnnt_bpe.nemo"), map_location="cpu").eval()
    decoding = OmegaConf.structured(RNNTDecodingConfig())
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
        decoding.preserve_alignments = True
        decoding.fused_batch_size = -1
        decoding.beam.return_best_hypothesis = True
    model.change_decoding_strategy(decoding)
    stride, chunk, buffer, tokens_per_chunk, mid_delay = buffered_plan(model)
    frame_asr = BatchedFrameASRRNNT(asr_model=model, frame_len=chunk, total_buffer=buffer, batch_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "long.wav"
        soundfile.write(wav, long_input(), 16000, subtype="FLOAT")
        frame_asr.reset()
        frame_asr.read_audio_file([str(wav)], mid_delay, stride)
        (text,) = frame_asr.transcribe(tokens_per_chunk, mid_delay)
    tokens, frames, index = [], [], []
    blank = model.decoder.blank_idx
    for w, alignment in enumerate(frame_asr.all_alignments[0]):
        for t, emitted in enumerate(alignment):
            for _, token in emitted:
                if int(token) != blank:
                    tokens.append(int(token))
                    frames.append(t)
                    index.append(w)
    path = out / "reference" / "rnnt_bpe_buffered.npz"
    np.savez_compressed(
        path,
        text=np.array(text),
        unmerged=np.array(frame_asr.unmerged[0], dtype=np.int32),
        window_tokens=np.array(tokens, dtype=np.int32),
        window_frames=np.array(frames, dtype=np.int32),
        window_index=np.array(index, dtype=np.int32),
        windows=np.array(len(frame_asr.all_alignments[0])),
        seconds=np.array(len(long_input()) / 16000.0),
    )
    return {"sha256": sha256(path), **BUFFERED, "tokens_per_chunk": tokens_per_chunk, "mid_delay": mid_delay,
            "text": text, "versions": versions()}  # fmt: skip


# --set punct: NeMo's text with apostrophes and punctuation ------------------------------------

#: The text the punctuation tokenizer is trained on: the clips' transcripts and sentences with
#: word-internal, word-initial and final apostrophes and punctuation marks.
PUNCT_CORPUS = [
    "go forward ten meters", "he was not an ill disposed young man",
    "eight of spades four of clubs seven of hearts", "feels like these days go on forever",
    "two nine three four zero", "he might even have been made amiable himself",
]  # fmt: skip
PUNCT_EXTRA = [
    "don't go forward, it's ten o'clock.", "'tis not an ill-disposed young man?", "it's.",
    "it's eight o'clock, isn't it?", "'tis the season; don't you think so?", "he's not here - he's gone!",
    "we don't know, do we?", "'twas the night before.", "they'd say: 'tis true.", "o'clock, o'clock!",
    "rock 'n' roll.", "i'm sure it's fine.", "you'll see, won't you?",
]  # fmt: skip
#: Sentences whose tokens the detokenisation table holds (as the tokenizer writes them and with
#: every apostrophe piece made word-initial, the piece NeMo writes with a space before it).
PUNCT_SENTENCES = [
    "don't", "o'clock", "'tis", "it's.", "don't go forward, it's ten o'clock.",
    "'tis eight o'clock - isn't it?", "it's. 'tis. don't!", "he's not here, is he?",
]  # fmt: skip
#: Character labels of the size of CHAR_LABELS with ``' . , ?`` where the char fixtures' greedy
#: outputs most often have a letter the sentences do not use (m, y, q, p), so their texts are full
#: of marks; m takes the apostrophe's place.
CHAR_PUNCT_LABELS = [" ", *"abcdefghijkl", "'", *"no", "?", ",", *"rstuvwx", ".", "z", "m"]
#: Where the punctuation tokenizer's marks go: ids the BPE fixtures' greedy outputs emit most often
#: (so that their texts are full of marks); the lone '▁' goes where the fixture BPE-128 has it, a
#: row the tuned heads never pick.
PUNCT_PIECE_IDS = {"\u2581'": 56, "'": 64, ".": 113, "\u2581-": 23, ",": 70, "?": 17, "!": 18, "\u2581": 102}
#: The fixture models given the punctuation vocabularies (tests/helpers/nemo_vocab.py): weights as
#: committed, so their greedy tokens are the committed references' and only the texts change.
PUNCT_MODELS = {
    "hybrid_rnnt_ctc": "bpe", "hybrid_tdt_ctc": "bpe", "ctc_bpe": "bpe",
    "rnnt_char": "char", "quartznet_char": "char",
}  # fmt: skip


def punct_tokenizer(tmp: Path) -> tuple[bytes, list[str], dict[str, bytes]]:
    """A 128-piece sentencepiece BPE trained on `PUNCT_CORPUS` + `PUNCT_EXTRA` (its pieces include
    ``▁'``, ``▁-``, ``'`` and ``. , ? ! - : ;``), no normalizer, pieces moved to `PUNCT_PIECE_IDS`
    (ids are positions: the encoding is the same). Returns the model, its pieces and the archive
    members (``tokenizer.model``, NeMo's ``vocab.txt``, ``tokenizer.vocab``)."""
    import sys

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_vocab import sentencepiece_members

    corpus = tmp / "punct.txt"
    corpus.write_text("\n".join(PUNCT_CORPUS * 3 + PUNCT_EXTRA * 6) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp / "punct"), vocab_size=128, model_type="bpe",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2,
        normalization_rule_name="identity",
    )  # fmt: skip
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(slim_sentencepiece((tmp / "punct.model").read_bytes(), lowercase=False))
    for piece, j in PUNCT_PIECE_IDS.items():
        i = [p.piece for p in proto.pieces].index(piece)
        a, b = copy.deepcopy(proto.pieces[i]), copy.deepcopy(proto.pieces[j])
        proto.pieces[i].CopyFrom(b)
        proto.pieces[j].CopyFrom(a)
    data = proto.SerializeToString()
    sp = spm.SentencePieceProcessor(model_proto=data)
    pieces = [sp.id_to_piece(k) for k in range(sp.get_piece_size())]
    if any(pieces[j] != piece for piece, j in PUNCT_PIECE_IDS.items()) or pieces[0] != "<unk>":
        raise SystemExit("punct tokenizer: pieces not where PUNCT_PIECE_IDS puts them")
    for text in PUNCT_SENTENCES + PUNCT_EXTRA:
        if sp.decode(sp.encode(text)) != text:
            raise SystemExit(f"punct tokenizer: {text!r} does not round-trip")
    return data, pieces, sentencepiece_members(data)


def detok_table(decodings: dict, units: list[str], encode) -> list[dict]:
    """NeMo's texts of token sequences: each of `PUNCT_SENTENCES` as tokenized, the same with every
    apostrophe unit made word-initial (BPE), and 40 seeded random sequences of units; each decoded
    by every decoding object in ``decodings`` (its ``decode_tokens_to_str_with_strip_punctuation``,
    what ``transcribe`` applies), which must agree."""
    gen = torch.Generator().manual_seed(62)
    seqs = []
    for text in PUNCT_SENTENCES:
        ids = encode(text)
        seqs.append(ids)
        if "\u2581'" in units:
            seqs.append([units.index("\u2581'") if units[t] == "'" else t for t in ids])
    quiet = {i for i, u in enumerate(units) if u in QUIET_PIECES}
    pool = [i for i in range(len(units)) if i not in quiet]
    for _ in range(40):
        seqs.append([pool[k] for k in torch.randint(0, len(pool), (12,), generator=gen).tolist()])
    table = []
    for ids in seqs:
        texts = {
            name: dec.decode_tokens_to_str_with_strip_punctuation(list(ids))
            for name, dec in decodings.items()
        }
        if len(set(texts.values())) != 1:
            raise SystemExit(f"decodings disagree on {ids}: {texts}")
        table.append({"ids": list(ids), "text": next(iter(texts.values()))})
    return table


def char_ids(text: str) -> list[int]:
    """`CHAR_PUNCT_LABELS` ids of a text (other characters dropped)."""
    return [CHAR_PUNCT_LABELS.index(c) for c in text if c in CHAR_PUNCT_LABELS]


def _word_stamps(hyps) -> list[list[dict]]:
    return [
        [{"word": w["word"], "start_offset": int(w["start_offset"]), "end_offset": int(w["end_offset"])}
         for w in h.timestamp["word"]]
        for h in hyps
    ]  # fmt: skip


PUNCT_BEAMS = {  # the beam decodings of each head (CUDA graphs off), as the other references run them
    "transducer": {
        "strategy": "malsd_batch",
        "beam": {"beam_size": 4, "return_best_hypothesis": True, "score_norm": True,
                 "allow_cuda_graphs": False, "max_symbols": MAX_SYMBOLS},
    },
    "ctc": {
        "strategy": "beam_batch",
        "beam": {"beam_size": 4, "beam_beta": 0.0, "beam_threshold": 20.0, "return_best_hypothesis": True,
                 "allow_cuda_graphs": False},
    },
}  # fmt: skip


@torch.inference_mode()
def punct_head(model, head: str, hybrid: bool, wavs: list[np.ndarray]) -> tuple[dict, object]:
    """One head's ``transcribe`` outputs: greedy (the saved decoding config) tokens, texts and word
    offsets, then `PUNCT_BEAMS` tokens and texts; returns them and the greedy decoding object."""
    from omegaconf import OmegaConf

    decoder_type = {"transducer": "rnnt", "ctc": "ctc"}[head] if hybrid else None
    section = model.cfg.aux_ctc.decoding if hybrid and head == "ctc" else model.cfg.decoding
    base = OmegaConf.to_container(section, resolve=True)

    def run(cfg: dict, timestamps: bool = False, batch_size: int = len(wavs)) -> list:
        extra = {"decoder_type": decoder_type} if hybrid else {}
        model.change_decoding_strategy(OmegaConf.create(cfg), verbose=False, **extra)
        return model.transcribe(
            wavs, batch_size=batch_size, return_hypotheses=True, verbose=False, timestamps=timestamps or None
        )

    def rows(hyps, strategy: str) -> dict:
        """Tokens and texts. A CTC head's ``transcribe`` hypotheses hold its log-probs: the tokens are
        its decoding's of them (greedy: frame labels collapsed), whose texts are checked equal."""
        texts = [h.text for h in hyps]
        if head == "transducer":
            return {"tokens": [torch.as_tensor(h.y_sequence).tolist() for h in hyps], "texts": texts}
        tokens = []
        for h in hyps:
            lp = torch.as_tensor(h.y_sequence)[None]
            (again,) = decoding.ctc_decoder_predictions_tensor(
                lp, decoder_lengths=torch.tensor([lp.shape[1]]), return_hypotheses=True
            )
            row = torch.as_tensor(again.y_sequence).tolist()
            if strategy.startswith("greedy"):
                blank = decoding.blank_id
                row = [t for i, t in enumerate(row) if t != blank and (i == 0 or row[i - 1] != t)]
            if again.text != h.text:
                raise SystemExit(f"{head}: the decoding's text {again.text!r} is not transcribe's {h.text!r}")
            tokens.append(row)
        return {"tokens": tokens, "texts": texts}

    greedy = run(base)
    decoding = model.decoding if head == "transducer" or not hybrid else model.ctc_decoding
    out = {
        "supported_punctuation": sorted(decoding.supported_punctuation or []),
        "decoding": base,
        **rows(greedy, base["strategy"]),
        "words": _word_stamps(run(base, timestamps=True)),
    }
    beam = PUNCT_BEAMS[head]
    merged = OmegaConf.to_container(OmegaConf.merge(base, beam))
    beam_hyps = run(merged, batch_size=1)  # each utterance alone (NeMo's batched CTC beam is not)
    decoding = model.decoding if head == "transducer" or not hybrid else model.ctc_decoding
    out["beam"] = {"decoding": beam, **rows(beam_hyps, beam["strategy"])}
    run(base)
    return out, model.decoding if head == "transducer" or not hybrid else model.ctc_decoding


@torch.inference_mode()
def punct_reference(out: Path) -> dict:
    """``reference/punct.json``: NeMo's ``transcribe`` texts (and word offsets) of `PUNCT_MODELS`
    given the punctuation vocabularies, every head, greedy and beam, and the detokenisation tables."""
    import sys

    from nemo.collections.asr.models import ASRModel

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_vocab import swap_vocabulary

    audio = audio_batch()
    wavs = [audio["audio"][b, : int(n)] for b, n in enumerate(audio["audio_len"])]
    report: dict = {"versions": versions(), "char_labels": CHAR_PUNCT_LABELS, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sp_bytes, pieces, members = punct_tokenizer(tmp)
        (out / "punct_bpe128.model").write_bytes(sp_bytes)
        report["tokenizer"] = {"file": "punct_bpe128.model", "sha256": sha256(out / "punct_bpe128.model")}
        tables: dict = {}
        for name, kind in PUNCT_MODELS.items():
            path = tmp / f"{name}_punct.nemo"
            labels = pieces if kind == "bpe" else CHAR_PUNCT_LABELS
            digest = swap_vocabulary(out / f"{name}.nemo", path, labels, members if kind == "bpe" else None)
            model = ASRModel.restore_from(str(path), map_location="cpu").eval()
            entry: dict = {"kind": kind, "sha256": digest}
            hybrid = hasattr(model, "ctc_decoder")
            heads = ["transducer", "ctc"] if hybrid else ["transducer" if hasattr(model, "joint") else "ctc"]
            decodings = {}
            for head in heads:
                entry[head], decodings[head] = punct_head(model, head, hybrid, wavs)
            if kind not in tables:
                if kind == "bpe":
                    import sentencepiece as spm

                    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
                    tables[kind] = detok_table(decodings, pieces, sp.encode)
                else:
                    tables[kind] = detok_table(decodings, CHAR_PUNCT_LABELS, char_ids)
            report["models"][name] = entry
            print(f"{name}: {json.dumps({h: entry[h]['texts'] for h in heads})}", flush=True)
        report["detok"] = tables
    (out / "reference" / "punct.json").write_text(json.dumps(report, ensure_ascii=False) + "\n")
    return {"models": list(report["models"]), "detok": {k: len(v) for k, v in report["detok"].items()}}


# --set spaces: NeMo's text where a model emits a space at either end or twice in a row ----------

#: Character texts for `SPACE_CHAR_MODELS` (CHAR_PUNCT_LABELS): a space at the start, at the end,
#: twice in a row, before a mark, alone; each character is one frame of its log-probs.
SPACE_CHAR_TEXTS = [
    " don't go", "it's ten  ", "go  forward ,  it's", "  .  ", "   ", "", "a b", " o'clock?  ",
]  # fmt: skip
#: BPE texts for the punctuation tokenizer: pieces of the words, ``<unk>`` (sentencepiece's ' ⁇ ',
#: which puts two spaces before the next word) and the lone '▁' (a space), at either end or inside.
SPACE_BPE_TEXTS = [
    ["don't", "<unk>", "go"], ["<unk>", "it's"], ["it's", "\u2581"],
    ["go", "\u2581", "\u2581", "forward"], ["ten", "<unk>"], ["\u2581", "\u2581", "be"],
    ["\u2581", "<unk>", "o'clock."], ["it's", "<unk>", "<unk>", "."],
]  # fmt: skip
#: The punctuation fixtures whose decodings write those texts: (CTC log-probs, transducer tokens).
SPACE_MODELS = {"char": ("quartznet_char", "rnnt_char"), "bpe": ("hybrid_tdt_ctc", "hybrid_tdt_ctc")}


def space_frames(ids: list[int], blank: int) -> list[int]:
    """Frame labels whose CTC greedy path is ``ids``: one frame each, a blank between equal
    neighbours, a blank at either end."""
    frames = [blank]
    for i, t in enumerate(ids):
        if i and ids[i - 1] == t:
            frames.append(blank)
        frames.append(t)
    return frames + [blank]


@torch.inference_mode()
def spaces_reference(out: Path) -> dict:
    """``reference/spaces.json``: NeMo's text of crafted token sequences with spaces at either end
    and doubled (`SPACE_CHAR_TEXTS`, `SPACE_BPE_TEXTS`): each sequence's frames (`space_frames`)
    as log-probs (the label 0, every other -10, normalised) through the CTC decoding of a
    punctuation fixture (``ctc_decoder_predictions_tensor``, what ``transcribe`` applies to a CTC
    model's log-probs), and its tokens through the transducer decoding's detokenisation (what
    ``transcribe`` writes for a transducer hypothesis), which must agree."""
    import sys

    import sentencepiece as spm
    from nemo.collections.asr.models import ASRModel

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_vocab import sentencepiece_members, swap_vocabulary

    sp_bytes = (out / "punct_bpe128.model").read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    pieces = [sp.id_to_piece(k) for k in range(sp.get_piece_size())]

    def bpe_ids(parts: list[str]) -> list[int]:
        return [i for p in parts for i in ([pieces.index(p)] if p in ("<unk>", "\u2581") else sp.encode(p))]

    cases = {"char": [char_ids(t) for t in SPACE_CHAR_TEXTS], "bpe": [bpe_ids(p) for p in SPACE_BPE_TEXTS]}
    report: dict = {"versions": versions(), "char_labels": CHAR_PUNCT_LABELS}
    report["tokenizer"] = "punct_bpe128.model"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for kind, (ctc_name, rnnt_name) in SPACE_MODELS.items():
            labels = pieces if kind == "bpe" else CHAR_PUNCT_LABELS
            members = sentencepiece_members(sp_bytes) if kind == "bpe" else None
            models = {}
            for name in {ctc_name, rnnt_name}:
                swap_vocabulary(out / f"{name}.nemo", tmp / f"{name}.nemo", labels, members)
                models[name] = ASRModel.restore_from(str(tmp / f"{name}.nemo"), map_location="cpu").eval()
            ctc = models[ctc_name]
            ctc_decoding = ctc.ctc_decoding if hasattr(ctc, "ctc_decoding") else ctc.decoding
            blank = len(labels)
            rows = []
            for ids in cases[kind]:
                frames = space_frames(ids, blank)
                lp = torch.full((1, len(frames), blank + 1), -10.0)
                lp[0, torch.arange(len(frames)), torch.tensor(frames)] = 0.0
                lp = torch.log_softmax(lp, dim=-1)
                (hyp,) = ctc_decoding.ctc_decoder_predictions_tensor(
                    lp, decoder_lengths=torch.tensor([len(frames)]), return_hypotheses=True
                )
                row = torch.as_tensor(hyp.y_sequence).tolist()
                tokens = [t for i, t in enumerate(row) if t != blank and (i == 0 or row[i - 1] != t)]
                if tokens != ids:
                    raise SystemExit(f"{kind}: greedy tokens {tokens} are not {ids}")
                transducer = models[rnnt_name].decoding.decode_tokens_to_str_with_strip_punctuation(ids)
                if transducer != hyp.text:
                    raise SystemExit(f"{kind}: transducer text {transducer!r} is not CTC's {hyp.text!r}")
                rows.append({"ids": ids, "frames": frames, "text": hyp.text})
                print(f"{kind}: {hyp.text!r}", flush=True)
            report[kind] = {"models": [ctc_name, rnnt_name], "rows": rows}
    (out / "reference" / "spaces.json").write_text(json.dumps(report, ensure_ascii=False) + "\n")
    return {kind: [r["text"] for r in report[kind]["rows"]] for kind in SPACE_MODELS}


# --set deep: ConvASR stacks as deep as QuartzNet 15x5 and Citrinet, BatchNorm far from 0 and 1 ----

#: QuartzNet's front end (quartznet_15x5.yaml): 64 mels, 512-point FFT, 20 ms window
QUARTZNET_PREPROCESSOR = {
    "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "normalize": "per_feature",
    "window_size": 0.02, "sample_rate": 16000, "window_stride": 0.01, "window": "hann", "features": 64,
    "n_fft": 512, "frame_splicing": 1, "dither": 1e-5,
}  # fmt: skip
DEEP_CHANNELS = 8
DEEP_LABELS = [" ", *"abcdefghijklmnopqrstuvw", "'", ".", ",", "?"]  # characters with punctuation
DEEP_KERNEL_FACTOR = 0.25  # NeMo's kernel_size_factor: kernels 33..87 -> 9..23 (smaller files)


def _deep_jasper(kind: str) -> list[dict]:
    """QuartzNet 15x5 (1 + 15 x 5 + 2 blocks, dilation 2 in C2) or Citrinet (1 + 3 x 7 x 5 + 1
    blocks, squeeze-excitation, three stride-2 blocks with stride_last + stride_add) at
    `DEEP_CHANNELS` channels."""
    c, f = DEEP_CHANNELS, {"kernel_size_factor": DEEP_KERNEL_FACTOR}
    if kind == "quartznet":
        blocks = [_jasper(c, 1, 33, stride=2, **f)]
        for k in (33, 39, 51, 63, 75):
            blocks += [_jasper(c, 5, k, residual=True, **f) for _ in range(3)]
        return blocks + [_jasper(c, 1, 87, dilation=2, **f), _jasper(2 * c, 1, 1)]
    blocks = [_jasper(c, 1, 5, **SE, **f)]
    for kernels in ((11, 13, 15, 17, 19, 21, 13), (13, 15, 17, 19, 21, 23, 25), (25, 27, 29, 31, 33, 35, 37)):
        for i, k in enumerate(kernels):
            extra = {**SE, **f, **(STRIDE if i == 0 else {})}
            blocks.append(_jasper(c, 5, k, stride=2 if i == 0 else 1, residual=True, **extra))
    return blocks + [_jasper(2 * c, 1, 41, **SE, **f)]


#: name: (layout, activation, seed, CTC head gain of `tune_ctc_head`)
DEEP_SPECS = {
    "quartznet_deep": ("quartznet", "relu", 51, 4.0),
    "citrinet_deep": ("citrinet", "swish", 52, 4.0),
}


@torch.no_grad()
def far_batchnorm(model, feats: torch.Tensor, feats_len: torch.Tensor, seed: int) -> dict:
    """BatchNorm statistics far from 0 and 1 that still keep the activations alive (a deep stack
    with random statistics maps every input to one output): each convolution's weights scaled by
    exp(N(0, 1)), then every BatchNorm's running mean and variance measured on the fixture batch
    (a training-mode pass, cumulative averages), as training leaves them; affine scales
    U(0.5, 1.5), shifts N(0, 0.5^2). Returns the statistics' spread."""
    gen = torch.Generator().manual_seed(seed + 3000)
    norms = [m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    for module in model.encoder.modules():
        if isinstance(module, torch.nn.Conv1d):
            module.weight.mul_(float(torch.exp(torch.randn((), generator=gen))))
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    model.encoder.train()
    model.encoder(audio_signal=feats, length=feats_len)
    model.encoder.eval()
    for norm in norms:
        norm.momentum = 0.1
        norm.weight.copy_(torch.rand(norm.num_features, generator=gen) + 0.5)
        norm.bias.copy_(torch.randn(norm.num_features, generator=gen) * 0.5)
    means = torch.cat([n.running_mean for n in norms]).abs()
    var = torch.cat([n.running_var for n in norms])
    return {
        "batchnorms": len(norms),
        "running_mean_abs_median": round(float(means.median()), 4),
        "running_mean_abs_max": round(float(means.max()), 4),
        "running_var_min": float(var.min()),
        "running_var_median": round(float(var.median()), 4),
        "running_var_max": float(var.max()),
    }


def build_deep(name: str, out: Path) -> dict:
    """A deep random ConvASR CTC model with `DEEP_LABELS`, saved gzipped (NeMo restores either
    form), and NeMo's single-utterance log-probs and ``transcribe`` texts of the two long inputs
    (tests/helpers/nemo_audio.py `long_inputs`), with NeMo's own batched-vs-single difference."""
    import sys

    from nemo.collections.asr.models import ASRModel, EncDecCTCModel
    from omegaconf import OmegaConf

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_audio import LONG_CLIPS, long_inputs

    kind, activation, seed, gain = DEEP_SPECS[name]
    jasper = _deep_jasper(kind)
    labels = list(DEEP_LABELS)
    cfg = {
        "sample_rate": 16000, "labels": labels, "train_ds": None, "validation_ds": None, "test_ds": None,
        "preprocessor": dict(QUARTZNET_PREPROCESSOR),
        "encoder": {"_target_": CONVASR, "feat_in": 64, "activation": activation, "conv_mask": True,
                    "jasper": jasper},
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder",
                    "feat_in": jasper[-1]["filters"], "num_classes": len(labels), "vocabulary": labels},
        "decoding": {"strategy": "greedy_batch"},
    }  # fmt: skip
    torch.manual_seed(seed)
    model = EncDecCTCModel(cfg=OmegaConf.create(cfg)).eval()
    audio = audio_batch()
    feats, feats_len, _, _ = front(model, audio)
    stats = far_batchnorm(model, feats, feats_len, seed)
    _, _, enc, enc_len = front(model, audio)
    tuning = tune_ctc_head(model, enc, enc_len, seed, head=model.decoder, gain=gain)
    path = out / f"{name}.nemo"
    model.save_to(str(path))
    gzip_nemo(path)
    restored = ASRModel.restore_from(str(path), map_location="cpu").eval()
    if any(not torch.equal(v, restored.state_dict()[k]) for k, v in model.state_dict().items()):
        raise SystemExit(f"{name}: restored weights differ")
    waves = long_inputs()
    arrays: dict[str, np.ndarray] = {}
    batched_gap = 0.0
    with torch.inference_mode():
        x = torch.zeros(len(waves), max(len(w) for w in waves))
        for b, w in enumerate(waves):
            x[b, : len(w)] = torch.from_numpy(w)
        lens = torch.tensor([len(w) for w in waves])
        lp_batch, len_batch, _ = restored.forward(input_signal=x, input_signal_length=lens)
        for b, w in enumerate(waves):
            lp, n, _ = restored.forward(
                input_signal=torch.from_numpy(w)[None], input_signal_length=lens[b : b + 1]
            )
            arrays[f"log_probs_{b}"] = lp[0, : int(n[0])].numpy()
            batched_gap = max(batched_gap, float((lp_batch[b, : int(n[0])] - lp[0, : int(n[0])]).abs().max()))
    single = [
        h.text
        for w in waves
        for h in restored.transcribe([w], batch_size=1, return_hypotheses=True, verbose=False)
    ]
    batch = [
        h.text
        for h in restored.transcribe(waves, batch_size=len(waves), return_hypotheses=True, verbose=False)
    ]
    ref, info = save_reference(out, name, path, restored, arrays, seed)
    info |= {
        "inputs": [list(ks) for ks in LONG_CLIPS],
        "input_samples": [len(w) for w in waves],
        "encoder_len": [int(n) for n in len_batch],
        "encoder": OmegaConf.to_container(restored.cfg.encoder),
        "preprocessor": OmegaConf.to_container(restored.cfg.preprocessor),
        "vocabulary": labels,
        "batchnorm": stats,
        "tuning": tuning,
        "parameters": sum(p.numel() for p in restored.parameters()),
        "nemo_batched_vs_single_max_abs": batched_gap,
        "transcribe_single": single,
        "transcribe_batched": batch,
        "versions": versions(),
    }
    (ref / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
    return {
        k: info[k]
        for k in ("parameters", "nemo_batched_vs_single_max_abs", "transcribe_single", "transcribe_batched")
    }


def cpu_isa() -> str:
    """The widest x86 vector extension of this CPU (float32 convolution results depend on it)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return next((isa for isa in ("avx512f", "avx2", "sse4_2") if f" {isa}" in flags), platform.machine())


@contextlib.contextmanager
def float64_kept():
    """Within: ``Tensor.float()`` leaves a float64 tensor as it is and ``Module.float()`` does
    nothing. NeMo's SqueezeExcite pins itself to float32 (``self.fc.float()``, ``x.float()``, for
    training under AMP), which would round every squeeze-excitation block of a float64 run to
    float32; the float64 reference runs the whole stack in float64."""
    tensor_float, module_float = torch.Tensor.float, torch.nn.Module.float

    def keep_float64(t, *args, **kwargs):
        return t if t.dtype == torch.float64 else tensor_float(t, *args, **kwargs)

    torch.Tensor.float, torch.nn.Module.float = keep_float64, lambda module: module
    try:
        yield
    finally:
        torch.Tensor.float, torch.nn.Module.float = tensor_float, module_float


@torch.inference_mode()
def deep_float64_reference(out: Path) -> dict:
    """``--set deep-float64``: the deep ConvASR stacks in float64, from the committed models (weights
    unchanged). Their float32 results depend on the CPU's summation order (each stack amplifies a
    relative change of 1e-15 in its features to 4e-10 in its log-probs), so the exact check runs in
    float64: NeMo's own float32 features of each long input (``features_<b>`` [F, T] as its
    preprocessor pads them, ``features_len_<b>``), its encoder and CTC head in float64 on them
    (``log_probs64_<b>``; squeeze-excitation included, `float64_kept`), NeMo's greedy CTC text of
    those (``greedy64_single``), and the padded batch of both through the float64 stack
    (``nemo_float64_batched_vs_single_max_abs``). Also measured: how far NeMo's float32 log-probs
    are from its float64 ones, those committed (``log_probs_<b>``, made on another CPU) and those of
    this machine, with this machine's vector extension."""
    import sys

    from nemo.collections.asr.models import ASRModel

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_audio import long_inputs

    report = {}
    for name in DEEP_SPECS:
        path = out / f"{name}.nemo"
        ref = out / "reference"
        arrays = dict(np.load(ref / f"{name}.npz", allow_pickle=False))
        info = json.loads((ref / f"{name}.json").read_text())
        if sha256(path) != info["sha256"]:
            raise SystemExit(f"{name}: {path} is not the model its reference was made from")
        model = ASRModel.restore_from(str(path), map_location="cpu").eval()
        waves = long_inputs()
        feats, lens, single64, gaps32_committed, gaps32_here = [], [], [], [], []
        for b, w in enumerate(waves):
            f, n = model.preprocessor(input_signal=torch.from_numpy(w)[None], length=torch.tensor([len(w)]))
            feats.append(f[0])  # as NeMo pads them (to a multiple of pad_to), the padding zeros
            lens.append(int(n[0]))
            lp32, _, _ = model.forward(processed_signal=f, processed_signal_length=n)
            model.double()
            with float64_kept():
                enc, enc_len = model.encoder(audio_signal=f.double(), length=n)
                lp64 = model.decoder(encoder_output=enc)
            model.float()
            t = int(enc_len[0])
            if t != arrays[f"log_probs_{b}"].shape[0]:
                raise SystemExit(f"{name}: {t} frames, the reference has {arrays[f'log_probs_{b}'].shape[0]}")
            arrays[f"features_{b}"] = feats[-1].numpy()
            arrays[f"features_len_{b}"] = np.array(lens[-1])
            arrays[f"log_probs64_{b}"] = lp64[0, :t].numpy()
            single64.append((lp64, enc_len))
            committed = arrays[f"log_probs_{b}"]
            gaps32_committed.append(float(np.abs(committed - arrays[f"log_probs64_{b}"]).max()))
            gaps32_here.append(float((lp32[0, :t].double() - lp64[0, :t]).abs().max()))
        width = max(f.shape[1] for f in feats)
        batch = torch.zeros(len(waves), feats[0].shape[0], width, dtype=torch.float64)
        for b, f in enumerate(feats):
            batch[b, :, : f.shape[1]] = f.double()
        model.double()
        with float64_kept():
            enc, enc_len = model.encoder(audio_signal=batch, length=torch.tensor(lens))
            lp_batch = model.decoder(encoder_output=enc)
        decode = model.decoding.ctc_decoder_predictions_tensor
        texts = [decode(lp, decoder_lengths=n, return_hypotheses=False)[0].text for lp, n in single64]
        model.float()
        batched_gap = max(
            float((lp_batch[b, :t] - lp[0, :t]).abs().max())
            for b, (lp, n) in enumerate(single64)
            for t in [int(n[0])]
        )
        np.savez_compressed(ref / f"{name}.npz", **arrays)
        info |= {
            "npz_sha256": sha256(ref / f"{name}.npz"),
            "greedy64_single": texts,
            "nemo_float64_batched_vs_single_max_abs": batched_gap,
            "nemo_float32_vs_float64_max_abs": {
                "committed": max(gaps32_committed),
                "here": max(gaps32_here),
                "here_cpu": cpu_isa(),
            },
            "float64_versions": versions(),
        }
        (ref / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
        report[name] = {k: info[k] for k in ("greedy64_single", "nemo_float64_batched_vs_single_max_abs",
                                               "nemo_float32_vs_float64_max_abs")}  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sets = ("base", "tiny", "small", "attention", "ctc", "aed", "aed-large", "streaming", "buffered",
            "buffered-rnnt", "punct", "spaces", "deep", "deep-float64", "pack")  # fmt: skip
    parser.add_argument("--set", choices=sets, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="+", help="build only these models of the set")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.set in ("base", "ctc"):  # base: ctc_bpe first, then the transducers below
        for name in CTC_SPECS:
            if (name == "ctc_bpe") == (args.set == "base") and (not args.only or name in args.only):
                print(json.dumps(build_ctc(name, args.out), indent=2), flush=True)
        if args.set == "ctc":
            return 0
    per_model = {"aed": (AED_SPECS, build_aed), "deep": (DEEP_SPECS, build_deep)}  # one call per model
    if args.set in per_model:
        specs, build_one = per_model[args.set]
        for name in specs:
            if not args.only or name in args.only:
                print(json.dumps(build_one(name, args.out), indent=2), flush=True)
        return 0
    whole_sets = {  # sets made by one call
        "aed-large": build_aed_large, "attention": attention_switch_reference,
        "streaming": streaming_reference, "buffered": buffered_reference,
        "buffered-rnnt": buffered_rnnt_reference, "pack": pack_fixtures, "punct": punct_reference,
        "spaces": spaces_reference, "deep-float64": deep_float64_reference,
    }  # fmt: skip
    if args.set in whole_sets:
        print(json.dumps(whole_sets[args.set](args.out), indent=2))
        return 0
    names = [n for n, s in SPECS.items() if s["set"] == args.set and (not args.only or n in args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"building {name}", flush=True)
            info = build(name, args.out, Path(tmp))
            print(
                json.dumps({k: info[k] for k in ("nemo_bytes", "parameters", "tuning", "checks")}), flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
