"""`wfst-otf`: WFST decoding with on-the-fly rescoring by a large n-gram LM (paper 000)."""

from asrdecode.decoders.wfst_otf.decoder import WfstOtfConfig, WfstOtfDecoder
from asrdecode.lm.difference import DifferenceLM

__all__ = ["DifferenceLM", "WfstOtfConfig", "WfstOtfDecoder"]
