"""Ordinary faults of the machine or of a user's file are one-line errors: the real CLI, run as a
user runs it, exits 2 with exactly one line on stderr, no traceback, and marks nothing complete.

Read-only folders and full disks are real: as root, a read-only or tiny tmpfs is mounted (a
plain chmod does not stop root); otherwise a chmod'ed folder and RLIMIT_FSIZE are used."""

from __future__ import annotations

import gzip
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "c4forge" / "data" / "sample"
C4_SAMPLE = SAMPLE / "c4-sample.00000-of-00001.json.gz"  # 1,000 real C4 documents
DERIVED_WET = SAMPLE / "real-warc-html-to-wet.resiliparse.warc.wet.gz"  # 191 real WET records
WHIRLWIND = ROOT / "tests" / "data" / "wet" / "whirlwind.warc.wet.gz"  # genuine CC WET
CRAWL_WARC = ROOT / "tests" / "data" / "warc" / "mini.warc.gz"  # genuine CC WARC
SST2_TRAIN = ROOT / "tests" / "data" / "glue" / "SST-2" / "train.tsv"


def c4forge(*args: str, env: dict | None = None, preexec=None, cwd=None, timeout=600):
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(
        p
        for p in (full_env.pop("PREPEND_PATH", ""), str(ROOT), os.environ.get("PYTHONPATH", ""))
        if p
    )
    return subprocess.run(
        [sys.executable, "-m", "c4forge", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        preexec_fn=preexec,
        cwd=cwd or ROOT,
        timeout=timeout,
    )


def one_line_error(proc: subprocess.CompletedProcess, command: str, *needles: str) -> str:
    """Exit 2, no traceback, and the error is the only line c4forge wrote on stderr after its
    progress lines (none of which may follow it)."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith(f"c4forge {command}: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr[-3000:]
    for needle in needles:
        assert needle.lower() in errors[0].lower(), errors[0]
    return errors[0]


def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
    )
    return proc.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder no write can go into (EROFS as root, EACCES otherwise)."""
    ro = tmp_path / "ro"
    if _mount_tmpfs(ro, "ro,size=64k"):
        yield ro
        _umount(ro)
        return
    if os.geteuid() == 0:
        pytest.skip("root without mount: no way to make a folder read-only")
    ro.chmod(0o555)
    yield ro
    ro.chmod(0o755)


@pytest.fixture
def full_disk(tmp_path):
    """(folder, preexec_fn): a tiny tmpfs (ENOSPC) as root, else a 64 KiB RLIMIT_FSIZE (EFBIG)
    on the command's process."""
    small = tmp_path / "small"
    if _mount_tmpfs(small, "size=64k"):
        yield small, None
        _umount(small)
        return

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    yield small, limit


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    """A folder of real C4 documents in the clean output layout."""
    folder = tmp_path_factory.mktemp("docs")
    shutil.copy(C4_SAMPLE, folder / "c4-train.00000-of-00001.json.gz")
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A real vocabulary, span-corruption shards of the C4 sample and a 1-step tiny T5 run."""
    sys.path.insert(0, str(ROOT / "tests"))
    from train_fixtures import build_data, tiny_options

    from c4forge.trainers.train import train

    root = tmp_path_factory.mktemp("trained")
    build_data(root, docs=40)
    train(tiny_options(root, root / "run", steps=1, batch_size=2))
    return root


@pytest.fixture(scope="module")
def clean_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clean") / "out"
    proc = c4forge("clean", WHIRLWIND, "-o", out, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


# --------------------------------------------------------------------------- read-only output


def test_clean_into_a_read_only_folder(readonly_dir):
    proc = c4forge("clean", WHIRLWIND, "-o", readonly_dir / "out")
    one_line_error(proc, "clean", str(readonly_dir))


def test_vocab_into_a_read_only_folder_fails_before_sampling(readonly_dir, docs):
    proc = c4forge("vocab", docs, "-o", readonly_dir, "--vocab-size", "1000")
    one_line_error(proc, "vocab", str(readonly_dir))
    assert "sampled" not in proc.stderr


def test_shards_into_a_read_only_folder(readonly_dir, docs, trained):
    proc = c4forge("shards", docs, "--vocab", trained / "vocab", "-o", readonly_dir / "s")
    one_line_error(proc, "shards", str(readonly_dir))


def test_train_into_a_read_only_folder(readonly_dir, trained):
    proc = c4forge(
        "train",
        trained / "shards",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "2",
        "-o",
        readonly_dir / "run",
    )
    one_line_error(proc, "train", str(readonly_dir))


# --------------------------------------------------------------------------- full disk


def test_clean_on_a_full_disk_marks_nothing_complete(full_disk):
    folder, preexec = full_disk
    out = folder / "out"
    proc = c4forge("clean", DERIVED_WET, "-o", out, "--workers", "1", preexec=preexec)
    one_line_error(proc, "clean")
    assert any(s in proc.stderr for s in ("no space left", "file too large"))
    assert not (out / "stats.json").exists()


def test_train_on_a_full_disk_leaves_no_checkpoint(full_disk, trained):
    folder, preexec = full_disk
    out = folder / "run"
    proc = c4forge(
        "train",
        trained / "shards",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "2",
        "-o",
        out,
        preexec=preexec,
    )
    one_line_error(proc, "train")
    assert any(s in proc.stderr for s in ("no space left", "file too large"))
    assert not (out / "checkpoints" / "latest").exists()


# --------------------------------------------------------------------------- -o naming a file


def test_vocab_output_naming_a_file_fails_before_training(tmp_path, docs):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    proc = c4forge("vocab", docs, "-o", target, "--vocab-size", "1000")
    one_line_error(proc, "vocab", "exists and is not a folder")
    assert proc.stderr.strip().count("\n") == 0  # nothing sampled or trained first
    assert target.read_text() == "mine\n"


def test_report_output_naming_a_file(tmp_path, clean_out):
    target = tmp_path / "report.html"
    target.write_text("mine\n")
    proc = c4forge("report", clean_out, "-o", target)
    one_line_error(proc, "report", "exists and is not a folder")
    assert target.read_text() == "mine\n"


def test_output_under_a_file(tmp_path, trained):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    proc = c4forge(
        "train",
        trained / "shards",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "2",
        "-o",
        target / "run",
    )
    one_line_error(proc, "train", "not a directory")


# --------------------------------------------------------------------------- users' files


def test_utf16_path_list(tmp_path):
    listing = tmp_path / "wet.paths"
    listing.write_bytes(f"{WHIRLWIND}\n".encode("utf-16"))
    proc = c4forge("clean", f"@{listing}", "-o", tmp_path / "out")
    one_line_error(proc, "clean", "not UTF-8", "UTF-16")
    assert not (tmp_path / "out").exists()


def test_cut_gzip_path_list(tmp_path):
    listing = tmp_path / "wet.paths.gz"
    listing.write_bytes(gzip.compress(f"{WHIRLWIND}\n".encode() * 50)[:30])
    proc = c4forge("clean", f"@{listing}", "-o", tmp_path / "out")
    one_line_error(proc, "clean", "not a whole gzip file")


def test_utf16_tsv_for_finetune(tmp_path, trained):
    data = tmp_path / "glue" / "SST-2"
    data.mkdir(parents=True)
    text = SST2_TRAIN.read_text(encoding="utf-8")
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_bytes(text.encode("utf-16"))
    proc = c4forge(
        "finetune",
        trained / "run",
        "--task",
        "sst2",
        "--data",
        tmp_path / "glue",
        "-o",
        tmp_path / "ft",
        "--steps",
        "1",
        "--no-progress",
    )
    one_line_error(proc, "finetune", "train.tsv", "UTF-16")


def test_truncated_stats_json_for_report(tmp_path, clean_out):
    cut = tmp_path / "cut"
    shutil.copytree(clean_out, cut)
    stats = (cut / "stats.json").read_bytes()
    (cut / "stats.json").write_bytes(stats[: len(stats) // 2])
    proc = c4forge("report", cut, "-o", tmp_path / "report")
    one_line_error(proc, "report", "stats.json", "not a valid JSON file")
    assert not (tmp_path / "report").exists()


# --------------------------------------------------------------------------- optional packages


@pytest.mark.parametrize("input_format", ["warc", "auto"])
def test_crawl_warc_without_resiliparse_is_refused_before_work(tmp_path, input_format):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "resiliparse.py").write_text("raise ImportError('No module named resiliparse')\n")
    out = tmp_path / "out"
    proc = c4forge(
        "clean",
        CRAWL_WARC,
        WHIRLWIND,
        "-o",
        out,
        "--input-format",
        input_format,
        env={"PREPEND_PATH": str(hide)},
    )
    one_line_error(proc, "clean", "resiliparse", "pip install")
    assert not (out / "_work").exists() and not (out / "stats.json").exists()
    # WET input alone never needs it.
    proc = c4forge("clean", WHIRLWIND, "-o", out, "--quiet", env={"PREPEND_PATH": str(hide)})
    assert proc.returncode == 0, proc.stderr[-3000:]


# --------------------------------------------------------------------------- damaged _work/


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[Path, Path]:
    """(inputs, output) of a clean run stopped by a bad last input: the chunks before it are
    recorded under _work/, as a killed run leaves them (one input file per chunk)."""
    root = tmp_path_factory.mktemp("interrupted")
    inputs = root / "in"
    inputs.mkdir()
    shutil.copy(DERIVED_WET, inputs / "a.warc.wet.gz")
    shutil.copy(WHIRLWIND, inputs / "b.warc.wet.gz")
    shutil.copy(CRAWL_WARC, inputs / "z.warc.wet.gz")  # a crawl WARC named as a WET: refused
    out = root / "out"
    proc = c4forge("clean", inputs, "-o", out, "--workers", "1", "--input-format", "wet")
    one_line_error(proc, "clean", "crawl WARC")
    assert (out / "_work" / "chunk-00000.json").exists()
    assert not (out / "stats.json").exists()
    return inputs, out


def _damaged_copy(out: Path, where: Path, name: str, cut: bool) -> Path:
    copy = where / "out"
    shutil.copytree(out, copy)
    path = copy / "_work" / name
    data = bytearray(path.read_bytes())
    if cut:
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return copy


@pytest.mark.parametrize("cut", [True, False])
def test_resume_with_a_damaged_work_file(tmp_path, interrupted, cut):
    inputs, out = interrupted
    copy = _damaged_copy(out, tmp_path, "chunk-00000.keys.gz", cut)
    proc = c4forge(
        "clean", inputs, "-o", copy, "--workers", "1", "--input-format", "wet", "--resume"
    )
    one_line_error(proc, "clean", "chunk-00000.keys.gz is damaged", "without --resume")
    assert not (copy / "stats.json").exists()


@pytest.mark.parametrize("cut", [True, False])
def test_damaged_records_file_is_never_read_short(tmp_path, interrupted, cut):
    from c4forge.clean.passes import _lines_of
    from c4forge.errors import VerificationError

    _, out = interrupted
    whole = list(_lines_of(str(out / "_work" / "chunk-00000.pages.gz")))
    assert len(whole) > 100
    copy = _damaged_copy(out, tmp_path, "chunk-00000.pages.gz", cut)
    with pytest.raises(VerificationError, match="chunk-00000.pages.gz is damaged"):
        list(_lines_of(str(copy / "_work" / "chunk-00000.pages.gz")))


@pytest.mark.parametrize("keep", [1, 0.5, 0.999])
def test_pickle_batch_file_cut_is_an_error_not_a_short_read(tmp_path, keep):
    import io as _io

    from c4forge.corpus.counting import CounterBag
    from c4forge.errors import VerificationError
    from c4forge.io.pickle_batches import dump_batches, read_batches
    from c4forge.readers.wet import read_wet

    pages = list(read_wet(_io.BytesIO(DERIVED_WET.read_bytes()), "derived", CounterBag()))
    path = tmp_path / "pages.run"
    with open(path, "wb") as f:
        dump_batches(f, [(p.url, p.text) for p in pages], 16)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    if keep == 1:
        assert list(read_batches(str(path))) == [(p.url, p.text) for p in pages]
        return
    with pytest.raises(VerificationError, match="pages.run is damaged"):
        list(read_batches(str(path)))


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("safetensors", ["train", "{shards}", "--steps", "1", "-o", "{out}"]),
        ("sklearn", ["finetune", "{run}", "--task", "sst2", "--data", "{glue}", "-o", "{out}"]),
        ("datasketch", ["clean", str(WHIRLWIND), "-o", "{out}", "--near-dedup", "minhash"]),
    ],
)
def test_missing_optional_package_is_refused_before_work(tmp_path, trained, module, argv):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / f"{module}.py").write_text(f"raise ImportError('No module named {module}')\n")
    out = tmp_path / "out"
    fill = {
        "shards": trained / "shards",
        "run": trained / "run",
        "glue": ROOT / "tests" / "data" / "glue",
        "out": out,
    }
    proc = c4forge(*(a.format(**fill) for a in argv), env={"PREPEND_PATH": str(hide)})
    one_line_error(proc, argv[0], repr(module), "pip install 'c4forge[")
    assert not out.exists()


def test_only_the_machines_faults_become_one_line_errors():
    import errno

    from c4forge.errors import environment_fault

    assert environment_fault(ValueError("a bug")) is None
    assert environment_fault(FileNotFoundError(errno.ENOENT, "gone", "x")) is None
    assert environment_fault(KeyError("k")) is None
    full = OSError(errno.ENOSPC, "No space left on device")
    assert environment_fault(full, "out") == "no space left on device (writing out)"
    try:  # a fault raised while handling another, as engines re-raise
        try:
            raise OSError(errno.EROFS, "Read-only file system", "/ro/x")
        except OSError as inner:
            raise RuntimeError("stage failed") from inner
    except RuntimeError as outer:
        assert environment_fault(outer) == "/ro/x: read-only file system"
    beam = RuntimeError("OSError: [Errno 28] No space left on device [while running 'pass0']")
    assert environment_fault(beam, "out") == "no space left on device (writing out)"
    assert environment_fault(RuntimeError("[Errno 2] No such file")) is None
    try:
        os.makedirs(__file__, exist_ok=True)
    except FileExistsError as err:
        assert environment_fault(err) == f"{__file__}: exists and is not a folder"
    assert environment_fault(FileExistsError(errno.EEXIST, "File exists", "lock")) is None
