"""Audio: read utterances with soundfile, resample on the device, plan and pad batches."""

from asrdecode.audio.batching import pad_batch, plan_batches
from asrdecode.audio.loading import MAX_OVERSHOOT_SECONDS, load_audio, resample_batch

__all__ = ["MAX_OVERSHOOT_SECONDS", "load_audio", "pad_batch", "plan_batches", "resample_batch"]
