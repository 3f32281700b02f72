"""A real S3-compatible server for the tests: moto in server mode on 127.0.0.1, a free port.

Unlike ``tests/memfs.py`` (an in-memory Beam filesystem), every byte here crosses HTTP through
the real clients: Beam's ``S3FileSystem`` (boto3, multipart uploads, copy + delete renames,
paginated prefix listings) and, for the trainer, fsspec's ``s3fs`` when installed. The server
runs in a thread of the test process, so a job started as a subprocess reaches it too.

How clients find it is how users point c4forge at MinIO, Ceph or any S3-compatible store:
the standard AWS environment (``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``), which boto3 reads itself, or Beam's own
pass-through options (``S3Server.beam_args``), see the README.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

BUCKET = "c4forge-test"  # S3 bucket names: 3-63 lowercase letters, digits, dots, hyphens
KEY_ID = "testing"  # moto accepts any credentials; real values are never needed
SECRET = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """A running moto server; ``env`` is the AWS environment that points clients at it."""

    endpoint: str
    env: dict[str, str]
    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=KEY_ID,
                aws_secret_access_key=SECRET,
                region_name=REGION,
            )
        return self._client

    @property
    def beam_args(self) -> list[str]:
        """The same endpoint as Beam pipeline options (the alternative to the environment)."""
        return [
            f"--s3_endpoint_url={self.endpoint}",
            f"--s3_access_key_id={KEY_ID}",
            f"--s3_secret_access_key={SECRET}",
            f"--s3_region_name={REGION}",
        ]

    def make_bucket(self, name: str = BUCKET) -> str:
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
            self.client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def put(self, url: str, data: bytes) -> None:
        bucket, key = split_url(url)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def put_file(self, url: str, path: str) -> None:
        with open(path, "rb") as f:
            self.put(url, f.read())

    def keys(self, url: str) -> list[str]:
        """Every key under the prefix ``url/`` (relative to it), paginated like real S3."""
        bucket, prefix = split_url(url.rstrip("/") + "/")
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"][len(prefix) :] for p in pages for o in p.get("Contents", []))

    def objects(self, url: str) -> dict[str, bytes]:
        """Every object under ``url/`` with its bytes, keyed by the name relative to it."""
        bucket, prefix = split_url(url.rstrip("/") + "/")
        return {
            k: self.client.get_object(Bucket=bucket, Key=prefix + k)["Body"].read()
            for k in self.keys(url)
        }

    def download(self, url: str, directory: str) -> str:
        """Copy every object under ``url/`` into ``directory`` (for local readers)."""
        for name, data in self.objects(url).items():
            path = os.path.join(directory, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        return directory


def split_url(url: str) -> tuple[str, str]:
    assert url.startswith("s3://"), url
    bucket, _, key = url[len("s3://") :].partition("/")
    return bucket, key


@contextlib.contextmanager
def running_server() -> Iterator[S3Server]:
    """Start moto's threaded server; stop it (and restore the environment) on the way out."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": REGION,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield S3Server(endpoint, env)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
