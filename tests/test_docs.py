"""The documentation describes the product as it is: the README and docs/real-speech.md stay short,
every relative link in README.md and docs/ reaches a file (and heading) that exists, and no README,
doc, code or config cites the project's own development history (numbered sessions, issues, items)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
HISTORY = re.compile(r"session [0-9]|issue [0-9]|item [0-9]|items [0-9]", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".sh"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_readme_and_real_speech_stay_short():
    assert line_count(ROOT / "README.md") <= 120
    assert line_count(ROOT / "docs" / "real-speech.md") <= 300


def test_no_targets_page():
    assert not (ROOT / "docs" / "targets.md").exists()


def history_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("docs", "asrdecode", "configs"):
        files += [p for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return files


def test_no_development_history():
    hits = []
    for path in history_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "references to the development history:\n" + "\n".join(hits)


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            base = slug(line.lstrip("#"))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(doc: Path):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        exists = path.exists()
        if not exists or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_slug_follows_github():
    assert slug("`let` against `wfst-otf`") == "let-against-wfst-otf"
    assert slug("The `wfst` torch backend on a GPU") == "the-wfst-torch-backend-on-a-gpu"
