"""A local S3-compatible server for tests: moto's, in a subprocess on a free loopback port, with a
bucket and the s3fs options that reach it (also as the AWS environment variables, for processes
and the command line that take no storage_options)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_s3(bucket: str = "zarchive-test") -> Iterator[dict[str, Any]]:
    """{"fs", "options", "endpoint", "bucket", "env"} for a running server (stopped on exit)."""
    import s3fs

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        options = {
            "key": "testing",
            "secret": "testing",
            "endpoint_url": endpoint,
            "client_kwargs": {"region_name": "eu-west-1"},
        }
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_DEFAULT_REGION": "eu-west-1",
        }
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir(bucket)
        yield {"fs": fs, "options": options, "endpoint": endpoint, "bucket": bucket, "env": env}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def fresh_url(server: dict[str, Any], name: str = "ck") -> str:
    """A URL no other test uses, under the server's bucket: s3://BUCKET/<8 hex>/<name>."""
    return f"s3://{server['bucket']}/{uuid.uuid4().hex[:8]}/{name}"
