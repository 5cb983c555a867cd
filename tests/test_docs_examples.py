"""Every code example in README.md and docs/*.md runs, against the session's real services.

Each fenced block is one of:

- ``python``: run. A page's Python blocks share one namespace, in page order (a later block may
  use what an earlier one defined, as a reader following the page would), with ``spark`` the
  session's SparkSession, as in the pyspark shell or a notebook. Every streaming query a block
  starts is run to the end of the data available (``processAllAvailable``), fed the page's
  changes when it reads Postgres, must have read rows and not failed, and is then stopped.
- a shell block (``bash``): run with bash when it invokes the project's own commands
  (:data:`RUN_COMMANDS`), with ``PG_CDC_DSN`` and ``IGGY_URL`` set to the test servers; exempt
  when every command in it is one of :data:`EXEMPT_COMMANDS` (installation and the repository's
  own runner). A block with any other command fails until someone decides which it is.
- :data:`NOT_RUN` languages (SQL, program output, configuration files): not run.

A page in :data:`RUN_ELSEWHERE` has its Python blocks run by the test named there instead, with
the same placeholders (:func:`rewrite`), because they need what this session cannot give them.

An example is written for the user's servers; these placeholders are rewritten before it runs
(:data:`PLACEHOLDERS`):

| in the example | runs as |
| --- | --- |
| a conninfo starting ``host=db.internal`` | the DSN of a database made for the page |
| an ``iggy://...`` URL (TLS parameters too) | the session broker's URL (TLS has its tests) |
| ``/checkpoints/...``, ``/tables/...`` | the same path under the page's temporary folder |
| ``spark://master:7077`` | ``local[2]`` |
| ``.awaitTermination()`` | ``.processAllAvailable()`` |
| a ``pg-to-iggy`` or ``spark-submit`` job | the same with ``--available-now`` (else it runs on) |

What an example needs before it runs (tables, a slot, messages in a topic, a stuck batch) is
the page's :data:`GIVEN`. If an example cannot run as written, fix the example (it must stay
what a user would write), not this file. Each example's test id is ``page.md:line`` (the line
of its opening fence).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from iggy_spark_testing.harness import DSN_ENV, default_version

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

RUN_COMMANDS = ("pg-to-iggy", "pg-cdc-backfill", "spark-submit",
                "python -m postgres_cdc_source.abandon")
"""Shell commands of the project's own that an example may run (how a command line starts)."""
EXEMPT_COMMANDS = {
    "pip install": "installation only",
    "./run": "the repository's own runner: it installs what is missing, then runs the demo, "
             "the suite, the benchmarks or the broker",
    "spark-pipelines": "the Spark Declarative Pipelines example: tests/test_sdp.py runs the same "
                       "command in a copy of examples/sdp_pg_to_iggy",
    "cd": "moves into the repository's folder an exempt command runs in",
}
"""Shell commands an example shows but this file does not run, and why."""
NOT_RUN = {
    "sql": "SQL typed into psql against the user's own tables",
    "text": "program output and diagrams",
    "properties": "configuration files (spark-defaults.conf)",
}
"""Block languages that are not code to run, and why."""
RUN_ELSEWHERE = {
    "pg_cdc_lakehouse.md": (
        "test_delta_merge.py",
        "its example needs Delta Lake's jars, built for Spark 4.2 and not for this session's "
        "Spark: that test runs it on pyspark 4.2.1, its driver killed mid-batch"),
}
"""Pages whose Python blocks another test file runs, and why not this one."""
SHELL = ("bash", "sh", "shell")
JOB_COMMANDS = ("pg-to-iggy", "spark-submit")
"""Commands that run the pipeline job, which runs until stopped: run with ``--available-now``."""

_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    start: int | None = None
    lang = ""
    for number, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if start is None and match:
            start, lang = number, match.group(1)
        elif start is not None and line.strip() == "```":
            blocks.append(Block(page, start, lang, "\n".join(lines[start:number - 1]) + "\n"))
            start = None
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]


# -- what a block is ---------------------------------------------------------------------------

def _commands(script: str) -> list[str]:
    """The script's command lines: continuation lines joined, comments and blank lines gone."""
    joined = re.sub(r"\s*\\\n\s*", " ", script)
    return [line for line in (re.sub(r"\s+#[^'\"]*$", "", raw).strip()
                              for raw in joined.splitlines())
            if line and not line.startswith("#")]


_ASSIGNMENT = re.compile(r"""^[A-Za-z_]\w*=("[^"]*"|'[^']*'|\$\(|\S*)\s*""")


def _program(command: str) -> str | None:
    """What ``command`` runs, from its first word (``pip install ...``, ``pg-to-iggy ...``);
    ``None`` for an environment line (``export X=...``, ``X=...``). ``X=$(cmd ...)`` runs
    ``cmd``."""
    rest = command.strip()
    if rest.startswith("export "):
        rest = rest[len("export "):].lstrip()
    while match := _ASSIGNMENT.match(rest):
        rest = rest[match.end():]
        if match.group(1) == "$(":
            break
    return rest or None


def _kind(command: str) -> str:
    """``run``, ``env``, an exempt command's key, or ``undecided``."""
    program = _program(command)
    if program is None:
        return "env"
    if any(program == c or program.startswith(c + " ") for c in RUN_COMMANDS):
        return "run"
    for exempt in EXEMPT_COMMANDS:
        if program == exempt or program.startswith(exempt + " "):
            return exempt
    return "undecided"


def _verdict(block: Block) -> str:
    """``run``, ``exempt`` or ``not run`` for ``block``; raises :class:`AssertionError` for a
    block nobody decided about."""
    if block.lang == "python":
        return "exempt" if block.page.name in RUN_ELSEWHERE else "run"
    if block.lang in NOT_RUN:
        return "not run"
    assert block.lang in SHELL, (
        f"{block.id}: a ```{block.lang} block: run it here (python, bash), or add its language "
        "to NOT_RUN with the reason")
    kinds = {command: _kind(command) for command in _commands(block.code)}
    undecided = [c for c, k in kinds.items() if k == "undecided"]
    assert not undecided, (f"{block.id}: decide whether to run or exempt {undecided} "
                           "(RUN_COMMANDS or EXEMPT_COMMANDS)")
    if "run" in kinds.values():
        exempt = [c for c, k in kinds.items() if k not in ("run", "env")]
        assert not exempt, f"{block.id}: a run block also holds exempt commands {exempt}"
        return "run"
    assert set(kinds.values()) - {"env"}, f"{block.id}: the block runs nothing"
    return "exempt"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_example_is_run_or_exempt_by_a_decision(block: Block) -> None:
    assert _verdict(block) in ("run", "exempt", "not run")


@pytest.mark.parametrize("page", sorted(RUN_ELSEWHERE))
def test_a_page_run_elsewhere_is_run_there(page: str) -> None:
    test_file, _ = RUN_ELSEWHERE[page]
    assert page in (Path(__file__).parent / test_file).read_text()
    assert any(b.lang == "python" for b in BLOCKS if b.page.name == page)


def test_a_new_kind_of_command_is_undecided() -> None:
    block = Block(Path("page.md"), 3, "bash", "export A=1\npg-to-iggy --slot s \\\n  --x y\n"
                  "curl https://example.org   # fetch\n")
    with pytest.raises(AssertionError, match="decide whether to run or exempt"):
        _verdict(block)
    assert [_kind(c) for c in _commands(block.code)] == ["env", "run", "undecided"]
    assert _kind("id=$(pg-cdc-backfill --slot s t)") == "run"
    assert _kind("pip install 'iggy-spark[all]'") == "pip install"


# -- placeholders ------------------------------------------------------------------------------

@dataclass
class Page:
    """A page's run: its database, its temporary folder, its Python namespace."""

    block_ids: list[str]
    spark: Any
    dsn: str
    broker_url: str
    broker_address: str
    tmp: Path
    namespace: dict[str, Any] = field(default_factory=dict)
    results: dict[str, BaseException | None] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def local(self, path: str) -> str:
        """``/checkpoints/x`` of an example, under the page's folder."""
        return str(self.tmp) + path

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


_AWAIT = re.compile(r"\.awaitTermination\(\)")
PLACEHOLDERS: list[tuple[re.Pattern[str], Callable[[Page, re.Match[str]], str]]] = [
    (re.compile(r"host=db\.internal[^\"']*"), lambda page, _: page.dsn),
    (re.compile(r"iggy://[^\s\"']+"), lambda page, _: page.broker_url),
    (re.compile(r"(?<![\w.:/])/(?:checkpoints|tables)/[\w.-]+"),
     lambda page, m: page.local(m.group(0))),
    (re.compile(r"spark://master:7077"), lambda page, _: "local[2]"),
    (_AWAIT, lambda page, _: ".processAllAvailable()"),
]


def rewrite(code: str, page: Page, *, run_on: bool = False) -> str:
    """``code`` with the placeholders replaced; ``run_on`` keeps ``.awaitTermination()`` (a
    job that runs until a test kills it)."""
    for pattern, replace in PLACEHOLDERS:
        if run_on and pattern is _AWAIT:
            continue
        code = pattern.sub(lambda m, r=replace: r(page, m), code)  # type: ignore[misc]
    return code


def _shell_script(code: str) -> str:
    """The block's commands, each job command with ``--available-now``."""
    commands = []
    for command in _commands(code):
        program = _program(command) or ""
        if any(program.startswith(job) for job in JOB_COMMANDS):
            command += " --available-now"
        commands.append(command)
    return "\n".join(commands) + "\n"


def test_placeholders_become_the_test_servers(tmp_path: Path) -> None:
    page = Page([], None, "host=127.0.0.1 port=1 dbname=d", "iggy://u:p@127.0.0.1:2",
                "127.0.0.1:2", tmp_path)
    code = ('x.option("dsn", "host=db.internal dbname=shop user=cdc password=...")\n'
            '.option("url", "iggy://w:s@iggy.internal:8090?tls=true&tls_ca_file=/etc/ca.pem")\n'
            '.option("checkpointLocation", "/checkpoints/a").start("/tables/b")\n'
            "s3a://bucket/checkpoints/c --master spark://master:7077\nq.awaitTermination()\n")
    assert rewrite(code, page) == (
        'x.option("dsn", "host=127.0.0.1 port=1 dbname=d")\n'
        '.option("url", "iggy://u:p@127.0.0.1:2")\n'
        f'.option("checkpointLocation", "{tmp_path}/checkpoints/a").start("{tmp_path}/tables/b")\n'
        "s3a://bucket/checkpoints/c --master local[2]\nq.processAllAvailable()\n")
    assert rewrite("q.awaitTermination()  # /tables/b\n", page, run_on=True) == (
        f"q.awaitTermination()  # {tmp_path}/tables/b\n")
    assert _shell_script("pg-to-iggy --slot s \\\n    --source a=b   # run it\n") == (
        "pg-to-iggy --slot s --source a=b --available-now\n")


# -- what each page needs before its examples run ----------------------------------------------

SHOP_TABLES = (
    "CREATE TABLE orders (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
    "status text NOT NULL, region text)",
    "CREATE TABLE order_items (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
    "order_id bigint NOT NULL, sku text NOT NULL)",
)
SHOP_CHANGES = (
    "INSERT INTO orders (status, region) SELECT 'paid', 'eu' FROM generate_series(1, 20)",
    "INSERT INTO order_items (order_id, sku) SELECT g, 'sku-' || g FROM generate_series(1, 20) g",
    "UPDATE orders SET status = 'shipped' WHERE id % 3 = 0",
)


def _shop(page: Page) -> None:
    page.execute(*SHOP_TABLES)


def _stuck_batch(page: Page) -> None:
    """A stopped query whose last planned batch never committed: the sink failed it."""
    _shop(page)

    def sink_down(df: Any, batch_id: int) -> None:
        if not df.isEmpty():
            raise RuntimeError("Iggy is unreachable")

    query = (
        page.spark.readStream.format("pg_cdc")
        .options(dsn=page.dsn, slot="shop_orders", include_tables=r"public\.(orders|order_items)")
        .load().writeStream.foreachBatch(sink_down)
        .option("checkpointLocation", page.local("/checkpoints/shop_orders")).start()
    )
    query.processAllAvailable()  # the slot exists from here on
    page.execute(*SHOP_CHANGES)
    with contextlib.suppress(Exception):
        query.processAllAvailable()
    query.stop()
    assert query.exception() is not None


def _events_table(page: Page) -> None:
    """The Spark table ``events`` that iggy_routed's example streams."""
    page.spark.sql(
        "CREATE TABLE events (event_id BIGINT, event_type STRING, customer_id BIGINT, "
        f"amount DOUBLE) USING parquet LOCATION '{page.local('/tables/events')}'")
    page.cleanups.append(lambda: page.spark.sql("DROP TABLE IF EXISTS events"))
    page.spark.sql("INSERT INTO events VALUES (1, 'created', 7, 10.0), (2, 'paid', 7, 10.0), "
                   "(3, 'created', 8, 5.5)")


def _orders_topic(page: Page) -> None:
    """``shop/orders_eu`` with 2,000 messages in partition 0, which the iggy examples read."""
    from support.iggy_source_support import seed

    seed(page.broker_address, "shop", ["orders_eu"], partitions=1, per_partition=2000)


def _backfill_slot(page: Page) -> None:
    """The table and the slot of the running query the backfill page asks."""
    page.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, region text)",
        "INSERT INTO orders SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END "
        "FROM generate_series(1, 100) g",
        "SELECT pg_create_logical_replication_slot('orders', 'pgoutput')",
    )


def _payments_table(page: Page) -> None:
    page.execute("CREATE TABLE payments (id bigint PRIMARY KEY, amount numeric(10,2) NOT NULL, "
                 "paid_at timestamptz NOT NULL DEFAULT now(), note text)")


PAYMENTS_CHANGES = (
    "INSERT INTO payments (id, amount) SELECT g, g * 10.5 FROM generate_series(1, 20) g",
    "UPDATE payments SET amount = amount + 100, note = 'late fee' WHERE id % 4 = 0",
    "DELETE FROM payments WHERE id = 2",
)


def _outbox_table(page: Page) -> None:
    page.execute("CREATE TABLE outbox (id bigserial PRIMARY KEY, "
                 "created_at timestamptz NOT NULL DEFAULT now(), event_type text NOT NULL, "
                 "payload jsonb)")


GIVEN: dict[str, tuple[Callable[[Page], None], tuple[str, ...]]] = {
    "README.md": (_shop, SHOP_CHANGES),
    "pg_cdc.md": (_shop, SHOP_CHANGES),
    "pg_cdc_parallel.md": (_shop, SHOP_CHANGES),
    "pg_cdc_backfill.md": (_backfill_slot, ()),
    "pg_cdc_polling.md": (_outbox_table, ()),
    "pg_cdc_streaming.md": (_payments_table, PAYMENTS_CHANGES),
    "pipeline.md": (_shop, SHOP_CHANGES),
    "operations.md": (_stuck_batch, ()),
    "iggy_routed.md": (_events_table, ()),
    "iggy_source.md": (_orders_topic, ()),
}
"""Per page: what is set up before its first example, and the changes written to Postgres while
each streaming query an example starts runs (so it has rows to read)."""


# -- running -----------------------------------------------------------------------------------

def _runnable() -> list[Block]:
    found = []
    for block in BLOCKS:
        with contextlib.suppress(AssertionError):
            if _verdict(block) == "run":
                found.append(block)
    return found


RUNNABLE = _runnable()


def _run_python(page: Page, block: Block, changes: tuple[str, ...]) -> None:
    spark = page.spark
    before = {query.id for query in spark.streams.active}
    exec(compile(rewrite(block.code, page), block.id, "exec"), page.namespace)
    started = [query for query in spark.streams.active if query.id not in before]
    try:
        for query in started:
            query.processAllAvailable()  # planned its first batch: a new slot exists now
        if started and changes:
            page.execute(*changes)
            for query in started:
                query.processAllAvailable()
        for query in started:
            assert query.exception() is None, query.exception()
            rows = sum(progress["numInputRows"] for progress in query.recentProgress)
            assert rows > 0, f"{block.id}: the query {query.name or query.id} read no rows"
    finally:
        for query in started:
            query.stop()


def _run_shell(page: Page, block: Block) -> None:
    env = {**os.environ, "PG_CDC_DSN": page.dsn, "IGGY_URL": page.broker_url,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    script = _shell_script(rewrite(block.code, page))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=page.tmp, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"{block.id} exited with {done.returncode}:\n{script}\n"
        f"{(done.stdout + done.stderr)[-4000:]}")


def _run(page: Page, block: Block) -> None:
    _, changes = GIVEN.get(block.page.name, (None, ()))
    if block.lang == "python":
        _run_python(page, block, changes)
    else:
        _run_shell(page, block)


class Pages:
    """The pages' runs: a page's examples run in page order, each once, whichever test asks
    first (so ``-k page.md:40`` runs the blocks above it too); a page is torn down once its
    last example ran."""

    def __init__(self, spark: Any, pg: Any, broker: Any, tmp: pytest.TempPathFactory) -> None:
        self._spark, self._pg, self._broker, self._tmp = spark, pg, broker, tmp
        self._pages: dict[Path, Page] = {}

    def result(self, block: Block) -> BaseException | None:
        page = self._open(block.page)
        for earlier in RUNNABLE:
            if block.id in page.results:
                break
            if earlier.page != block.page or earlier.id in page.results:
                continue
            try:
                _run(page, earlier)
                page.results[earlier.id] = None
            except Exception as exc:  # reported by the example's own test
                page.results[earlier.id] = exc
        if set(page.block_ids) <= set(page.results):
            self._close(block.page)
        return page.results[block.id]

    def _database(self, page: Path) -> str:
        return "docs_" + re.sub(r"\W", "_", page.stem.lower())

    def _open(self, path: Path) -> Page:
        if path in self._pages:
            return self._pages[path]
        database = self._database(path)
        with self._pg.connect() as conn:
            self._drop(conn, database)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        page = Page(
            [b.id for b in RUNNABLE if b.page == path], self._spark,
            make_conninfo(self._pg.dsn, dbname=database), self._broker.url,
            self._broker.address, self._tmp.mktemp(database))
        page.namespace.update(spark=self._spark, __name__="docs_example")
        self._pages[path] = page
        given, _ = GIVEN.get(path.name, (None, ()))
        if given is not None:
            given(page)
        return page

    def _close(self, path: Path) -> None:
        page = self._pages.pop(path, None)
        if page is None:
            return
        from pg_to_iggy import MetricsServer

        for value in page.namespace.values():
            if isinstance(value, MetricsServer):
                value.stop()
        for cleanup in page.cleanups:
            cleanup()
        with self._pg.connect() as conn:
            self._drop(conn, self._database(path))

    @staticmethod
    def _drop(conn: psycopg.Connection[Any], database: str) -> None:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s AND NOT active", (database,))
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                     .format(sql.Identifier(database)))

    def close(self) -> None:
        for path in list(self._pages):
            self._close(path)


@pytest.fixture(scope="module")
def pages(
    spark: Any, pg_servers: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pages]:
    pg = pg_servers.get(None if os.environ.get(DSN_ENV) else default_version())
    runs = Pages(spark, pg, broker, tmp_path_factory)
    try:
        yield runs
    finally:
        runs.close()


@pytest.mark.e2e
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_the_example_runs(pages: Pages, block: Block) -> None:
    error = pages.result(block)
    if error is not None:
        raise error
