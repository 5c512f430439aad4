"""``make report-check``: screenshots of every page of the HTML report that is there, in headless Chromium:
its first screen (``<page>-screen.png``, what a reader sees before scrolling: the index's scorecards) and its
full height with every fold closed (``<page>.png``), the height also counted in screens.

Each page is first loaded once with ``--dump-dom`` to read its height (the page writes its scroll height into
``data-height`` of its body when loaded), then captured at that height (capped at ``MAX_H``)::

    python -m fbo_cli.evidence.report.screens results/report [OUT_DIR]   # default OUT_DIR: <report>/screens
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

WIDTH, MAX_H, SCREEN_H = 1280, 60000, 800  # a laptop's first screen: 1280 x 800
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=15000"]


def height(browser: str, page: Path) -> int:
    dom = subprocess.run([browser, *FLAGS, f"--window-size={WIDTH},1000", "--dump-dom", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    m = re.search(r'data-height="(\d+)"', dom)
    return min(int(m.group(1)) if m else 4000, MAX_H)


def screenshot(browser: str, page: Path, out: Path, h: int | None = None) -> tuple[Path, int]:
    """``page`` captured at height ``h`` (default: its full height) into ``out``."""
    h = h or height(browser, page)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([browser, *FLAGS, f"--window-size={WIDTH},{h}", f"--screenshot={out.resolve()}",
                    page.resolve().as_uri()], capture_output=True, timeout=300, check=True)
    return out, h


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    folder = Path(argv[0])
    dest = Path(argv[1]) if len(argv) > 1 else folder / "screens"
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("needs Chromium: make browser (Debian: apt-get install chromium) installs it")
        return 2
    pages = sorted(folder.glob("*.html"))
    if not pages:
        print(f"no HTML pages in {folder}: run `fbo report` first")
        return 2
    for page in pages:
        png, h = screenshot(browser, page, dest / f"{page.stem}.png")
        first, _ = screenshot(browser, page, dest / f"{page.stem}-screen.png", SCREEN_H)
        print(f"screenshot: {png} ({WIDTH} x {h} px, {h / SCREEN_H:.1f} screens of {SCREEN_H} px with the folds "
              f"closed; {page.stat().st_size / 1e3:.0f} kB of HTML); its first screen: {first}")
    total = sum(p.stat().st_size for p in pages)
    print(f"{len(pages)} pages, {total / 1e6:.2f} MB of HTML in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
