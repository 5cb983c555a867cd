"""Jars from Maven Central for a test's Spark, resolved once by Spark's own Ivy and then cached.

Spark takes connector jars by Maven coordinates (``spark.jars.packages``) and resolves them with
Ivy, which checks each artifact's SHA-1, every time a session starts: a minute of network round
trips even when every artifact is already in the Ivy cache. :func:`maven_jars` runs that
resolution once per coordinate, in a throwaway session with ``spark.jars.ivy`` in the cache
directory, records the jars the session was given (the artifact and what its POM pulls in), and
from then on only lists them, for ``spark.jars`` or ``spark.driver.extraClassPath``. Every
coordinate shares one Ivy cache; each keeps its own list, so two coordinates never see each
other's jars. ``python -m iggy_spark_testing.jars GROUP:ARTIFACT:VERSION ...`` resolves ahead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["CACHE_ENV", "cache_dir", "maven_jars"]

CACHE_ENV = "IGGY_SPARK_CACHE"
"""Where downloaded jars are kept (default ``~/.cache/iggy-spark``), shared by checkouts."""

_MARK = "resolved jars: "


def cache_dir() -> Path:
    """``$IGGY_SPARK_CACHE``, else ``~/.cache/iggy-spark``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "iggy-spark")


def maven_jars(coordinates: str, cache: Path | None = None) -> list[Path]:
    """The jars of ``coordinates`` (``group:artifact:version``) and of what its POM pulls in,
    resolved on first use and then listed from the cache.

    The list is kept in ``ivy/resolved-<coordinates>`` beside the jars (``ivy/jars``); a list
    naming a jar that is gone is resolved again.
    """
    ivy = (cache or cache_dir()) / "ivy"
    listing = ivy / ("resolved-" + coordinates.replace(":", "_"))
    if listing.is_file():
        jars = [ivy / "jars" / name for name in listing.read_text().split()]
        if jars and all(jar.is_file() for jar in jars):
            return jars
    script = ("from pyspark.sql import SparkSession\n"
              "spark = (SparkSession.builder.master('local[1]')"
              f".config('spark.jars.packages', {coordinates!r})"
              f".config('spark.jars.ivy', {str(ivy)!r})"
              ".config('spark.ui.enabled', 'false').getOrCreate())\n"
              f"print({_MARK!r} + spark.sparkContext.getConf().get('spark.jars', ''))\n"
              "spark.stop()\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=900)
    found = [line[len(_MARK):] for line in run.stdout.splitlines() if line.startswith(_MARK)]
    if run.returncode != 0 or not found or not found[0]:
        raise RuntimeError(f"resolving {coordinates} failed: {run.stderr[-3000:]}")
    jars = [Path(unquote(urlparse(uri).path)) for uri in found[0].split(",")]
    listing.write_text("".join(jar.name + "\n" for jar in jars))
    return jars


if __name__ == "__main__":
    for coordinate in sys.argv[1:]:
        print("\n".join(str(jar) for jar in maven_jars(coordinate)))
