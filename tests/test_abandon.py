"""Abandoning a stuck batch end to end: real Postgres, real Spark, the broker over TCP.

A ``pg_cdc`` → ``iggy_routed`` run fails while Iggy is unreachable, leaving its batch planned
but uncommitted; the command skips it (logging the LSN range and the change count), and the
restarted query delivers what came after, never the skipped changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from support.broker_fixtures import poll_all

from connector_common.lsn import parse_lsn
from iggy_local import LocalIggy
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.s3 import SeaweedS3
from postgres_cdc_source.abandon import DSN_ENV, RECORD_FILE, abandon_batch, main
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.offset import StreamOffset
from postgres_cdc_source.stream.reader import PgCdcStreamReader

pytestmark = pytest.mark.e2e


def _run(spark: SparkSession, source: dict[str, str], url: str, checkpoint: Path
         ) -> Exception | None:
    query = (
        spark.readStream.format("pg_cdc").options(**source).load()
        .writeStream.format("iggy_routed").option("url", url)
        .option("send_timeout", "1s").option("json_columns", "key,before,after")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    try:
        query.awaitTermination()
    except Exception as exc:  # the failed run is the point
        return exc
    return None


def test_a_stuck_batch_is_skipped_logged_and_the_query_restarts_past_it(
    spark: SparkSession, pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = {"dsn": pg.dsn, "slot": name, "include_tables": rf"public\.{name}",
              "topic_from": "table", "default_stream": name}
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    PgCdcStreamReader(CdcOptions.from_options(source)).initialOffset()  # the slot, before rows
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT g FROM generate_series(1, 5) g")
        conn.execute(f"INSERT INTO {name} SELECT g FROM generate_series(6, 7) g")
    checkpoint = tmp_path / "checkpoint"
    unreachable = broker.url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
    failure = _run(spark, source, unreachable, checkpoint)
    assert failure is not None and "unreachable for 1s" in str(failure)
    assert not (checkpoint / "commits" / "0").exists()  # planned, stuck

    assert main(["--checkpoint", str(tmp_path / "nowhere")]) == 1  # nothing to abandon
    assert main(["--checkpoint", str(checkpoint), "--dsn", pg.dsn, "--slot", name,
                 "--source", rf"include_tables=public\.{name}",
                 "--source", "topic_from=table", "--source", f"default_stream={name}"]) == 0
    out = capsys.readouterr().out
    assert "abandoned pg_cdc batch 0: LSN (slot start, " in out and "], 7 changes" in out
    [record] = [json.loads(line) for line in (checkpoint / RECORD_FILE).read_text().splitlines()]
    assert (record["batch_id"], record["changes"]) == (0, 7)
    with pg.connect() as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (name,)).fetchone()
    assert row is not None and parse_lsn(row[0]) == parse_lsn(record["end"])  # WAL released
    with pytest.raises(ValueError, match="is committed: no batch is stuck"):
        abandon_batch(checkpoint)

    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} VALUES (8), (9)")
    assert _run(spark, source, broker.url, checkpoint) is None
    delivered = [json.loads(m.payload)["after"]["id"] for m in poll_all(broker.address, name, name)]
    assert delivered == [8, 9]  # the skipped 1-7 never arrive; everything after does


def test_the_dsn_comes_from_the_environment_so_no_password_shows_in_the_process_list(
    pg: LocalPostgres, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``$PG_CDC_DSN`` stands for ``--dsn`` (argv shows in ``ps``): with ``--slot`` alone the
    skipped changes are counted and the slot advanced, as with ``--dsn``."""
    source = {"dsn": pg.dsn, "slot": name, "include_tables": rf"public\.{name}"}
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    PgCdcStreamReader(CdcOptions.from_options(source)).initialOffset()  # the slot, before rows
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT g FROM generate_series(1, 3) g")
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    end = json.dumps(StreamOffset(parse_lsn(row[0])).to_json())
    (checkpoint / "offsets" / "0").write_text(f"v1\n{{}}\n{end}")  # planned, never committed
    args = ["--checkpoint", str(checkpoint), "--slot", name,
            "--source", rf"include_tables=public\.{name}"]
    monkeypatch.delenv(DSN_ENV, raising=False)
    with pytest.raises(SystemExit):
        main(args)
    assert f"--slot needs --dsn or ${DSN_ENV}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--checkpoint", str(checkpoint), "--dsn", pg.dsn])
    assert "--dsn needs --slot" in capsys.readouterr().err
    monkeypatch.setenv(DSN_ENV, pg.dsn)
    assert main(args) == 0
    assert "LSN (slot start, " in capsys.readouterr().out
    [record] = [json.loads(line) for line in (checkpoint / RECORD_FILE).read_text().splitlines()]
    assert record["changes"] == 3
    with pg.connect() as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (name,)).fetchone()
    assert row is not None and parse_lsn(row[0]) == parse_lsn(record["end"])  # WAL released


def test_a_checkpoint_on_s3_is_abandoned_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint production keeps on S3: abandon reads ``offsets/`` and writes
    ``commits/N`` and its record there, with the store's identity taken from the environment."""
    with SeaweedS3() as s3:
        store = s3.filesystem()
        root = f"{s3.bucket}/stuck"
        for path, lsn in (("offsets/0", "0/16B3748"), ("offsets/1", "0/16B9000")):
            with store.open_output_stream(f"{root}/{path}") as f:  # type: ignore[attr-defined]
                f.write(f'v1\n{{"batchWatermarkMs":0}}\n{{"lsn": "{lsn}"}}'.encode())
        with store.open_output_stream(f"{root}/commits/0") as f:  # type: ignore[attr-defined]
            f.write(b'v1\n{"nextBatchWatermarkMs":0}')
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
        monkeypatch.setenv("AWS_REGION", "us-east-1")

        record = abandon_batch(s3.uri("stuck"))
        assert (record.batch_id, record.start, record.end) == (1, "0/16B3748", "0/16B9000")
        with store.open_input_stream(f"{root}/commits/1") as f:  # type: ignore[attr-defined]
            assert f.read().decode().splitlines()[0] == "v1"
        with store.open_input_stream(f"{root}/{RECORD_FILE}") as f:  # type: ignore[attr-defined]
            [line] = f.read().decode().splitlines()
        assert json.loads(line)["batch_id"] == 1
        with pytest.raises(ValueError, match="is committed: no batch is stuck"):
            abandon_batch(s3.uri("stuck"))
