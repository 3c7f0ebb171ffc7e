"""packed_rows.packed_position_share: what --packing=auto asks before packing a task's batches."""

import pytest

from bert_tf.training import packed_rows


def test_packed_position_share_counts_rows_against_bucketed_batches():
  # Pairs of 40-64 tokens in rows of 64: one a row packed or not, so no saving.
  pairs = [0] * 65
  for length in range(40, 65):
    pairs[length] = 10
  assert packed_rows.packed_position_share(pairs, 64, 64) == 1.0
  # Every example 16 long: 8 a row (MAX_EXAMPLES_PER_ROW), 32 examples in 4 rows of 128.
  short = [0] * 129
  short[16] = 100
  assert packed_rows.packed_position_share(short, 32, 128) == pytest.approx(4 * 128 / (32 * 128))
  # Against batches cut to a bucket of 16 the unpacked batch computes 32 x 16: the same.
  assert packed_rows.packed_position_share(short, 32, 128, (16, 128)) == pytest.approx(1.0)
  assert packed_rows.packed_position_share([0] * 129, 32, 128) == 1.0
