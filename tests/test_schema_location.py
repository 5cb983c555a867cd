"""``schema_location`` never repeats a credential: a URI with a user or password is refused by
its option, and what pyarrow cannot open is named without its user, query string or fragment,
in the error and in its cause."""

from __future__ import annotations

import logging
import traceback

import pytest

from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.struct.history import shown_location, structs_path

SECRET = "hunter2"


def _options(location: str) -> CdcOptions:
    return CdcOptions.from_options({"dsn": "dbname=x", "slot": "s", "row_format": "struct",
                                    "schema_evolution": "add_columns",
                                    "schema_location": location})


@pytest.mark.parametrize(("location", "shown"), [
    (f"s3://bucket/x?region=us-east-1&secret_key={SECRET}", "s3://bucket/x"),
    (f"S3://bucket/x?Secret_Key={SECRET}", "S3://bucket/x"),  # pyarrow echoes the whole URI
    (f"gs://bucket/x?token={SECRET}#{SECRET}", "gs://bucket/x"),
    (f"nosuch://host/x?{SECRET}", "nosuch://host/x"),
])
def test_a_location_pyarrow_refuses_is_named_without_its_query(
    location: str, shown: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    options = _options(location)
    assert SECRET not in repr(options)
    with pytest.raises(ConfigError, match=f"option 'schema_location': cannot open '{shown}'"
                       ) as refused:
        structs_path(options)
    printed = "".join(traceback.format_exception(refused.value))
    assert SECRET not in printed and SECRET not in caplog.text


@pytest.mark.parametrize("location", [
    f"s3://key:{SECRET}@bucket/x", f"abfs://:{SECRET}@account.blob.core.windows.net/c",
    f"NOSUCH://u:{SECRET}@host/x",
])
def test_a_location_with_a_user_or_password_is_refused_without_repeating_it(
    location: str,
) -> None:
    with pytest.raises(ConfigError, match="option 'schema_location': a URI with a user") as no:
        _options(location)
    assert SECRET not in "".join(traceback.format_exception(no.value))


def test_what_errors_show_of_a_location() -> None:
    assert shown_location("/structs/q?x") == "/structs/q?x"  # a local path, as it is
    assert shown_location(f"s3://k:{SECRET}@b/p/q?a=1#f") == "s3://b/p/q"
    assert shown_location(f"hdfs://u@[::1/x?{SECRET}") == "hdfs://[::1/x"  # urlsplit raises
