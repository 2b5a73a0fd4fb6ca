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


class InputsFailed(AsrDecodeError):
    """Inputs a `transcribe` call could not transcribe: ``rows`` holds the others' transcript
    records, ``failed`` one ``{"utt_id", "path", "error"}`` per failed input, in input order."""

    def __init__(self, rows: list[dict], failed: list[dict]) -> None:
        self.rows = rows
        self.failed = failed
        named = "; ".join(_naming(f.get("path") or f["utt_id"], f.get("error") or "") for f in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        total = len(rows) + len(failed)
        super().__init__(one_line(ValueError(f"{len(failed)} of {total} input(s) failed: {named}{more}")))


def _naming(name: str, message: str) -> str:
    """`message`, led by `name` unless it names it already."""
    return message if name in message else f"{name}: {message}"


def shown(text: str) -> str:
    """Text from an input (a YAML key, a state_dict key) in a one-line error: control characters
    (a newline) escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


MESSAGE_LIMIT = 2000  # characters of a message shown on the terminal or kept in errors.jsonl


def message_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A message as one printable line: control characters (a newline in a file name) escaped, and
    a message longer than `limit` (a megabyte-long file name) cut in its middle, saying so."""
    text = shown(text)
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]} ... ({len(text) - 2 * keep} characters left out) ... {text[-keep:]}"


def one_line(err: BaseException, limit: int | None = None) -> str:
    """An exception's message on one line (its type name if it has none), cut to `limit` chars."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."
