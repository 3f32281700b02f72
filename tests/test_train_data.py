"""The trainer's data stream: global row order, rank/worker split, exact resume, derived features."""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402

from c4forge.errors import VerificationError  # noqa: E402
from c4forge.formats.shards import epoch_shard_order  # noqa: E402
from c4forge.trainers import data as D  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("traindata")
    return root, fx.build_data(root, docs=60, packed_docs=40)


def _key(row: np.ndarray) -> bytes:
    return row.tobytes()


def _stream_rows(shards, plan, start, end, workers):
    ds = D.TrainStream(shards, plan, start, end)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    return list(loader)


def test_two_ranks_two_workers_cover_every_row_once(built):
    root, desc = built
    shards = D.open_shard_set(str(root / "shards"), vocab=desc, inputs_length=64)
    all_rows = shards.read_rows("train")
    total = len(all_rows["inputs"])
    batch, accum = 8, 2
    steps = total // batch  # the whole first epoch except a partial last batch
    seen = collections.Counter()
    per_step = collections.defaultdict(list)
    for rank in range(2):
        plan = D.DataPlan(batch_size=batch, world_size=2, rank=rank, grad_accum=accum, seed=5)
        items = _stream_rows(shards, plan, 0, steps, workers=2)
        # the DataLoader's round robin over 2 workers gives back the exact sequence
        assert [(it["step"], it["micro"]) for it in items] == [
            (s, m) for s in range(steps) for m in range(accum)
        ]
        for it in items:
            assert it["inputs"].dtype == torch.uint16 and it["inputs"].shape == (2, 64)
            for row in it["inputs"].numpy():
                seen[_key(row)] += 1
            per_step[it["step"]].append(it["inputs"].numpy())
    expected = collections.Counter(_key(r) for r in all_rows["inputs"])
    covered = steps * batch
    assert sum(seen.values()) == covered
    assert all(n == 1 for n in seen.values())  # no row twice (rows are distinct texts)
    assert set(seen) <= set(expected)
    assert len(expected) - len(seen) == total - covered  # only the partial last batch is unseen
    # rank order within a step = the global order of RowOrder
    order = D.RowOrder(tuple(r for _, r in shards.split_shards("train")), 5, batch)
    shard, within = order.locate(order.step_rows(3))
    reader = D.ShardReader(
        shards,
        [p for p, _ in shards.split_shards("train")],
        [r for _, r in shards.split_shards("train")],
    )
    np.testing.assert_array_equal(
        np.concatenate(per_step[3]), reader.gather(shard, within)["inputs"]
    )


def test_global_order_follows_epoch_shard_order(built):
    root, desc = built
    shards = D.open_shard_set(str(root / "shards"))
    rows = tuple(r for _, r in shards.split_shards("train"))
    order = D.RowOrder(rows, seed=3, batch_size=4)
    for epoch in (0, 1):
        first = epoch_shard_order(len(rows), 3, epoch)[0]
        shard, within = order.locate(np.array([epoch * sum(rows)]))
        assert (shard[0], within[0]) == (first, 0)
    # every row of epoch 1 is visited exactly once
    shard, within = order.locate(np.arange(sum(rows), 2 * sum(rows)))
    pairs = set(zip(shard.tolist(), within.tolist()))
    assert pairs == {(s, r) for s in range(len(rows)) for r in range(rows[s])}
    assert epoch_shard_order(len(rows), 3, 0) != epoch_shard_order(len(rows), 3, 1) or len(rows) < 3


def test_resume_gives_the_exact_next_batch(built):
    root, desc = built
    shards = D.open_shard_set(str(root / "shards"))
    plan = D.DataPlan(batch_size=6, grad_accum=3, seed=1, shuffle_window=4)
    full = _stream_rows(shards, plan, 0, 9, workers=0)
    resumed = _stream_rows(shards, plan, 5, 9, workers=2)
    tail = [it for it in full if it["step"] >= 5]
    assert len(resumed) == len(tail) == 12
    for a, b in zip(tail, resumed):
        assert (a["step"], a["micro"]) == (b["step"], b["micro"])
        assert torch.equal(a["inputs"], b["inputs"]) and torch.equal(a["targets"], b["targets"])


def test_one_rank_with_accumulation_sees_what_two_ranks_see(built):
    root, _ = built
    shards = D.open_shard_set(str(root / "shards"))
    one = D.TrainStream(shards, D.DataPlan(batch_size=8, grad_accum=2, seed=2), 0, 1)
    two = [
        D.TrainStream(shards, D.DataPlan(batch_size=8, world_size=2, rank=r, seed=2), 0, 1)
        for r in (0, 1)
    ]
    a = np.concatenate([one.micro_rows(0, m) for m in range(2)])
    b = np.concatenate([t.micro_rows(0, 0) for t in two])
    np.testing.assert_array_equal(a, b)


def test_shuffle_is_a_permutation_within_windows(built):
    rows = (50, 41, 37)
    plain = D.RowOrder(rows, seed=0, batch_size=8)
    shuf = D.RowOrder(rows, seed=0, batch_size=8, shuffle_window=4)
    window = np.concatenate([shuf.step_rows(s) for s in range(4)])
    assert sorted(window.tolist()) == list(range(32))
    assert window.tolist() != list(range(32))
    np.testing.assert_array_equal(plain.step_rows(5), np.arange(40, 48))
    other = D.RowOrder(rows, seed=1, batch_size=8, shuffle_window=4)
    assert not np.array_equal(other.step_rows(0), shuf.step_rows(0))
    np.testing.assert_array_equal(shuf.step_rows(6), D.RowOrder(rows, 0, 8, 4).step_rows(6))


def test_decoder_inputs_shift_per_segment():
    targets = np.array([[3, 9, 1, 4, 1, 0, 0]])
    segs = np.array([[1, 1, 1, 2, 2, 0, 0]])
    pos = np.array([[0, 1, 2, 0, 1, 0, 0]])
    expect = [[0, 3, 9, 0, 4, 0, 0]]
    assert D.decoder_input_tokens(targets, pos, segs).tolist() == expect
    t = D.decoder_input_tokens(torch.tensor(targets), torch.tensor(pos), torch.tensor(segs))
    assert t.tolist() == expect
    assert D.decoder_input_tokens(torch.tensor([[5, 6, 1, 0]])).tolist() == [[0, 5, 6, 1]]


def test_packed_rows_widen_on_device(built):
    root, _ = built
    shards = D.open_shard_set(str(root / "packed"))
    item = next(iter(D.TrainStream(shards, D.DataPlan(batch_size=4), 0, 1)))
    assert item["targets_segment_ids"].dtype == torch.uint16
    batch = D.to_device(item, torch.device("cpu"))
    assert batch.input_ids.dtype == torch.int64
    assert batch.decoder_segment_ids is not None and int(batch.decoder_segment_ids.max()) >= 2
    starts = item["targets_positions"].to(torch.int64) == 0
    assert bool((batch.decoder_input_ids[starts] == 0).all())
    assert torch.equal(batch.weights(), batch.targets != 0)


def test_eval_batches_pad_the_last_batch_and_count_rows_once(built):
    root, _ = built
    shards = D.open_shard_set(str(root / "shards"))
    batches = list(D.eval_batches(shards, rows=23, batch_rows=5))
    assert len(batches) == 5 and all(b["inputs"].shape == (5, 64) for b in batches)
    assert int((batches[-1]["targets"] != 0).any(axis=1).sum()) == 3
    head = shards.read_rows("validation")["inputs"][:23]
    np.testing.assert_array_equal(np.concatenate([b["inputs"] for b in batches])[:23], head)


def test_shards_of_another_vocabulary_are_refused(built):
    root, desc = built
    other = dict(desc, sha256="0" * 64)
    with pytest.raises(VerificationError, match="vocabulary"):
        D.open_shard_set(str(root / "shards"), vocab=other)
    with pytest.raises(VerificationError, match="inputs_length"):
        D.open_shard_set(str(root / "shards"), inputs_length=512)
