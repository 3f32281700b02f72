"""The jobs against a real S3-compatible server (moto in server mode, ``tests/moto_s3.py``).

``test_clean_remote.py`` and ``test_shards_remote.py`` prove the path logic on an in-memory Beam
filesystem; here every byte goes over HTTP through Beam's real ``S3FileSystem`` (boto3):
paginated prefix listings, multipart uploads, renames that are copy + delete, no directories.
References are the same jobs on local disk: the bucket must receive the same bytes.

Endpoint and credentials reach the clients the two documented ways: the standard AWS
environment (the fixture sets ``AWS_ENDPOINT_URL_S3`` …), and Beam's ``--s3_endpoint_url``
pass-through options (the killed run below gets only those, in its worker processes too).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR, REPO, c4_docs, doc_records, wet_bytes

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from moto_s3 import BUCKET, running_server  # noqa: E402 - after the skips

from c4forge.clean.input_digests import SEEN_NAME  # noqa: E402
from c4forge.cli import main  # noqa: E402
from c4forge.io import storage  # noqa: E402

GENUINE = sorted(os.path.join(GENUINE_WET_DIR, n) for n in os.listdir(GENUINE_WET_DIR))
REAL_INPUTS = [p for p in GENUINE if ".wet" in p] + [DERIVED_WET]
GENERATED = 5  # extra WET files of real C4 pages: more inputs, so a kill lands mid-run


@pytest.fixture(scope="module")
def s3():
    with running_server() as server:
        server.make_bucket()
        yield server


@pytest.fixture(scope="module")
def local_inputs(tmp_path_factory) -> list[str]:
    """Real WET files: genuine Common Crawl excerpts, the derived WET, and five files of real
    C4 pages wrapped as WET records (clean_fixtures)."""
    d = tmp_path_factory.mktemp("wet")
    paths = list(REAL_INPUTS)
    docs = c4_docs(0, GENERATED * 25)
    for i in range(GENERATED):
        path = d / f"part-{i}.warc.wet.gz"
        path.write_bytes(wet_bytes(doc_records(docs[i * 25 : (i + 1) * 25])))
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def s3_inputs(s3, local_inputs) -> str:
    """The inputs under ``s3://BUCKET/in/``, beside a console-style folder marker (``in/``, a
    zero-byte key) and a non-input object; returns the prefix as a user types it."""
    base = f"s3://{BUCKET}/in"
    s3.put(base + "/", b"")
    s3.put(base + "/README.txt", b"not an input")
    for p in local_inputs:
        s3.put_file(f"{base}/{os.path.basename(p)}", p)
    return base + "/"


@pytest.fixture(scope="module")
def local_run(local_inputs, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("local") / "out"
    assert main(["clean", *local_inputs, "-o", str(out), "--workers", "1", "--quiet"]) == 0
    return {n: (out / n).read_bytes() for n in os.listdir(out) if n != SEEN_NAME}


def results(objects: dict[str, bytes]) -> dict[str, bytes]:
    """A clean folder's objects without its record of where the inputs were read from (paths
    and versions differ between S3 and a local disk by nature)."""
    return {n: data for n, data in objects.items() if n != SEEN_NAME}


@pytest.fixture(scope="module")
def s3_clean(s3, s3_inputs, local_run) -> str:
    out = f"s3://{BUCKET}/clean"
    assert main(["clean", s3_inputs, "-o", out, "--workers", "1", "--quiet"]) == 0
    return out


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, **extra)


# --- the storage layer on real S3 -------------------------------------------------------------


def test_storage_on_real_s3(s3):
    base = f"s3://{BUCKET}/storage"
    big = os.urandom(5 * 2**20 + 7)  # two multipart parts (5 MiB is the least)
    storage.write_bytes(f"{base}/big.bin", big)
    storage.write_bytes(f"{base}/empty.bin", b"")  # Beam's S3 uploader cannot write 0 bytes
    storage.write_json(f"{base}/sub/x.json", {"b": 1, "a": 2})
    assert storage.read_bytes(f"{base}/big.bin") == big
    assert storage.size(f"{base}/big.bin") == len(big)
    assert storage.sha256(f"{base}/big.bin") == hashlib.sha256(big).hexdigest()
    assert storage.read_bytes(f"{base}/empty.bin") == b""
    assert storage.read_json(f"{base}/sub/x.json") == {"a": 2, "b": 1}
    s3.put(f"{base}/sub/", b"")  # a folder marker is not a file of the folder
    assert storage.listdir(base) == ["big.bin", "empty.bin"]  # direct children only
    assert storage.listdir(f"{base}/sub") == ["x.json"]
    assert not storage.exists(base) and storage.exists(f"{base}/big.bin")  # no directories
    with pytest.raises(RuntimeError), storage.atomic_writer(f"{base}/cut.bin") as f:
        f.write(b"partial")
        raise RuntimeError("interrupted")
    storage.remove(f"{base}/missing.bin")  # not an error
    assert s3.keys(base) == ["big.bin", "empty.bin", "sub/", "sub/x.json"]  # no temp objects
    storage.rmtree(f"{base}/sub")
    assert s3.keys(base) == ["big.bin", "empty.bin"]


# --- clean: WET from s3://, shards + stats.json to s3:// -----------------------------------------


def test_clean_from_and_to_s3_is_byte_identical_to_local(s3, s3_clean, local_run, capsys):
    objects = results(s3.objects(s3_clean))
    assert sorted(objects) == sorted(local_run)  # no manifest, temp object, _work or marker
    assert objects == local_run
    stats = json.loads(objects["stats.json"])
    assert stats["inputs"]["count"] == len(REAL_INPUTS) + GENERATED  # marker, README skipped
    assert stats["totals"]["documents_out"] > 100 and stats["conservation_errors"] == []

    capsys.readouterr()
    assert main(["clean", f"s3://{BUCKET}/in", "-o", s3_clean, "--workers", "1"]) == 0
    assert "already holds a complete run" in capsys.readouterr().out
    assert results(s3.objects(s3_clean)) == local_run

    # Replaced in place: the listing finds the old .json.gz shards, which must go.
    argv = ["clean", f"s3://{BUCKET}/in/*.gz", "-o", s3_clean, "--format", "parquet"]
    assert main([*argv, "--overwrite", "--workers", "1", "--quiet"]) == 0
    keys = s3.keys(s3_clean)
    assert keys and all(k.endswith(".parquet") for k in keys if k not in ("stats.json", SEEN_NAME))


def test_missing_s3_inputs_are_one_line_errors(s3, capsys):
    for spec, message in [
        (f"s3://{BUCKET}/in/absent.warc.wet.gz", "does not exist"),
        (f"s3://{BUCKET}/in/*.warc.wet.zst", "matches no file"),
        ("s3://c4forge-no-such-bucket/in/", "does not exist"),
    ]:
        assert main(["clean", spec, "-o", f"s3://{BUCKET}/never", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("c4forge clean: error: ") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert s3.keys(f"s3://{BUCKET}/never") == []


# --- clean --resume on s3:// after SIGKILL ---------------------------------------------------


@pytest.mark.slow
def test_killed_s3_run_resumes_to_the_same_output(s3, s3_inputs, local_run):
    """A real job (two SDK worker processes) is killed with SIGKILL once an input is recorded
    under ``s3://…/_work/``; the rerun skips the recorded inputs and writes the bytes of an
    uninterrupted run. The killed run reaches the server through Beam's --s3_* options alone
    (no AWS variables in its environment): the driver and both worker processes use them."""
    out = f"s3://{BUCKET}/resumed"
    cmd = [sys.executable, "-m", "c4forge", "clean", s3_inputs, "-o", out, "--resume"]
    cmd += ["--engine", "beam"]  # both runs: `auto` follows the Beam options the first one has
    bare = {k: v for k, v in _env().items() if not k.startswith("AWS_")}
    started = time.monotonic()
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", *s3.beam_args],
        env=bare,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def recorded() -> list[str]:
        return [
            k for k in s3.keys(out + "/_work") if k.startswith("chunk-") and k.endswith(".json")
        ]

    try:
        while not recorded() and proc.poll() is None and time.monotonic() - started < 240:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its SDK worker processes
        _, err = proc.communicate()
    done = recorded()
    assert done, f"no input was recorded before the run ended: {err.decode()[-2000:]}"
    assert "stats.json" not in s3.keys(out), "the run finished before it could be killed"
    total = len(REAL_INPUTS) + GENERATED

    resumed = subprocess.run(
        [*cmd, "--workers", "2"], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    skipped = f"{len(done)} chunk(s) done by an earlier run, skipped; {total - len(done)} processed"
    assert skipped in resumed.stderr
    took = time.monotonic() - started
    print(f"killed after {len(done)} of {total} inputs; kill + resume took {took:.1f} s")
    assert results(s3.objects(out)) == local_run  # _work removed, nothing else left behind


# --- shards: clean documents from s3://, shards to s3://; train streams them from s3:// ---------

SHARD_OPTS = ["--inputs-length", "64", "--num-shards", "train=2", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def shard_sets(s3, s3_clean, tmp_path_factory) -> dict[str, str]:
    """The s3 clean output made into shards twice: from a local copy into a local folder (the
    reference), and from s3:// into s3://; with the real SentencePiece vocabulary of both."""
    from c4forge.vocab.train import Source, build_vocab

    work = tmp_path_factory.mktemp("shards")
    docs = s3.download(s3_clean, str(work / "docs"))
    vocab = str(work / "vocab")
    build_vocab([Source("en", docs)], vocab, vocab_size=400, sample_chars=200_000, progress=False)
    local = str(work / "shards")
    assert main(["shards", docs, "-o", local, "--vocab", vocab, *SHARD_OPTS]) == 0
    remote = f"s3://{BUCKET}/shards"
    assert main(["shards", s3_clean, "-o", remote, "--vocab", vocab, *SHARD_OPTS]) == 0
    return {"local": local, "s3": remote, "vocab": vocab}


@pytest.mark.slow
def test_shards_from_and_to_s3_equal_a_local_build(s3, shard_sets):
    local = shard_sets["local"]
    objects = s3.objects(shard_sets["s3"])
    files = sorted(
        os.path.relpath(os.path.join(d, n), local) for d, _, ns in os.walk(local) for n in ns
    )
    assert sorted(objects) == files  # no _progress/, no temp objects
    assert objects == {f: open(os.path.join(local, f), "rb").read() for f in files}


TRAIN = ["--steps", "2", "--preset", "tiny", "--batch-size", "4", "--log-every", "1"]
TRAIN += ["--eval-rows", "8", "--no-progress", "--device", "cpu"]


@pytest.mark.slow
def test_train_streams_shards_from_s3_like_from_a_local_folder(s3, shard_sets, tmp_path):
    """`c4forge train s3://…/shards` reads the manifest and streams rows over S3: the same
    batches, so the same losses and weights as training on the local copy."""
    vocab = ["--vocab", shard_sets["vocab"]]
    assert main(["shards", "verify", shard_sets["s3"], *vocab]) == 0
    runs = {}
    for kind in ("local", "s3"):
        out = tmp_path / kind
        assert main(["train", shard_sets[kind], "--output", str(out), *vocab, *TRAIN]) == 0
        runs[kind] = [
            json.loads(line)["loss"]
            for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in line
        ]
    assert len(runs["local"]) == 2 and runs["s3"] == runs["local"]
