"""The documentation users read must match the code and lead somewhere.

The option tables and the output columns live on the connectors' pages of the docs site; every
row must appear there exactly as the code renders it, so a default or a meaning changed in the
code and not in the docs (or the reverse) fails here. README.md is the front door: short, and
its links (which ``mkdocs build --strict`` does not check) must point at files that exist.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from connector_common.change_rows import COLUMNS
from iggy_spark.options import OPTION_DOCS as SINK_OPTIONS
from iggy_spark.source.options import OPTION_DOCS as IGGY_SOURCE_OPTIONS
from iggy_spark.source.schema import COLUMNS as IGGY_COLUMNS
from iggy_spark.source.schema import SCHEMA as IGGY_SCHEMA
from postgres_cdc_source.option_docs import OPTION_DOCS as SOURCE_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SOURCE_PAGE = DOCS / "pg_cdc.md"
SINK_PAGE = DOCS / "iggy_routed.md"
IGGY_SOURCE_PAGE = DOCS / "iggy_source.md"
README_MAX_LINES = 250

# [text](target) and ![alt](target), not inside inline code; the target ends at a space or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def _lines(page: Path) -> set[str]:
    """The page's lines, HTML entities decoded (`array&lt;string&gt;` renders as a type, where a
    bare `array<string>` would be taken for a tag)."""
    return {html.unescape(line.strip()) for line in page.read_text().splitlines()}


def _missing_rows(page: Path, rows: list[str]) -> list[str]:
    present = _lines(page)
    return [row for row in rows if row not in present]


def _option_rows(docs: Iterable[tuple[str, str, str]]) -> list[str]:
    return [f"| `{name}` | {default} | {meaning} |" for name, default, meaning in docs]


def test_every_source_option_is_on_the_pg_cdc_page_with_its_default_and_meaning() -> None:
    assert _missing_rows(SOURCE_PAGE, _option_rows(SOURCE_OPTIONS)) == []


def test_every_sink_option_is_on_the_iggy_routed_page_with_its_default_and_meaning() -> None:
    assert _missing_rows(SINK_PAGE, _option_rows(SINK_OPTIONS)) == []


def test_every_output_column_is_on_the_pg_cdc_page() -> None:
    rows = [f"| `{name}` | {ddl} | {meaning} |" for name, ddl, _, meaning in COLUMNS]
    assert _missing_rows(SOURCE_PAGE, rows) == []


def test_every_iggy_source_option_is_on_its_page_with_its_default_and_meaning() -> None:
    assert _missing_rows(IGGY_SOURCE_PAGE, _option_rows(IGGY_SOURCE_OPTIONS)) == []


def test_every_iggy_source_column_is_on_its_page_with_its_type() -> None:
    assert [name for name, _ in IGGY_COLUMNS] == IGGY_SCHEMA.fieldNames()
    rows = [f"| `{name}` | {IGGY_SCHEMA[name].dataType.simpleString()} | {meaning} |"
            for name, meaning in IGGY_COLUMNS]
    assert _missing_rows(IGGY_SOURCE_PAGE, rows) == []


def test_a_row_the_code_does_not_have_is_found_missing(tmp_path: Path) -> None:
    """The check itself can fail: a page without one of the rows is reported."""
    rows = _option_rows(SOURCE_OPTIONS)
    page = tmp_path / "page.md"
    page.write_text("\n".join(rows[:-1]) + "\n| `slot` | (changed) | other |\n")
    assert _missing_rows(page, rows) == [rows[-1]]


def test_the_readme_is_a_short_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def _relative_links(page: Path) -> list[str]:
    text = _CODE.sub("", page.read_text())
    targets = [m.group(1) for m in _LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", t)]


@pytest.mark.parametrize(
    "page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_relative_link_points_at_a_file_that_exists(page: Path) -> None:
    broken = [
        target for target in _relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert broken == [], f"{page.name} links to missing files: {broken}"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md#top) [gone](docs/nowhere.md) `[not a link](x.md)` "
                    "[web](https://example.org)\n")
    assert _relative_links(page) == ["page.md#top", "docs/nowhere.md"]
