"""The documentation users read must match the code and lead somewhere.

The option tables and the output columns live on the connectors' pages of the docs site; every
row must appear there exactly as the code renders it, so a default or a meaning changed in the
code and not in the docs (or the reverse) fails here, and an option the docs name must exist in
the code. The API reference lists exactly the names each package face exports (``__all__``),
and Troubleshooting's errors table every exception among them. README.md is the front door:
short, and its links (which ``mkdocs build --strict`` does not check) must point at files that
exist. The docs' code examples are run by ``test_docs_examples.py``.
"""

from __future__ import annotations

import html
import importlib
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from connector_common.change_rows import COLUMNS
from iggy_spark.sink.options import OPTION_DOCS as SINK_OPTIONS
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
REFERENCE_PAGE = DOCS / "reference.md"
TROUBLESHOOTING_PAGE = DOCS / "troubleshooting.md"
SECURITY_PAGE = DOCS / "security.md"
README_MAX_LINES = 250
FACES = ("postgres_cdc_source", "postgres_cdc_source.monitoring", "iggy_spark",
         "iggy_spark.source", "iggy_spark.monitoring", "pg_to_iggy")
"""The packages users import from: the public API is each one's ``__all__``."""

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


# -- the docs' option tables name only options the code has ------------------------------------

_OPTION_HEADER = "| option | default | meaning |"
_CELL = re.compile(r"`([^`]+)`")


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of every row of the tables headed ``header`` in ``text``."""
    rows: list[list[str]] = []
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line != header:
            continue
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            rows.append([cell.strip() for cell in row.strip("|").split(" | ")])
    return rows


def _documented_options(page: Path) -> list[str]:
    return [m.group(1) for cells in _table_rows(page.read_text(), _OPTION_HEADER)
            if (m := _CELL.fullmatch(cells[0]))]


@pytest.mark.parametrize(("page", "docs"), [
    (SOURCE_PAGE, SOURCE_OPTIONS), (SINK_PAGE, SINK_OPTIONS),
    (IGGY_SOURCE_PAGE, IGGY_SOURCE_OPTIONS),
], ids=lambda v: v.name if isinstance(v, Path) else "")
def test_every_option_a_docs_table_names_exists_in_the_code(
    page: Path, docs: Iterable[tuple[str, str, str]]
) -> None:
    documented = _documented_options(page)
    assert documented, f"no option table found on {page.name}"
    known = {name for name, _, _ in docs}
    assert [name for name in documented if name not in known] == []


def test_option_tables_are_only_on_the_connectors_pages() -> None:
    """A new page with an option table must be bound to the code above, not left unchecked."""
    pages = {page for page in DOCS.glob("*.md") if _OPTION_HEADER in _lines(page)}
    assert pages == {SOURCE_PAGE, SINK_PAGE, IGGY_SOURCE_PAGE}


def test_the_option_check_finds_an_option_the_code_does_not_have(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{_OPTION_HEADER}\n| --- | --- | --- |\n| `slot` | x | y |\n"
                    "| `slots` | x | y |\n\nafter\n")
    assert _documented_options(page) == ["slot", "slots"]


# -- the public API: the reference lists each face's names, troubleshooting its errors ----------

def _public(face: str) -> dict[str, object]:
    module = importlib.import_module(face)
    return {name: getattr(module, name) for name in module.__all__}


def _sections(text: str) -> dict[str, str]:
    """The page's ``## `name` `` sections, by name."""
    parts = re.split(r"^## `([^`]+)`\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _reference_names(face: str) -> list[str]:
    section = _sections(REFERENCE_PAGE.read_text()).get(face, "")
    return [m.group(1) for cells in _table_rows(section, "| name | what it is |")
            if (m := _CELL.fullmatch(cells[0]))]


@pytest.mark.parametrize("face", FACES)
def test_the_reference_lists_exactly_the_names_a_package_exports(face: str) -> None:
    listed = _reference_names(face)
    assert len(listed) == len(set(listed)), f"a name is listed twice under {face}"
    assert sorted(listed) == sorted(_public(face))


@pytest.mark.parametrize("face", FACES)
def test_the_reference_renders_each_package_from_its_face(face: str) -> None:
    section = _sections(REFERENCE_PAGE.read_text()).get(face, "")
    assert re.search(rf"^::: {re.escape(face)}$", section, flags=re.M), (
        f"reference.md has no '::: {face}' under its '## `{face}`' heading")


def _error_rows() -> set[tuple[str, str]]:
    """``(exception name, face)`` for every row of Troubleshooting's errors table."""
    header = "| error | import from | raised when | fields |"
    rows = _table_rows(TROUBLESHOOTING_PAGE.read_text(), header)
    assert rows, "Troubleshooting has no errors table"
    return {(_CELL.match(cells[0]).group(1), face)  # type: ignore[union-attr]
            for cells in rows for face in _CELL.findall(cells[1])}


def _exceptions(face: str) -> set[tuple[str, str]]:
    return {(name, face) for name, obj in _public(face).items()
            if isinstance(obj, type) and issubclass(obj, BaseException)}


def test_every_exported_exception_is_in_the_troubleshooting_table() -> None:
    exported = set().union(*(_exceptions(face) for face in FACES))
    assert sorted(exported - _error_rows()) == []


def test_the_troubleshooting_table_names_only_exported_exceptions() -> None:
    exported = set().union(*(_exceptions(face) for face in FACES))
    assert sorted(_error_rows() - exported) == []


def test_the_security_pages_controls_are_options_and_errors_the_code_has() -> None:
    """Each control the threat model names is an option of its connector or an exception its
    package exports, so the page cannot promise a control that is gone."""
    header = "| control | connector | what it stops |"
    rows = _table_rows(SECURITY_PAGE.read_text(), header)
    assert rows, "the security page has no controls table"
    options = {"pg_cdc": SOURCE_OPTIONS, "iggy_routed": SINK_OPTIONS, "iggy": IGGY_SOURCE_OPTIONS}
    unknown = []
    for cells in rows:
        control, connector = _CELL.findall(cells[0])[0], _CELL.findall(cells[1])[0]
        if connector in options:
            known = {name for name, _, _ in options[connector]}
        else:
            known = {name for name, _ in _exceptions(connector)}
        if control not in known:
            unknown.append((control, connector))
    assert unknown == []
