"""Long inputs through the Conformer encoder. Subsampling in chunks: identical to the whole-input
convolutions. Banded (local) self-attention: the same outputs as the full attention
with the band masked ([B, T, T] mask), for symmetric, one-sided and asymmetric windows, padded
batches and query blocks smaller than the input; memory that does not grow with T²; the
feed-forward modules a piece of frames at a time, identical too; one-line
errors for windows NeMo's sliding-window attention cannot have. NeMo parity of `rel_pos_local_attn`
is in test_nemo_transducer.py / test_transducer_greedy.py (fixture `rnnt_local`)."""

from __future__ import annotations

import pytest
import torch

from asrdecode.errors import ModelError
from asrdecode.models.conformer import (
    ConformerConfig,
    ConformerEncoder,
    ConvSubsampling,
    LocalWindow,
    _time_mask,
)


def encoder(context: list[int], attention: str = "rel_pos") -> ConformerEncoder:
    torch.manual_seed(0)
    cfg = ConformerConfig.from_dict(
        {
            "feat_in": 16, "n_layers": 2, "d_model": 32, "n_heads": 4, "subsampling_factor": 4,
            "subsampling": "dw_striding", "subsampling_conv_channels": 8, "conv_kernel_size": 5,
            "att_context_size": context, "self_attention_model": attention,
        }
    )  # fmt: skip
    return ConformerEncoder(cfg).eval()


@pytest.mark.parametrize("context", [[3, 3], [5, 2], [0, 4], [2, 0], [8, 8]])
@pytest.mark.parametrize("block", [256, 7])
def test_banded_equals_masked_full_attention(context, block):
    enc = encoder(context)
    x, lengths = torch.randn(3, 16, 200), torch.tensor([200, 150, 37])
    with torch.no_grad():
        enc.local_window = lambda n, t: LocalWindow(context[0], context[1], _time_mask(n, t), block)
        banded, out_len = enc(x, lengths)
        enc.local_window = lambda n, t: None  # the [B, T, T] mask path
        full, _ = enc(x, lengths)
    for b, n in enumerate(out_len.tolist()):
        torch.testing.assert_close(banded[b, :, :n], full[b, :, :n], atol=5e-6, rtol=0)


def test_local_attention_memory_is_linear_in_time():
    """A 40-minute input's worth of encoder frames (30,000) with an [8, 8] window: the banded path
    never allocates a T x T matrix (which alone would be 3.6 GB per head here)."""
    enc = encoder([8, 8], "rel_pos_local_attn")
    frames = 30000 * 4
    with torch.no_grad():
        out, lengths = enc(torch.randn(1, 16, frames), torch.tensor([frames]))
    assert out.shape == (1, 32, 30000) and lengths.tolist() == [30000]


def test_local_attention_windows_nemo_cannot_have():
    for bad in ([8, 4], [0, 0], [-1, -1]):
        with pytest.raises(ModelError, match="att_context_size.*rel_pos_local_attn"):
            encoder(bad, "rel_pos_local_attn")


@pytest.mark.parametrize(
    "kind, factor", [("dw_striding", 4), ("dw_striding", 8), ("striding", 4), ("striding", 8)]
)
def test_chunked_subsampling_equals_whole_input(kind, factor):
    """Chunks of 17 output frames (odd, so chunks start mid-stride) give exactly the whole-input
    convolutions on a padded batch, lengths included."""
    torch.manual_seed(1)
    sub = ConvSubsampling(kind, factor, 80, 32, 8).eval()
    x, lengths = torch.randn(3, 1001, 80), torch.tensor([1001, 700, 33])
    with torch.no_grad():
        sub.chunk_frames = 1 << 20  # the whole input in one piece
        whole, whole_len = sub(x, lengths)
        sub.chunk_frames = 17
        chunked, chunked_len = sub(x, lengths)
    assert whole_len.tolist() == chunked_len.tolist() and whole.shape == chunked.shape
    for b, n in enumerate(whole_len.tolist()):
        assert torch.equal(whole[b, :n], chunked[b, :n])


def test_chunked_causal_subsampling_equals_whole_input():
    """NeMo's causal downsampling (2 frames of padding before, 1 after, on time and frequency) in
    chunks: identical to the whole input; 80 mel bins become 21 after two causal stride-2 convs."""
    torch.manual_seed(2)
    sub = ConvSubsampling("dw_striding", 4, 80, 32, 8, causal=True).eval()
    assert sub.out.in_features == 8 * 21
    x, lengths = torch.randn(2, 999, 80), torch.tensor([999, 400])
    with torch.no_grad():
        sub.chunk_frames = 1 << 20  # the whole input in one piece
        whole, whole_len = sub(x, lengths)
        sub.chunk_frames = 13
        chunked, chunked_len = sub(x, lengths)
    assert whole_len.tolist() == chunked_len.tolist() == [251, 101]  # L -> floor(L / 2) + 1, twice
    for b, n in enumerate(whole_len.tolist()):
        assert torch.equal(whole[b, :n], chunked[b, :n])


@pytest.mark.parametrize("context", [None, "causal"])
def test_encoder_in_pieces_equals_the_whole_input(context):
    """The subsampling in chunks sized by `chunk_bytes` (here 64 frames), the feed-forward modules
    `ff_frames` (37) and the convolution modules `frames` (29) at a time: the same encodings as the
    whole input at once, bit for bit, on a padded batch with sliding-window attention, with centred
    and causal convolutions."""
    torch.manual_seed(3)
    cfg = ConformerConfig(
        feat_in=80, n_layers=2, d_model=64, subsampling="dw_striding", subsampling_factor=4, n_heads=4,
        conv_kernel_size=9, att_context_size=[16, 16], self_attention_model="rel_pos_local_attn",
        conv_context_size=context,
    )  # fmt: skip
    enc = ConformerEncoder(cfg).eval()
    for layer in enc.layers:  # batch norm statistics that are not the identity
        layer.conv.batch_norm.running_mean.normal_()
        layer.conv.batch_norm.running_var.uniform_(0.5, 2.0)
    f, n = torch.randn(2, 80, 3001), torch.tensor([3001, 2000])
    with torch.no_grad():
        enc.pre_encode.chunk_frames = 1 << 20
        for layer in enc.layers:
            layer.ff_frames = layer.conv.frames = 1 << 20
        whole, whole_len = enc(f, n)
        enc.pre_encode.chunk_frames = None  # sized by chunk_bytes
        enc.pre_encode.chunk_bytes = 1 << 16
        assert enc.pre_encode._frames_per_chunk(2, 80) == 64
        for layer in enc.layers:
            layer.ff_frames, layer.conv.frames = 37, 29
        pieces, pieces_len = enc(f, n)
    assert torch.equal(whole_len, pieces_len) and torch.equal(whole, pieces)


def test_subsampling_chunks_are_sized_by_the_first_convs_output():
    """`chunk_bytes` bounds the first conv's output of a chunk: [B, channels, frames * factor / 2,
    F / 2 + 1] floats; a wide model gets short chunks, a narrow one long ones."""
    sizes = {}
    for channels, factor, batch in [(256, 8, 1), (64, 4, 1), (256, 8, 4), (4096, 8, 8)]:
        sub = ConvSubsampling("dw_striding", factor, 80, 32, channels)
        frames = sub._frames_per_chunk(batch, 80)
        per_frame = batch * channels * (factor // 2) * 41 * 4  # bytes of the first conv's output
        assert frames == 64 or per_frame * frames <= sub.chunk_bytes < per_frame * (frames + 1)
        sizes[channels, batch] = frames
    assert sizes == {(256, 1): 199, (64, 1): 1598, (256, 4): 64, (4096, 8): 64}
