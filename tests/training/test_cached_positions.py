"""Per-position features stored for a record's real positions only (a tagger teacher's cached
logits, input_pipeline.RecordSpec's (None, C) shape): read back as [B, L, C] with 0 past the
record's end, cut to length buckets and packed into rows position by position with the inputs.

Every record's feature holds input_id x 10 + c at its real position p, class c, so a position
that landed anywhere else than beside its own input shows."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows

L, C, RECORDS = 16, 2, 24


def _write(path):
  rng = np.random.default_rng(4)
  lengths = rng.integers(3, 10, RECORDS)
  lengths[:2] = L  # full rows in the first batch only
  with record_schema.RecordFileWriter(str(path)) as writer:
    for n in lengths:
      ids = np.zeros(L, np.int64)
      ids[:n] = rng.integers(1, 1000, n)
      example = tf.train.Example()
      features = example.features.feature
      features["input_ids"].int64_list.value.extend(ids.tolist())
      features["input_mask"].int64_list.value.extend([1] * n + [0] * (L - n))
      features["segment_ids"].int64_list.value.extend([0] * L)
      features["label_ids"].int64_list.value.extend([int(n)])
      values = ids[:n, None] * 10 + np.arange(C)[None]
      features["teacher"].float_list.value.extend(values.reshape(-1).astype(float).tolist())
      writer.write(example.SerializeToString())
  return str(path), lengths


SPEC = input_pipeline.parsing_spec({
    "input_ids": ((L,), "int64"), "input_mask": ((L,), "int64"), "segment_ids": ((L,), "int64"),
    "label_ids": ((), "int64"), "teacher": ((None, C), "float32")})


def _check(batch):
  ids = batch["input_word_ids"].numpy()
  real = batch["input_mask"].numpy() != 0
  teacher = batch["teacher"].numpy()
  assert teacher.shape == ids.shape + (C,)
  expected = ids[..., None] * 10.0 + np.arange(C) * real[..., None]
  np.testing.assert_array_equal(teacher, np.where(real[..., None], expected, 0.0))
  return int(real.sum())


def test_real_positions_come_back_padded_to_the_records_length(tmp_path):
  path, lengths = _write(tmp_path / "r.tf_record")
  batches = list(input_pipeline.record_dataset(path, SPEC, 8, is_training=False,
                                               num_examples=RECORDS))
  assert sum(_check(b) for b in batches) == lengths.sum()
  assert all(b["teacher"].shape[1] == L for b in batches)


@pytest.mark.parametrize("packing", [None, packed_rows.Packing("exact")])
def test_cut_and_packed_with_their_inputs(tmp_path, packing):
  path, lengths = _write(tmp_path / "r.tf_record")
  dataset = input_pipeline.record_dataset(path, SPEC, 8, is_training=False,
                                          num_examples=RECORDS, length_buckets=(4, 8, 12, 16),
                                          packing=packing)
  positions, shapes = 0, set()
  for batch in dataset:
    positions += _check(batch)
    shapes.add(batch["teacher"].shape[:2])
    assert packed_rows.is_packed(batch) == (packing is not None)
  assert positions == lengths.sum()
  if packing is None:
    assert min(width for _, width in shapes) < L  # cut to a bucket
  else:
    assert min(rows for rows, _ in shapes) < 8  # several windows a row


def test_static_packed_training_rows_keep_them_beside_their_inputs(tmp_path):
  path, _ = _write(tmp_path / "r.tf_record")
  dataset = input_pipeline.record_dataset(path, SPEC, 8, is_training=True, seed=1,
                                          packing=packed_rows.Packing("static", rows=4))
  for batch in dataset.take(3):
    assert batch["teacher"].shape == (4, L, C)
    assert _check(batch) > 0
