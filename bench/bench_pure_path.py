"""The pure-Python path of this tree against the same path of an earlier revision, side by side.

    python -m bench.bench_pure_path [--before 0f7e650] [--changes 500000] [--rounds 5]

What it shows: a user without the compiled core (``iggy-spark-core``) reads as fast as before
it came (the target: ``now`` at least 0.95x ``before``). One throwaway Postgres, one workload
(:func:`bench.cdc.write_workload`, pgoutput), read by two contenders interleaved round by round
after a discarded warm-up round (:func:`bench.common.paired_rounds`), each the same read as
:func:`bench.bench_source.spark_read` (``pg_cdc`` into Spark's ``noop`` sink with
``trigger(availableNow=True)`` on a fresh copy of the template slot, timed from the first
micro-batch's start to the last one's end) in a long-lived Spark session of its own process
(:class:`bench.spark_peer.SparkPeer`, ``IGGY_SPARK_CORE=python``):

* ``before``: the package of revision ``--before`` (default ``0f7e650``, the last commit before
  the compiled core, pure Python only), checked out in a temporary ``git worktree`` whose
  ``src`` is first on the peer's ``PYTHONPATH`` (Spark passes it on to its Python workers and
  its driver-side source runner, as ``./run``'s version tiers rely on);
* ``now``: this tree's package (its ``src`` first on ``PYTHONPATH`` the same way), on the
  pure-Python path.

Checked, not assumed: before the rounds, each peer's own process and its Python workers report
where they import ``postgres_cdc_source`` from (the worktree's, or this tree's ``src``) and
their decoding path (:func:`probe`); after every run, the driver-side source runner's progress
says its path, and a revision before the compiled core is told by the ``compiled_core`` flag
its progress lacks (:func:`runner_path`); and this tree's ``src`` must be the same at the end
as at the start (its digest is in the results). Each run records the CPU seconds of the JVMs, the
Python workers, Postgres and the benchmark's processes (the idle peer spends next to nothing).

Writes ``bench/results/pure_path.json``: both contenders' summaries and ``ratio``, now/before,
the median of the per-round ratios. The peers are closed and the worktree removed on the way
out, errors included.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import bench_source, cdc, common, decoding_path
from bench.cpu import process, python_groups
from bench.spark_peer import PURE_PYTHON, SparkPeer

__all__ = ["BEFORE_CORE", "TARGET", "main", "probe", "runner_path", "spark_read", "worktree"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BEFORE = "0f7e650"
"""The last commit before the compiled core (745e00c brought it)."""
TARGET = 0.95
"""``now`` / ``before`` at or above this: no regression on the pure-Python path."""
BEFORE_CORE = "python (a revision before the compiled core)"
"""A source runner's path where its progress has no ``compiled_core`` flag: pure Python."""
PROBE = "bench.bench_pure_path:probe"
""":func:`probe`, as a :class:`SparkPeer` names it."""
TIMED = ("pg_cdc -> noop: first micro-batch start to last micro-batch end (Spark progress); "
         "JVM and query start-up excluded; pure-Python path, in a session of its own process")


# -- the peers' side -------------------------------------------------------------------------------


def probe(spark: Any) -> dict[str, str]:
    """A peer's hello (:class:`SparkPeer`'s ``probe``): the decoding path and the directory of
    the ``postgres_cdc_source`` package of the peer's process and of its Python workers (one
    task per core of ``local[2]``). Imports nothing a revision before the compiled core lacks."""

    def where(_: Iterable[Any]) -> Iterator[str]:  # pickled by value: nothing of bench needed
        import importlib.util
        import json
        import os

        import postgres_cdc_source

        if importlib.util.find_spec("postgres_cdc_source.decoding.compiled") is None:
            path = "python"  # a revision before the compiled core: pure Python only
        else:
            from postgres_cdc_source.decoding import compiled

            path = compiled.path()
        yield json.dumps([path, os.path.realpath(os.path.dirname(postgres_cdc_source.__file__))])

    cores = spark.sparkContext.defaultParallelism
    found = set(spark.sparkContext.parallelize(range(cores), cores).mapPartitions(where).collect())
    if len(found) != 1:
        raise AssertionError(f"the Python workers import different pg_cdc: {sorted(found)}")
    workers_path, workers_package = json.loads(found.pop())
    path, package = json.loads(next(where(())))
    return {"process": path, "python_workers": workers_path,
            "process_package": package, "python_workers_package": workers_package}


def runner_path(query: Any) -> str | None:
    """The decoding path of a finished ``pg_cdc`` query's driver-side source runner, from the
    last progress report carrying pg_cdc's health (read as JSON, with no module of the peer's
    revision): ``compiled`` or ``python`` by its ``compiled_core`` flag, :data:`BEFORE_CORE`
    where it has none; ``None`` if no report carries the health."""
    for progress in reversed(query.recentProgress):
        for source in progress["sources"]:
            latest = source.get("latestOffset")
            try:
                data = json.loads(latest) if isinstance(latest, str) else latest
            except ValueError:
                continue
            if isinstance(data, dict) and "commit_failures" in data:
                if "compiled_core" not in data:
                    return BEFORE_CORE
                return decoding_path.COMPILED if data["compiled_core"] else decoding_path.PYTHON
    return None


def spark_read(spark: Any, options: dict[str, str]) -> common.Measure:
    """:func:`bench.bench_source.noop_read`'s run, the runner's path by :func:`runner_path`
    (in ``extra["runner_path"]``). Run in a peer, of either revision."""
    measure, query = bench_source.noop_read(spark, options, TIMED)
    measure.extra["runner_path"] = runner_path(query)
    return measure


# -- the benchmark's side --------------------------------------------------------------------------


def _git(*args: str) -> str:
    done = subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True)
class Tree:
    """Where a contender's package comes from: ``root`` (its ``src`` goes on PYTHONPATH)."""

    root: Path
    revision: str
    commit: str

    @property
    def package(self) -> str:
        return os.path.realpath(self.root / "src" / "postgres_cdc_source")

    @property
    def has_core(self) -> bool:
        """Whether this revision has the compiled core's module (a runner then says its path)."""
        return (self.root / "src" / "postgres_cdc_source" / "decoding" / "compiled.py").exists()

    def digest(self) -> str:
        """SHA-256 of the Python files under ``src``: tells a tree edited during the run."""
        digest = hashlib.sha256()
        for path in sorted((self.root / "src").rglob("*.py")):
            digest.update(str(path.relative_to(self.root)).encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()

    def environment(self) -> dict[str, str]:
        """The peer's: the pure-Python path, this tree's ``src`` first on ``PYTHONPATH``."""
        inherited = os.environ.get("PYTHONPATH")
        return {**PURE_PYTHON,
                "PYTHONPATH": os.pathsep.join([str(self.root / "src"), *filter(None, [inherited])])}


@contextmanager
def worktree(revision: str) -> Iterator[Tree]:
    """A detached ``git worktree`` of ``revision`` in a temporary directory, removed on exit
    (errors included)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}")
    scratch = Path(tempfile.mkdtemp(prefix="bench-pure-path-tree-"))
    root = scratch / "tree"
    common.log(f"worktree of {revision} ({commit[:12]}) in {root}")
    try:
        _git("worktree", "add", "--detach", str(root), commit)
        yield Tree(root, revision, commit)
    finally:
        try:
            _git("worktree", "remove", "--force", str(root))
        except RuntimeError as exc:
            common.log(f"{exc}; removing the directory and pruning")
            shutil.rmtree(root, ignore_errors=True)
            _git("worktree", "prune")
        shutil.rmtree(scratch, ignore_errors=True)
        common.log(f"worktree {root} removed")


def check_peer(name: str, peer: SparkPeer, tree: Tree) -> dict[str, str]:
    """Fail unless ``peer``'s process and workers import ``tree``'s package, on the Python path."""
    found = peer.paths
    decoding_path.expect(name, decoding_path.PYTHON,
                         {k: found[k] for k in ("process", "python_workers")})
    wrong = {k: v for k, v in found.items() if k.endswith("_package") and v != tree.package}
    if wrong:
        raise AssertionError(f"{name} must import pg_cdc from {tree.package}, but " + ", ".join(
            f"{k.removesuffix('_package')} imports it from {v}" for k, v in wrong.items())
            + ": put that tree's src first on the peer's PYTHONPATH")
    return found


def cpu_groups(peers: Sequence[SparkPeer], pg: object) -> common.CpuMeter:
    """:func:`bench.cpu.spark_groups`' groups, for sessions all in peers, plus Postgres."""
    jvms = tuple(peer.jvm_pid for peer in peers)
    drivers = (os.getpid(), *(peer.pid for peer in peers))
    return common.CpuMeter(cdc.with_postgres({
        "jvm": lambda: [p for jvm in jvms for p in process(jvm)],
        **python_groups(jvms),
        "bench_process": lambda: [p for pid in drivers for p in process(pid)],
    }, pg))


def contender(name: str, peer: SparkPeer, tree: Tree, conn: Any,
              workload: cdc.CdcWorkload) -> common.Contender:
    """One peer's read of a fresh copy of the template slot; its count and runner checked."""
    runner = decoding_path.PYTHON if tree.has_core else BEFORE_CORE

    def run(number: int) -> common.Measure:
        template = workload.template["pgoutput"]
        with cdc.slot_copy(conn, template, f"pure_{name}_{number + 1}") as slot:
            measure = peer.call("bench.bench_pure_path:spark_read",
                                options=workload.spark_options("pgoutput", slot))
        if measure.items != workload.changes:
            raise AssertionError(f"{name} read {measure.items}, not {workload.changes}")
        if measure.extra["runner_path"] != runner:
            raise AssertionError(f"{name}'s source runner is on {measure.extra['runner_path']}, "
                                 f"not {runner}: it does not run {tree.revision}'s code")
        return measure

    return run


def summary_line(revision: str, results: Mapping[str, Any], changes: int) -> str:
    now, before = results["now"]["per_second"], results["before"]["per_second"]
    return (f"pure path vs {revision} [{changes:,} changes, pgoutput -> noop]: now {now:,}/s, "
            f"before {before:,}/s = {results['ratio']['median']:.2f}x (target >= {TARGET}x)")


def main(argv: list[str] | None = None) -> int:
    from iggy_spark_testing.harness import postgres

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE,
                        help="the revision to compare with (default: the last before the core)")
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--txn-rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below

    load = os.getloadavg()[0]
    now_tree = Tree(ROOT, "working tree", _git("rev-parse", "HEAD"))
    src_modified = bool(_git("status", "--porcelain", "--", "src"))
    src_digest = now_tree.digest()
    with ExitStack() as stack:  # closed in reverse: Postgres, the peers, then the worktree
        before_tree = stack.enter_context(worktree(args.before))
        trees = {"before": before_tree, "now": now_tree}
        # both JVMs start while the workload is written; stopped on the way out, errors included
        peers = {name: stack.enter_context(SparkPeer(f"bench-pure-path-{name}",
                                                     tree.environment(), probe=PROBE))
                 for name, tree in trees.items()}
        pg = stack.enter_context(postgres())
        conn = stack.enter_context(pg.connect())
        with common.stopwatch() as elapsed:
            workload = cdc.write_workload(conn, pg.dsn, args.changes, args.txn_rows)
        common.log(f"workload: {workload.changes:,} changes, written in {elapsed():.1f}s")
        found = {name: check_peer(name, peers[name], tree) for name, tree in trees.items()}
        runs = common.paired_rounds(
            {name: contender(name, peers[name], tree, conn, workload)
             for name, tree in trees.items()},
            args.rounds, "pure path", warm_up=True, cpu=cpu_groups(list(peers.values()), pg))
    if now_tree.digest() != src_digest:  # the now peer's workers may have run either version
        raise RuntimeError(f"{ROOT / 'src'} changed during the run: its figures are of no one "
                           "version; run again on a tree left alone meanwhile")

    results = {name: common.summarize(runs[name]) for name in trees}
    results["ratio"] = common.ratio(runs["now"], runs["before"])
    ratio = results["ratio"]["median"]
    config = {
        "changes": workload.changes, "txn_rows": args.txn_rows, "rounds": args.rounds,
        "plugin": "pgoutput", "load_1m_at_start": round(load, 2),
        "before": {"revision": args.before, "commit": before_tree.commit},
        "now": {"commit": now_tree.commit, "src_modified": src_modified,
                "src_sha256": src_digest},
        # each peer's process and Python workers, checked before the rounds; each run's source
        # runner is checked too (in its runs_extra); the package directories are the trees' at
        # the time of the run (the worktree's is gone since)
        "decoding_paths": {name: {"path": decoding_path.PYTHON, **found[name],
                                  "environment": trees[name].environment()} for name in trees},
    }
    return common.publish("pure_path", {
        "benchmark": f"pg_cdc -> noop on the pure-Python path: this tree against {args.before}, "
                     "each in a Spark session of its own process",
        "config": config,
        "results": results,
        "target": TARGET,
        "met": ratio >= TARGET,
        "summary": summary_line(args.before, results, workload.changes),
    })


if __name__ == "__main__":
    sys.exit(main())
