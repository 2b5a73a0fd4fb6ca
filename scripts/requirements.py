"""Print asrdecode's requirements (from the installed package's metadata) on one line, separated by
spaces (none has a space in it), for installing them beside another torch (`make test-gpu-versions`:
``pip install $(python scripts/requirements.py ...)``, whose words are not parsed for redirections).

    python scripts/requirements.py --extra dev --without torch torchaudio
"""

from __future__ import annotations

import argparse
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirements(extras: list[str], without: list[str]) -> list[str]:
    """The requirement lines of asrdecode and of its `extras`, less the distributions `without`."""
    dropped = {canonicalize_name(n) for n in without}
    lines = []
    for line in requires("asrdecode") or []:
        req = Requirement(line)
        if canonicalize_name(req.name) in dropped:
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ["", *extras]):
            continue
        req.marker = None
        lines.append(str(req))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra", nargs="*", default=[], help="extras whose requirements are printed too")
    ap.add_argument("--without", nargs="*", default=[], help="distributions left out")
    args = ap.parse_args()
    print(" ".join(requirements(args.extra, args.without)))


if __name__ == "__main__":
    main()
