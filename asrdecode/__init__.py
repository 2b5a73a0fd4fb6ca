"""asrdecode: batch speech transcription with batched, device-agnostic speech decoders.

The Python API (`asrdecode.api`, loaded on first use): `transcribe`, `load_model`, `load_graph`,
`make_decoder`, `decode`, and `InputsFailed` (inputs a `transcribe` call could not transcribe);
see docs/api.md.
"""

from typing import Any

from asrdecode.version import __version__ as __version__

__all__ = ["InputsFailed", "decode", "load_graph", "load_model", "make_decoder", "transcribe"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from asrdecode import api

        return getattr(api, name)
    raise AttributeError(f"module 'asrdecode' has no attribute {name!r}")
