"""Passwords in ``dsn`` and ``url`` never show: not in errors, logs, reprs, Spark's query
descriptions and progress, explain output, the destinations table, or the checkpoint.

Each DSN is tried in both of libpq's forms: ``key=value`` and a URI, whose password is
percent-encoded (it holds ``@``, ``:`` and ``%``, which a URI must encode), so neither the
password nor its encoded form may show. Every failure is the one typed error the connector
raises for it, inside the exception Spark gives the user.

Postgres here is a cluster of its own where role ``app`` must log in with its password
(SCRAM), so a wrong password really fails; the broker has a non-default password. Failures are
forced (wrong password, wrong port, bad options) and everything a user or an operator could see
is gathered and searched for both secrets. That the broker refuses every command but ping
before login, and rejects wrong credentials, is tested in
local_broker/test_local_broker_robustness.py.

Known and not fixable here: ``python -m pg_to_iggy.pipeline --dsn ... --url ...`` takes the
secrets as arguments, which any local user can read in the process list; the test below checks
only what the job prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from iggy_local import LocalIggy
from iggy_spark import destinations
from iggy_spark.sink.writer import IggyRoutedStreamWriter
from iggy_spark_testing.chaos import prepare_capture
from iggy_spark_testing.harness import LocalPostgres, free_port
from iggy_spark_testing.oracle import verify
from pg_to_iggy.pipeline import start_pipeline
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import PgCdcStreamReader

PG_SECRET = "pg:S3c@ret%Zq9"
IGGY_SECRET = "iggy:S3c@ret%Xw7"
WRONG = "wr0ng:Pa@55%word"
SECRETS = (PG_SECRET, IGGY_SECRET, WRONG,
           *(quote(secret, safe="") for secret in (PG_SECRET, IGGY_SECRET, WRONG)))
"""Each password, and each as a URI carries it (``@`` as ``%40``, ``:`` as ``%3A``, ``%`` as
``%25``)."""
DSN_FORMS = ("key=value", "uri")


def assert_no_secret(*texts: str) -> None:
    for i, text in enumerate(texts):
        for secret in SECRETS:
            assert secret not in text, f"text #{i} shows a password: ...{text[:300]}..."


@pytest.fixture(scope="module")
def secured_pg() -> Iterator[LocalPostgres]:
    """A cluster where role ``app`` (replication, owner of its schemas) needs its password."""
    with LocalPostgres() as server:
        with server.connect() as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("CREATE ROLE app LOGIN REPLICATION PASSWORD {}").format(
                sql.Literal(PG_SECRET)))
            conn.execute("GRANT CREATE ON DATABASE postgres TO app")
        hba = server.data_dir / "pg_hba.conf"
        hba.write_text("host all app 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        with server.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield server


@pytest.fixture(scope="module")
def secured_broker() -> Iterator[LocalIggy]:
    with LocalIggy(password=IGGY_SECRET) as broker:
        yield broker


def app_dsn(server: LocalPostgres, password: str | None = PG_SECRET, port: int | None = None,
            form: str = "key=value") -> str:
    """Role ``app``'s DSN, as ``key=value`` pairs or as a URI (``None``: without a password)."""
    port = port or server.port
    if form == "uri":
        user = "app" if password is None else f"app:{quote(password, safe='')}"
        return f"postgresql://{user}@127.0.0.1:{port}/postgres?connect_timeout=3"
    secret = "" if password is None else f" password={password}"
    return f"host=127.0.0.1 port={port} user=app dbname=postgres{secret} connect_timeout=3"


def iggy_url(broker: LocalIggy, password: str = IGGY_SECRET) -> str:
    return f"iggy://iggy:{quote(password, safe='')}@{broker.address}"


@pytest.mark.services
@pytest.mark.parametrize("form", DSN_FORMS)
def test_the_role_really_needs_its_password(secured_pg: LocalPostgres, form: str) -> None:
    """With the wrong password, or none, the login fails; with the right one, written either
    way, it works (so the URI's percent-encoding reaches the server as the password)."""
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for '
                                                       'user "app"'):
        psycopg.connect(app_dsn(secured_pg, WRONG, form=form)).close()
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(app_dsn(secured_pg, None, form=form)).close()
    assert PG_SECRET not in app_dsn(secured_pg, form="uri")
    psycopg.connect(app_dsn(secured_pg, form=form)).close()


@pytest.mark.services
@pytest.mark.iggy_line
@pytest.mark.parametrize("form", DSN_FORMS)
def test_reprs_hide_both_passwords(
    secured_pg: LocalPostgres, secured_broker: LocalIggy, form: str
) -> None:
    from iggy_spark.sink.options import RoutedOptions

    source = CdcOptions.from_options({"dsn": app_dsn(secured_pg, form=form), "slot": "s"})
    sink = RoutedOptions.from_options({"url": iggy_url(secured_broker)})
    writer = IggyRoutedStreamWriter(sink)
    assert_no_secret(repr(source), str(source), source.safe_dsn, repr(PgCdcStreamReader(source)),
                     repr(sink), str(sink), repr(sink.url), str(sink.url), repr(writer))


_REFUSED_CONNECT = r"SourceError: cannot connect to Postgres \(user=app password=\*\*\* .*\): "
FAILURES: dict[str, tuple[dict[str, str], dict[str, str], type[Exception], str]] = {
    "wrong postgres password": (
        {"dsn": WRONG}, {}, StreamingQueryException,
        _REFUSED_CONNECT + 'connection failed: .*password authentication failed for user "app"'),
    "wrong postgres port": (
        {"port": "free", "connect_retry_timeout": "0s"}, {}, StreamingQueryException,
        _REFUSED_CONNECT + "connection failed: .*Connection refused"),
    "bad source option": (
        {"fetch_rows": "0"}, {}, AnalysisException,
        "ConfigError: option 'fetch_rows': bad value: must be between 1 and"),
    "wrong iggy password": (
        {}, {"url": WRONG}, StreamingQueryException,
        r"ServerError: cannot use the Iggy server at 127\.0\.0\.1:\d+: Invalid credentials"),
    "bad sink option": (
        {}, {"max_batch_bytes": "lots"}, StreamingQueryException,
        "ConfigError: option 'max_batch_bytes': bad value: expected a size"),
}
"""Each failure: the source's and the sink's faults, the exception Spark raises (a bad
``pg_cdc`` option at ``load()``, the rest when the query runs) and the connector's error in it."""


@pytest.mark.parametrize("form", DSN_FORMS)
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_failures_never_show_a_password(
    spark: SparkSession, secured_pg: LocalPostgres, secured_broker: LocalIggy, name: str,
    checkpoint: str, failure: str, form: str, capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    work, source = prepare_capture(app_dsn(secured_pg), name, seed=21)
    work.run(changes=50)
    source_fault, sink_fault, expected, message = FAILURES[failure]
    dsn = app_dsn(secured_pg, password=source_fault.get("dsn", PG_SECRET),
                  port=free_port() if "port" in source_fault else None, form=form)
    url = iggy_url(secured_broker, sink_fault.get("url", IGGY_SECRET))
    extra_source = {k: v for k, v in source_fault.items() if k not in ("dsn", "port")}
    extra_sink = {k: v for k, v in sink_fault.items() if k != "url"}
    started: list[StreamingQuery] = []

    def run() -> None:
        started.append(start_pipeline(spark, dsn=dsn, slot=name, url=url, checkpoint=checkpoint,
                                      source={**source, **extra_source},
                                      sink={"send_timeout": "5s", **extra_sink}))
        started[0].awaitTermination(120)

    try:
        with pytest.raises(expected, match=message) as caught:
            run()
    finally:
        for query in started:
            query.stop()
    seen = [text for query in started
            for text in (str(query), json.dumps(query.recentProgress, default=str))]
    out, err = capfd.readouterr()
    seen += [str(caught.value), repr(caught.value), out, err, caplog.text]
    assert_no_secret(*seen)


@pytest.mark.parametrize("form", DSN_FORMS)
def test_a_working_pipeline_never_shows_its_passwords(
    spark: SparkSession, secured_pg: LocalPostgres, secured_broker: LocalIggy, name: str,
    tmp_path: Path, form: str, capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    work, source = prepare_capture(app_dsn(secured_pg), name, seed=22)
    checkpoint = tmp_path / "checkpoint"
    query = start_pipeline(spark, dsn=app_dsn(secured_pg, form=form), slot=name,
                           url=iggy_url(secured_broker), checkpoint=str(checkpoint),
                           source=source)
    work.run(changes=300)
    query.processAllAvailable()
    query.explain(extended=True)
    seen = [str(query), query.name or "", json.dumps(query.lastProgress, default=str),
            json.dumps(query.recentProgress, default=str), str(query.status),
            str(destinations(query, spark, url=iggy_url(secured_broker)).collect())]
    query.stop()
    seen += [path.read_text(errors="replace") for path in checkpoint.rglob("*") if path.is_file()]
    out, err = capfd.readouterr()
    assert "pg_cdc" in out  # the explain output was captured
    assert_no_secret(*seen, out, err, caplog.text)
    assert verify(iggy_url(secured_broker), [name], work).ok  # it did work, as app, with both


@pytest.mark.e2e  # the job starts its own Spark
def test_the_job_prints_no_password_when_it_fails(
    secured_pg: LocalPostgres, secured_broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    """The job's whole output (Python driver, JVM, workers) after a failed login, with both
    secrets in the environment (``PG_CDC_DSN``, as a URI, and ``IGGY_URL``), where the docs
    advise them."""
    prepare_capture(app_dsn(secured_pg), name, seed=23)
    job = subprocess.run(
        [sys.executable, "-m", "pg_to_iggy", "--master", "local[1]", "--slot", name,
         "--checkpoint", str(tmp_path / "checkpoint"), "--available-now"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PG_CDC_DSN": app_dsn(secured_pg, WRONG, form="uri"),
             "IGGY_URL": iggy_url(secured_broker),
             "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false pyspark-shell"},
    )
    assert job.returncode != 0
    assert "password authentication failed" in job.stdout + job.stderr
    assert_no_secret(job.stdout, job.stderr)
