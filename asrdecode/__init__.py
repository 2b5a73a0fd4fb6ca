"""asrdecode: batch speech transcription with batched, device-agnostic speech decoders."""

__version__ = "0.1.0"
