"""The built website (issue 24): every lesson and exercise has its page, no solution and no
sealed answer reaches the HTML, and in Chromium every page loads without a console error,
with every image and internal link, and the search finds a lesson by a word of its body."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from ddl_lab.active import load_quiz
from ddl_lab.tools.notebooks import BEGIN, END, MD_BEGIN, MD_END
from ddl_lab.tools.site import pages

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "site"
TAGS = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S)
MIN_SECRET = 25          # shorter bodies (`return x`) may be any page's code


def page_text(path: Path) -> str:
    """What a page says, tags and highlighting spans removed, whitespace collapsed."""
    return " ".join(html.unescape(TAGS.sub(" ", path.read_text(errors="replace"))).split())


def solution_bodies(root: Path = ROOT) -> list[tuple[str, str]]:
    """(notebook, text) of every solution region and solution-only cell of solutions/."""
    found = []
    for nb_path in sorted((root / "solutions").glob("*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if "solution-only" in cell.get("metadata", {}).get("tags", []):
                found.append((nb_path.name, src))
                continue
            begin, end = (BEGIN, END) if cell["cell_type"] == "code" else (MD_BEGIN, MD_END)
            body, inside = [], False
            for line in src.split("\n"):
                if begin.match(line):
                    inside, body = True, []
                elif end.match(line) and inside:
                    inside = False
                    found.append((nb_path.name, "\n".join(body)))
                elif inside:
                    body.append(line)
    return [(n, " ".join(b.split())) for n, b in found if len(" ".join(b.split())) >= MIN_SECRET]


def site_pages(site: Path) -> list[Path]:
    """The site's pages (not the HTML fragments its themes and MathJax keep in _static)."""
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def leaks(site: Path, secrets: list[tuple[str, str]]) -> list[str]:
    texts = {p: page_text(p) for p in site_pages(site)}
    texts.update({p: p.read_text(errors="replace") for p in site.rglob("*.js")
                  if "_static" not in p.parts})
    return [f"{nb}: {secret[:60]!r}… in {p.relative_to(site)}"
            for nb, secret in secrets for p, text in texts.items() if secret in text]


def test_every_lesson_and_exercise_has_a_page(site_dir):
    for folder in ("lessons", "exercises"):
        for name in pages.stems(ROOT / folder):
            assert (site_dir / folder / f"{name}.html").is_file(), f"no page for {folder}/{name}"
    for page in ("index", "instructors", "runtime", "byo"):
        assert (site_dir / f"{page}.html").is_file()
    landing = page_text(site_dir / "index.html")
    for name in pages.stems(ROOT / "lessons"):
        le = pages.describe(ROOT, name)
        assert le.title in landing and f"~{le.minutes} min" in landing


def lesson_text(executed: Path) -> str:
    """All a lesson shows by itself (its cells and outputs, as run): what it teaches in the
    open is no exercise's secret, even where a solution writes the same line."""
    parts = []
    for nb_path in executed.glob("*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            parts.append("".join(cell["source"]))
            for o in cell.get("outputs", []):
                parts.append("".join(o.get("text", "")))
                parts.append("".join(o.get("data", {}).get("text/plain", "")))
    return " ".join(" ".join(parts).split())


def test_no_solution_appears_anywhere_in_the_site(site_dir):
    shown = lesson_text(ROOT / "build" / "lessons")
    secrets = [(nb, s) for nb, s in solution_bodies() if s not in shown]
    assert len(secrets) > 40, "the solutions' regions were not found"
    assert len(secrets) > 0.9 * len(solution_bodies()), "most solutions are in the lessons"
    found = leaks(site_dir, secrets)
    assert found == [], "\n".join(found)


def test_the_leak_finder_finds_a_solution_put_on_a_page(tmp_path):
    nb, secret = solution_bodies()[0]
    (tmp_path / "p.html").write_text("<pre>" + "".join(
        f"<span class='n'>{html.escape(w)}</span>\n " for w in secret.split()) + "</pre>")
    assert leaks(tmp_path, [(nb, secret)])


def test_quizzes_and_predictions_stay_sealed(site_dir):
    site_text = " ".join(page_text(p) for p in (site_dir / "lessons").glob("*.html"))
    for name in pages.stems(ROOT / "lessons"):
        for q in load_quiz(name[3:]):
            assert " ".join(q.explanation().split()) not in site_text, (name, q.prompt)
            assert " ".join(q.prompt.split()) in site_text, (name, q.prompt)
        for why in re.findall(r'why=f?"([^"{]{30,})', (ROOT / "lessons" / f"{name}.ipynb")
                              .read_text()):
            assert why.strip()[:40] not in site_text, (name, why)
    assert "you predicted" not in site_text
    assert pages.SEALED.strip("_ 🔒")[:40] in site_text


def test_each_lesson_page_has_its_launch_links(site_dir):
    for name in pages.stems(ROOT / "lessons"):
        raw = (site_dir / "lessons" / f"{name}.html").read_text()
        assert f"https://mybinder.org/v2/gh/ddl-lab/ddl_lab/main?labpath=lessons/{name}.ipynb" \
            in html.unescape(raw), name
        assert "make lab" in page_text(site_dir / "lessons" / f"{name}.html")


# --------------------------------------------------------------------------- in Chromium

@pytest.fixture(scope="module")
def browser(playwright_browser):
    """The session's Chromium (conftest.py), shared with the browser tests."""
    return playwright_browser


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    pg.problems = []                                          # type: ignore[attr-defined]
    pg.on("console", lambda m: pg.problems.append(f"console {m.type}: {m.text}")
          if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
    pg.on("requestfailed", lambda r: pg.problems.append(f"request failed: {r.url} ({r.failure})")
          if r.failure != ABORTED else None)
    yield pg
    ctx.close()


# A request the browser itself cancels when the next page is opened (the favicon, fetched
# after "load"): not a broken resource; what it asked for is checked as a link instead.
ABORTED = "net::ERR_ABORTED"
BROKEN_IMAGES_JS = "() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0)" \
                   ".map(i => i.getAttribute('src'))"
LINKS_JS = "() => [...document.querySelectorAll('a[href], link[href]')].map(a => a.href)"


def _target_ok(site: Path, base: str, url: str) -> bool:
    parsed = urlparse(url)
    path = site / unquote(parsed.path[len(urlparse(base).path):])
    if path.is_dir():
        path = path / "index.html"
    if not path.is_file():
        return False
    return not parsed.fragment or f'id="{parsed.fragment}"' in path.read_text(errors="replace")


def test_every_page_loads_with_its_images_and_links(site_dir, served, page):
    problems = []
    for html_file in site_pages(site_dir):
        rel = html_file.relative_to(site_dir).as_posix()
        page.problems.clear()
        page.goto(served + rel, wait_until="load")
        page.wait_for_function("() => [...document.images].every(i => i.complete)")
        if page.locator(".math").count():       # MathJax loads its fonts after the page
            page.wait_for_load_state("networkidle")
        problems += [f"{rel}: {p}" for p in page.problems]
        problems += [f"{rel}: image not loaded: {s}" for s in page.evaluate(BROKEN_IMAGES_JS)]
        internal = {u for u in page.evaluate(LINKS_JS) if u.startswith(served)}
        problems += [f"{rel}: link to nothing: {u}" for u in sorted(internal)
                     if not _target_ok(site_dir, served, u)]
    assert problems == [], "\n".join(problems)


def _body_word(lesson: str) -> str:
    """A long word of ``lesson``'s text that no other lesson uses."""
    def words(name: str) -> set[str]:
        nb = json.loads((ROOT / "lessons" / f"{name}.ipynb").read_text())
        text = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        return set(re.findall(r"\b[a-z]{9,}\b", text))
    others = set().union(*(words(n) for n in pages.stems(ROOT / "lessons") if n != lesson))
    return sorted(words(lesson) - others)[0]


def test_search_finds_a_lesson_by_a_word_of_its_body(site_dir, served, page):
    lesson = next(n for n in pages.stems(ROOT / "lessons") if n.startswith("06_"))
    word = _body_word(lesson)
    page.goto(f"{served}search.html?q={word}")
    hits = page.locator(f'#search-results a[href*="lessons/{lesson}"]')
    hits.first.wait_for(state="attached", timeout=30_000)
    assert page.problems == []


def test_screenshots_of_the_landing_page_and_lesson_06(site_dir, served, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    lesson = next(n for n in pages.stems(ROOT / "lessons") if n.startswith("06_"))
    for url, name in (("index.html", "landing"), (f"lessons/{lesson}.html", "lesson-06")):
        page.goto(served + url, wait_until="load")
        page.wait_for_function("() => [...document.images].every(i => i.complete)")
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000
