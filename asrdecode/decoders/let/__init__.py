"""The `let` decoder: lazy-evaluation token-group search with on-the-fly LM composition (paper 002)."""

from asrdecode.decoders.let.decoder import LetConfig, LetDecoder, LetSearch

__all__ = ["LetConfig", "LetDecoder", "LetSearch"]
