"""Several examples per row (bert_tf.row_packing): the packer against brute force, the row
ladder, the static row count, and the NumPy batch packer's layout."""

import itertools

import numpy as np
import pytest

from bert_tf import row_packing


def _check_rows(rows, lengths, row_length, k):
  placed = sorted(i for row in rows for i in row)
  assert placed == [i for i, n in enumerate(lengths) if n > 0]  # each real example once
  for row in rows:
    assert row == sorted(row) and 1 <= len(row) <= k
    assert sum(lengths[i] for i in row) <= row_length


def _fewest_rows(lengths, row_length, k):
  """The optimum by brute force: the fewest rows any assignment of the examples needs."""
  items = [i for i, n in enumerate(lengths) if n > 0]
  for count in range(1, len(items) + 1):
    for assignment in itertools.product(range(count), repeat=len(items)):
      if assignment[0] != 0:
        continue  # rows are interchangeable: the first example goes to row 0
      load, size = [0] * count, [0] * count
      for i, r in zip(items, assignment):
        load[r] += lengths[i]
        size[r] += 1
      if max(load) <= row_length and max(size) <= k and min(size) > 0:
        return count
  return 0


@pytest.mark.parametrize("seed", range(12))
def test_first_fit_decreasing_is_valid_and_near_the_optimum(seed):
  rng = np.random.default_rng(seed)
  row_length, k = int(rng.integers(8, 20)), int(rng.integers(1, 4))
  lengths = [int(n) for n in rng.integers(0, row_length + 1, size=int(rng.integers(1, 8)))]
  rows = row_packing.first_fit_decreasing(lengths, row_length, k)
  _check_rows(rows, lengths, row_length, k)
  best = _fewest_rows(lengths, row_length, k)
  # First-fit decreasing's bound for bin packing: 11/9 OPT + 6/9 (Dosa 2007).
  assert len(rows) <= 11 / 9 * best + 6 / 9


def test_hand_cases():
  # Rows filled exactly, longest first, each row's examples in the data's order.
  assert row_packing.first_fit_decreasing([4, 6, 6, 4], 10) == [[0, 1], [2, 3]]
  # K one-piece examples share a row; the K+1-th opens a new one.
  assert row_packing.first_fit_decreasing([1] * 9, 128, 8) == [list(range(8)), [8]]
  # An example of the full length is alone in its row; padding examples take no row.
  assert row_packing.first_fit_decreasing([128, 0, 3, 0], 128) == [[0], [2]]
  assert row_packing.first_fit_decreasing([0, 0], 128) == []
  with pytest.raises(row_packing.PackingError, match="length 129"):
    row_packing.first_fit_decreasing([129], 128)


def test_row_ladder_is_small_and_rounds_up():
  assert row_packing.row_ladder(32) == tuple(range(1, 17)) + (18, 20, 22, 24, 26, 28, 30, 32)
  assert row_packing.row_ladder(1) == (1,)
  assert row_packing.row_ladder(7) == (1, 2, 3, 4, 5, 6, 7)
  assert len(row_packing.row_ladder(512)) < 60
  assert row_packing.ladder_rows(7, 32) == 7
  assert row_packing.ladder_rows(17, 32) == 18
  assert row_packing.ladder_rows(0, 32) == 1
  # Each rung at most an eighth above the one below (from 16 on): little rounding.
  ladder = row_packing.row_ladder(4096)
  assert all(b <= a + max(1, a // 8) for a, b in zip(ladder, ladder[1:]))
  with pytest.raises(row_packing.PackingError):
    row_packing.ladder_rows(33, 32)


def test_static_rows_give_the_batch_on_average():
  # Every example 16 long in rows of 128: 8 per row, so 32 examples take 4 rows.
  counts = [0] * 129
  counts[16] = 1000
  assert row_packing.static_rows(counts, 32, 128) == 4
  # Lengths 100: one per row.
  counts = [0] * 129
  counts[100] = 10
  assert row_packing.static_rows(counts, 32, 128) == 32
  # Short sentences (mean ~28): between the bounds, about 4.5 per row.
  rng = np.random.default_rng(0)
  counts = np.bincount(np.clip(rng.lognormal(np.log(26), 0.3, 5000).astype(int), 3, 128),
                       minlength=129)
  rows = row_packing.static_rows(list(counts), 32, 128)
  assert 6 <= rows <= 9


def test_check_mode():
  assert row_packing.check_mode("EXACT") == "exact"
  assert row_packing.check_mode(None) == "none"
  with pytest.raises(row_packing.PackingError, match="--packing"):
    row_packing.check_mode("tight")


def _batch(lengths, width, seed=0):
  rng = np.random.default_rng(seed)
  ids = np.zeros((len(lengths), width), np.int32)
  mask = np.zeros_like(ids)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(1, 1000, n)
    mask[i, :n] = 1
  return ids, mask


def test_pack_arrays_moves_each_example_whole_into_its_slot():
  lengths = [5, 3, 8, 1, 0, 2]
  ids, mask = _batch(lengths, 8)
  labels = np.array([10, 11, 12, 13, 14, 15])
  out = row_packing.pack_arrays(dict(input_word_ids=ids, input_mask=mask),
                                dict(label=labels, index=np.arange(6)), 8, max_per_row=3,
                                fill=dict(index=-1))
  k = 3
  rows = out["input_word_ids"].shape[0]
  assert out["label"].shape == out["index"].shape == (rows * k,)
  assert out[row_packing.CLS_POSITIONS].shape == (rows, k)
  seen = set()
  for slot, index in enumerate(out["index"]):
    if index < 0:
      assert out["label"][slot] == 0
      continue
    r, j = divmod(slot, k)
    start = out[row_packing.CLS_POSITIONS][r, j]
    n = lengths[index]
    np.testing.assert_array_equal(out["input_word_ids"][r, start:start + n], ids[index, :n])
    np.testing.assert_array_equal(out["input_mask"][r, start:start + n], j + 1)
    np.testing.assert_array_equal(out[row_packing.POSITION_IDS][r, start:start + n],
                                  np.arange(n))
    assert out["label"][slot] == labels[index]
    seen.add(int(index))
  assert seen == {0, 1, 2, 3, 5}  # the length-0 (padding) example has no slot
  # Real positions are exactly the examples' tokens; the rest is padding (mask 0, id 0).
  assert int((out["input_mask"] > 0).sum()) == sum(lengths)
  assert int(out["input_word_ids"][out["input_mask"] == 0].sum()) == 0


def test_pack_arrays_row_counts():
  ids, mask = _batch([3, 3, 3], 8)
  features = dict(input_word_ids=ids, input_mask=mask)
  assert row_packing.pack_arrays(features, {}, 8)["input_mask"].shape == (2, 8)
  assert row_packing.pack_arrays(features, {}, 8, rows=5)["input_mask"].shape == (5, 8)
  assert row_packing.pack_arrays(features, {}, 8, rows=lambda n: n + 1)["input_mask"].shape \
      == (3, 8)
  with pytest.raises(row_packing.PackingError, match="2 rows needed"):
    row_packing.pack_arrays(features, {}, 8, rows=1)


def test_best_width_keeps_the_fewest_rows_in_the_narrowest_width():
  # 4 examples of 30 fit one row of 128: no narrower row holds them in one.
  assert row_packing.best_width([30] * 4, (32, 64, 128)) == (128, 1)
  # 3 examples of 20 need one row: the narrowest that holds 60 positions.
  assert row_packing.best_width([20] * 3, (32, 64, 128)) == (64, 1)
  # 5 examples of 50 need 3 rows of 128 (two a row); rows of 64 would need 5: stay at 128.
  assert row_packing.best_width([50] * 5, (64, 128)) == (128, 3)
  # The rounding of the count applies: 5 rows of 30 in rows of 32 would round to 8.
  assert row_packing.best_width([30] * 5, (32, 160), rows=lambda n: 8 if n > 2 else n) == \
      (160, 1)
  with pytest.raises(row_packing.PackingError, match="longer than every row width"):
    row_packing.best_width([70], (32, 64))


def test_exact_shape_rounds_to_the_ladder_then_to_the_replicas():
  # 20 examples of 30 positions: 5 rows of 128 (four a row, K=8 allows more but 4*30 fills it);
  # the ladder of a batch of 20 has 5; two replicas round it to 6.
  assert row_packing.exact_shape([30] * 20, (64, 128), 20) == (128, 5)
  assert row_packing.exact_shape([30] * 20, (64, 128), 20, multiple=2) == (128, 6)
  # A few short examples: one row, narrowed to the bucket that holds them.
  assert row_packing.exact_shape([10, 12], (32, 64, 128), 20) == (32, 1)
  # One width: the rounding is handed to pack_arrays, which applies it to its own plan.
  width, rows = row_packing.exact_shape([30] * 20, (128,), 20, multiple=2)
  assert width == 128 and rows(5) == 6 and rows(17) == 18
  features = {"input_mask": np.ones((20, 30), np.int32)}
  assert row_packing.pack_arrays(features, {}, width, rows=rows)["input_mask"].shape == (6, 128)
  # The ladder of 32 rows steps by 2 above 16: 17 needed rows become 18.
  assert row_packing.exact_shape([100] * 17, (128,), 32)[1](17) == 18
  with pytest.raises(row_packing.PackingError, match="longer than the row width 64"):
    row_packing.exact_shape([70], (64,), 8)


def test_auto_is_exact_only_where_packing_changes_nothing_but_speed():
  assert row_packing.resolve("auto", exact_task=True, xla=False) == "exact"
  assert row_packing.resolve("auto", exact_task=False, xla=False) == "none"  # SQuAD
  assert row_packing.resolve("auto", exact_task=True, xla=True) == "none"  # TPU, jit_compile
  assert row_packing.resolve("static", exact_task=False, xla=True) == "static"
  assert row_packing.resolve("none", exact_task=True, xla=False) == "none"

