"""Every reference to docs/fidelity.md names the section it means, and every such anchor exists there: an
explicit ``<a id="...">`` or a heading's GitHub slug."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIDELITY = ROOT / "docs" / "fidelity.md"


def _anchors() -> set[str]:
    text = FIDELITY.read_text()
    ids = set(re.findall(r'<a id="([\w-]+)"></a>', text))
    slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.+)$", text, re.M)}
    return ids | slugs


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "experiments").glob("*.yaml"),
             *(ROOT / "fbo_cli").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    return [f for f in files if f.is_file()]


def test_every_fidelity_anchor_exists():
    anchors, missing, n = _anchors(), [], 0
    assert {"shared", "bounds", "aggitd", "codasca", "zohfl", "fedbio", "local-lower", "fast-path"} <= anchors
    for f in _sources():
        for m in re.finditer(r"fidelity\.md#([\w-]+)", f.read_text()):
            n += 1
            if m.group(1) not in anchors:
                missing.append(f"{f.relative_to(ROOT)}: #{m.group(1)}")
    assert n > 60 and not missing, missing


def test_no_reference_to_fidelity_md_is_bare():
    bare = [f"{f.relative_to(ROOT)}:{i}" for f in _sources() if f != FIDELITY
            for i, line in enumerate(f.read_text().splitlines(), 1)
            if re.search(r"docs/fidelity\.md(\)|;|,? \"|\s\()", line)]
    assert not bare, f"name the section: docs/fidelity.md#<anchor> ({bare})"
