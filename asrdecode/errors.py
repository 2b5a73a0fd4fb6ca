"""Exceptions that the CLI turns into one-line messages (no traceback unless --debug)."""


class AsrDecodeError(Exception):
    """Base class: a problem the user can fix; str(err) is the one-line message."""


class ConfigError(AsrDecodeError):
    """Unknown config key, wrong type or bad value."""


class InputError(AsrDecodeError):
    """A manifest, data dir or input folder that cannot be read."""


class AudioError(AsrDecodeError):
    """One audio file that cannot be read, is empty, truncated or cannot be resampled."""


class ModelError(AsrDecodeError):
    """A model file that cannot be loaded (unsupported class, unsafe archive, bad weights)."""


class LogprobsError(AudioError):
    """A saved log-prob matrix (.npy) that is missing, unreadable or does not match logprobs.json."""


class OutputError(AsrDecodeError):
    """An output directory that cannot be written or is in use by another run."""


class GraphError(AsrDecodeError):
    """A decoding graph, lexicon, unit list or ARPA file that cannot be built or loaded."""


def shown(text: str) -> str:
    """Text from an input (a YAML key, a state_dict key) in a one-line error: control characters
    (a newline) escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


def one_line(err: BaseException, limit: int | None = None) -> str:
    """An exception's message on one line (its type name if it has none), cut to `limit` chars."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."
