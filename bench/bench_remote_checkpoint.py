"""The remote-checkpoint scenario with several kills: the heavy variant of
tests/test_remote_checkpoint.py.

    python -m bench.bench_remote_checkpoint [--kills 3] [--changes 1500] [--seed 41]

``pg-to-iggy`` on a standalone cluster of two workers that share no disk with the driver (own
mount namespace, tmpfs ``/tmp``, own loopback address), its checkpoint on ``s3a://`` on a real
S3 server (SeaweedFS), a throwaway Postgres and the local broker. ``--changes`` are committed
before each run; each run's driver is killed with ``kill -9`` while a batch is being sent
(tests/support/s3_cluster.py says how), then the job is restarted and drained. The consistency
oracle reads Iggy back: missing, duplicates, order. Writes ``bench/results/remote_checkpoint.json``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import uuid
from pathlib import Path

from bench.common import log, write_result
from iggy_local import LocalIggy
from iggy_spark_testing.harness import postgres
from iggy_spark_testing.oracle import verify
from iggy_spark_testing.s3 import SeaweedS3

_TESTS = Path(__file__).resolve().parent.parent / "tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--changes", type=int, default=1_500)
    parser.add_argument("--seed", type=int, default=41)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(_TESTS))
    from support.s3_cluster import killed_mid_send

    name = "b" + uuid.uuid4().hex[:12]
    with (postgres() as pg, LocalIggy() as broker, SeaweedS3() as s3,
          tempfile.TemporaryDirectory(prefix="bench-s3-", dir="/tmp") as tmp):
        log(f"{args.kills} kills, {args.changes} changes before each run")
        run = killed_mid_send(pg.dsn, broker, s3, name, Path(tmp), kills=args.kills,
                              changes=args.changes, seed=args.seed)
        report = verify(broker.url, [name], run.work)
        skipped = sum(int(n) for n in re.findall(
            r"found landed by a replay (\d+)", run.log.read_text(errors="replace")))
    result = {
        "scenario": "pg-to-iggy on a 2-worker standalone cluster, workers in their own mount "
                    "namespaces (tmpfs /tmp) with their own loopback addresses; checkpoint on "
                    "s3a:// (SeaweedFS); kill -9 of the driver mid-send, restart, drain",
        "kills": run.kills,
        "changes": report.changes,
        "messages": report.messages,
        "delivered": report.delivered,
        "missing": report.missing,
        "duplicates": report.duplicates,
        "order_violations": report.order_violations,
        "oracle_ok": report.ok,
        "replay_skipped_logged": skipped,
        "seconds": round(run.seconds, 1),
    }
    path = write_result("remote_checkpoint", result)
    log(f"wrote {path}")
    print(f"remote_checkpoint: {report}")
    return 0 if report.ok and report.duplicates == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
