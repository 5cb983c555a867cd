"""The README's option tables are the documentation users read: they must match the code."""

from __future__ import annotations

from pathlib import Path

from iggy_spark.options import OPTION_DOCS as SINK_OPTIONS
from postgres_cdc_source.options import OPTION_DOCS as SOURCE_OPTIONS
from postgres_cdc_source.schema import COLUMNS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_option_is_in_the_readme_with_its_default_and_meaning() -> None:
    for doc in (*SOURCE_OPTIONS, *SINK_OPTIONS):
        assert f"| `{doc.name}` | {doc.default} | {doc.meaning} |" in README, doc.name


def test_every_output_column_is_in_the_readme() -> None:
    for name, ddl, _, meaning in COLUMNS:
        assert f"| `{name}` | {ddl} | {meaning} |" in README, name
