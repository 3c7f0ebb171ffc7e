"""Tests of bert_tf.training.input_pipeline: batches, sharding, GZIP, metadata, dynamic masking."""

import gzip
import logging
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.training import input_pipeline
from bert_tf.training import record_files
from bert_tf.training import remasking
from tests import helpers

TEST_DATA = helpers.TEST_DATA
# The first 64 records of /work/shared/data/golden/austen_s128_d2.tfrecord: output of the original
# google-research/bert create_pretraining_data.py on Jane Austen (public domain) with the
# bert-base-uncased vocab, max_seq_length 128, max_predictions_per_seq 20, seed 12345.
ORIGINAL_RECORDS = os.path.join(TEST_DATA, "train_austen_s128_p20.tfrecord")
SEQ, PRED = 128, 20
PAD_ID, CLS_ID, SEP_ID, MASK_ID, VOCAB_SIZE = 0, 101, 102, 103, 30522

SMALL_SEQ, SMALL_PRED = 16, 4


def original_examples():
  return [record_schema.decode_example(r.numpy(), SEQ, PRED)
          for r in tf.data.TFRecordDataset(ORIGINAL_RECORDS)]


def write_numbered_records(path, first, count, use_v2_feature_names=False, compression=""):
  """Small records whose input_ids[1] is the record's number (first, first + 1, ...)."""
  encoder = record_schema.ExampleEncoder(SMALL_SEQ, SMALL_PRED, vocab_size=5000,
                                         use_v2_feature_names=use_v2_feature_names)
  options = tf.io.TFRecordOptions(compression_type=compression)
  with tf.io.TFRecordWriter(path, options=options) as writer:
    for number in range(first, first + count):
      ids = [CLS_ID, 1000 + number, 7, SEP_ID, 8, 9, SEP_ID]
      writer.write(encoder.encode(ids, 4, [2], [7], is_random_next=number % 2 == 1))


def numbers(dataset):
  return sorted(int(n) - 1000 for batch in dataset for n in batch["input_word_ids"][:, 1].numpy())


def write_metadata(record_path, **overrides):
  meta = record_schema.make_metadata(
      max_seq_length=SMALL_SEQ, max_predictions_per_seq=SMALL_PRED, use_v2_feature_names=False,
      vocab_size=5000, vocab_md5="0" * 32, do_lower_case=True, do_whole_word_mask=False,
      flags={}, counts={}, program_version="test")
  meta.update(overrides)
  record_schema.write_metadata(record_schema.metadata_path(record_path), meta)


# === Files ===


def test_expand_file_patterns(tmp_path):
  for name in ("b.tfrecord", "a.tfrecord", "c.other"):
    (tmp_path / name).write_bytes(b"")
  (tmp_path / ("a.tfrecord" + record_schema.METADATA_SUFFIX)).write_text("{}")
  got = record_files.expand_file_patterns(f"{tmp_path}/c.other, {tmp_path}/*.tfrecord*")
  assert got == [str(tmp_path / n) for n in ("c.other", "a.tfrecord", "b.tfrecord")]
  with pytest.raises(record_files.InputError, match=r"--eval_input_file: no file matches .*x\*"):
    record_files.expand_file_patterns(f"{tmp_path}/a.tfrecord,{tmp_path}/x*",
                                        flag_name="eval_input_file")
  with pytest.raises(record_files.InputError, match="--input_file is empty"):
    record_files.expand_file_patterns(" , ")


# === Batches ===


def test_eval_batches_are_the_records_in_order_with_static_int32_shapes():
  dataset = input_pipeline.pretraining_dataset(ORIGINAL_RECORDS, SEQ, PRED, batch_size=10,
                                               is_training=False)
  spec = dataset.element_spec
  want_shapes = {"input_word_ids": [10, SEQ], "input_mask": [10, SEQ],
                 "input_type_ids": [10, SEQ],
                 "masked_lm_positions": [10, PRED], "masked_lm_ids": [10, PRED],
                 "masked_lm_weights": [10, PRED], "next_sentence_labels": [10, 1]}
  assert {k: v.shape.as_list() for k, v in spec.items()} == want_shapes
  for name, value in spec.items():
    assert value.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32), name
  batches = list(dataset)
  assert len(batches) == 6  # 64 records, the last 4 dropped.
  examples = original_examples()
  for i, batch in enumerate(batches):
    for name in record_schema.CANONICAL_NAMES:  # the records' names -> the models' names, once
      np.testing.assert_array_equal(batch[record_schema.MODEL_INPUT_NAMES.get(name, name)].numpy(),
                                    [examples[i * 10 + j][name] for j in range(10)], name)


def test_training_repeats_shuffles_and_is_deterministic_with_a_seed():
  def first_batches(seed, count=8):
    dataset = input_pipeline.pretraining_dataset(ORIGINAL_RECORDS, SEQ, PRED, batch_size=16,
                                                 is_training=True, seed=seed,
                                                 shuffle_buffer_size=64)
    return [b["input_word_ids"].numpy() for b in dataset.take(count)]

  a, b, c = first_batches(1), first_batches(1), first_batches(2)
  assert len(a) == 8  # 128 records from a 64-record file: it repeats.
  np.testing.assert_array_equal(np.stack(a), np.stack(b))
  assert not np.array_equal(np.stack(a), np.stack(c))
  in_order = np.array([e["input_ids"] for e in original_examples()[:16]])
  assert not np.array_equal(a[0], in_order)
  # Every row is a record of the file, and two epochs' worth of batches covers nearly all of them
  # (the shuffle buffer mixes neighbouring epochs: with seed 1, 61 of the 64 records).
  records = set(tuple(e["input_ids"]) for e in original_examples())
  rows = [tuple(int(t) for t in row) for row in np.concatenate(a)]
  assert set(rows) <= records
  assert len(set(rows)) >= 56


def test_gzip_is_detected_from_bytes_and_metadata(tmp_path):
  plain = input_pipeline.pretraining_dataset(ORIGINAL_RECORDS, SEQ, PRED, 8, is_training=False)
  want = [b["input_word_ids"].numpy() for b in plain]
  gz = tmp_path / "data.tfrecord.gz"
  with open(ORIGINAL_RECORDS, "rb") as src, gzip.open(gz, "wb") as dst:
    dst.write(src.read())
  assert record_files.detect_compression([str(gz)]) == "GZIP"
  assert record_files.detect_compression([ORIGINAL_RECORDS]) == ""
  got = input_pipeline.pretraining_dataset(str(gz), SEQ, PRED, 8, is_training=False)
  np.testing.assert_array_equal(np.stack([b["input_word_ids"].numpy() for b in got]), np.stack(want))
  with pytest.raises(record_files.InputError, match="GZIP-compressed but"):
    input_pipeline.pretraining_dataset([str(gz), ORIGINAL_RECORDS], SEQ, PRED, 8, False)
  # Metadata takes precedence over the bytes.
  small = tmp_path / "small.tfrecord"
  write_numbered_records(str(small), 0, 8, compression="GZIP")
  write_metadata(str(small), compression="GZIP")
  assert record_files.detect_compression(
      [str(small)], record_files.read_input_metadata([str(small)])) == "GZIP"
  dataset = input_pipeline.pretraining_dataset(str(small), SMALL_SEQ, SMALL_PRED, 4, False)
  assert numbers(dataset) == list(range(8))


def test_v2_feature_names_from_metadata(tmp_path):
  path = str(tmp_path / "v2.tfrecord")
  write_numbered_records(path, 0, 6, use_v2_feature_names=True)
  write_metadata(path, use_v2_feature_names=True)
  dataset = input_pipeline.pretraining_dataset(path, SMALL_SEQ, SMALL_PRED, 3, False)
  assert set(dataset.element_spec) == set(record_schema.to_model_names(
      {name: None for name in record_schema.CANONICAL_NAMES}))
  assert numbers(dataset) == list(range(6))
  batch = next(iter(dataset))
  np.testing.assert_array_equal(batch["input_type_ids"][0, :8], [0, 0, 0, 0, 1, 1, 1, 0])
  np.testing.assert_array_equal(batch["next_sentence_labels"][:, 0], [0, 1, 0])


def test_metadata_contradicting_the_flags_is_an_error(tmp_path):
  path = str(tmp_path / "data.tfrecord")
  write_numbered_records(path, 0, 4)
  write_metadata(path)
  with pytest.raises(ValueError, match="--max_seq_length=32 but the data was made with "
                                       "max_seq_length=16"):
    input_pipeline.pretraining_dataset(path, 32, SMALL_PRED, 2, True)
  with pytest.raises(record_schema.MetadataError, match="vocab_size=100"):
    record_files.check_input_metadata([path], SMALL_SEQ, SMALL_PRED, vocab_size=100)
  assert record_files.check_input_metadata([path], SMALL_SEQ, SMALL_PRED, vocab_size=5000,
                                             do_lower_case=True)["max_seq_length"] == SMALL_SEQ
  other = str(tmp_path / "other.tfrecord")
  write_numbered_records(other, 4, 4)
  write_metadata(other, max_predictions_per_seq=SMALL_PRED + 1)
  with pytest.raises(record_files.InputError, match="max_predictions_per_seq=5"):
    record_files.read_input_metadata([path, other])


# === Sharding across input pipelines ===


def contexts(num_pipelines=2):
  return [tf.distribute.InputContext(num_input_pipelines=num_pipelines, input_pipeline_id=i,
                                     num_replicas_in_sync=num_pipelines)
          for i in range(num_pipelines)]


def test_two_pipelines_shard_by_file(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  paths = []
  for f in range(4):
    paths.append(str(tmp_path / f"part-{f}.tfrecord"))
    write_numbered_records(paths[-1], 100 * f, 6)
  seen = []
  for context in contexts():
    dataset = input_pipeline.pretraining_dataset(
        f"{tmp_path}/part-*.tfrecord", SMALL_SEQ, SMALL_PRED, batch_size=4,
        is_training=True, repeat=False, input_context=context, seed=3)
    assert dataset.element_spec["input_word_ids"].shape.as_list() == [2, SMALL_SEQ]
    seen.append(numbers(dataset))
  assert "Input pipeline 1 of 2: sharding by file (4 files), per-replica batch 2" in caplog.text
  # Pipeline 0 reads files 0 and 2, pipeline 1 files 1 and 3: whole files, disjoint.
  assert seen[0] == sorted(list(range(0, 6)) + list(range(200, 206)))
  assert seen[1] == sorted(list(range(100, 106)) + list(range(300, 306)))


def test_two_pipelines_shard_by_record_with_one_file(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  path = str(tmp_path / "only.tfrecord")
  write_numbered_records(path, 0, 12)
  seen = []
  for context in contexts():
    dataset = input_pipeline.pretraining_dataset(
        path, SMALL_SEQ, SMALL_PRED, batch_size=4, is_training=True, repeat=False,
        input_context=context)
    seen.append(numbers(dataset))
  assert "Input pipeline 0 of 2: sharding by record (1 files)" in caplog.text
  assert seen[0] == list(range(0, 12, 2))
  assert seen[1] == list(range(1, 12, 2))


@pytest.mark.parametrize("num_files", [1, 4])
def test_evaluation_pipelines_take_their_slice_of_the_single_process_batches(tmp_path,
                                                                             num_files, caplog):
  """Each global eval batch is the single process's (the next records in file order), split
  between the pipelines: any number of workers scores the same examples, batch by batch."""
  caplog.set_level(logging.INFO, logger="absl")
  for f in range(num_files):
    write_numbered_records(str(tmp_path / f"part-{f}.tfrecord"), 100 * f, 24 // num_files)
  pattern = f"{tmp_path}/part-*.tfrecord"

  def batches(dataset):
    return [sorted(int(i) for i in b["input_word_ids"][:, 1].numpy()) for b in dataset]

  single = batches(input_pipeline.pretraining_dataset(
      pattern, SMALL_SEQ, SMALL_PRED, batch_size=4, is_training=False, repeat=False))
  parts = [batches(input_pipeline.pretraining_dataset(
      pattern, SMALL_SEQ, SMALL_PRED, batch_size=4, is_training=False, repeat=False,
      input_context=context)) for context in contexts()]
  assert "Input pipeline 1 of 2: sharding each global batch" in caplog.text
  assert len(single) == 6 and [len(p) for p in parts] == [6, 6]
  assert [sorted(a + b) for a, b in zip(*parts)] == single


# === Dynamic masking ===


def masking_config(seed=5):
  return remasking.DynamicMasking(vocab_size=VOCAB_SIZE, mask_id=MASK_ID, cls_id=CLS_ID,
                                       sep_id=SEP_ID, pad_id=PAD_ID, seed=seed)


def unmasked_ids(example):
  ids = np.array(example["input_ids"])
  for pos, label, weight in zip(example["masked_lm_positions"], example["masked_lm_ids"],
                                example["masked_lm_weights"]):
    if weight > 0:
      ids[pos] = label
  return ids


def test_dynamic_masking_follows_the_original_rules():
  examples = original_examples()
  originals = np.array([unmasked_ids(e) for e in examples])
  epochs = 5
  dataset = input_pipeline.pretraining_dataset(
      ORIGINAL_RECORDS, SEQ, PRED, batch_size=16, is_training=False, repeat=True,
      dynamic_masking=masking_config())
  batches = list(dataset.take(4 * epochs))
  counts = {"mask": 0, "keep": 0, "random": 0}
  total_tokens = 0
  first_epoch_positions = {}
  for step, batch in enumerate(batches):
    b = {k: v.numpy() for k, v in batch.items()}
    rows = range((step % 4) * 16, (step % 4) * 16 + 16)
    original = originals[list(rows)]
    stored = [examples[r] for r in rows]
    # The other features are untouched.
    np.testing.assert_array_equal(b["input_mask"], [e["input_mask"] for e in stored])
    np.testing.assert_array_equal(b["input_type_ids"], [e["segment_ids"] for e in stored])
    for i in range(16):
      weights = b["masked_lm_weights"][i]
      n = int(weights.sum())
      # Same count as the original's masking of the same instance (no whole-word masking).
      assert n == int(sum(stored[i]["masked_lm_weights"]))
      np.testing.assert_array_equal(weights, [1.0] * n + [0.0] * (PRED - n))
      positions = b["masked_lm_positions"][i]
      assert np.all(np.diff(positions[:n]) > 0) and np.all(positions[n:] == 0)
      assert np.all(b["input_mask"][i][positions[:n]] == 1)
      assert not np.isin(original[i][positions[:n]], [CLS_ID, SEP_ID, PAD_ID]).any()
      np.testing.assert_array_equal(b["masked_lm_ids"][i][:n], original[i][positions[:n]])
      assert np.all(b["masked_lm_ids"][i][n:] == 0)
      # Only the chosen positions differ from the unmasked text.
      others = np.setdiff1d(np.arange(SEQ), positions[:n])
      np.testing.assert_array_equal(b["input_word_ids"][i][others], original[i][others])
      new = b["input_word_ids"][i][positions[:n]]
      labels = original[i][positions[:n]]
      counts["mask"] += int(np.sum(new == MASK_ID))
      counts["keep"] += int(np.sum((new == labels) & (labels != MASK_ID)))
      counts["random"] += int(np.sum((new != MASK_ID) & (new != labels)))
      total_tokens += int(b["input_mask"][i].sum())
    if step >= 4:
      # Records seen again in a later epoch get new masks.
      assert not np.array_equal(b["masked_lm_positions"], first_epoch_positions[step % 4])
    else:
      first_epoch_positions[step] = b["masked_lm_positions"]
  predicted = sum(counts.values())
  assert 0.14 < predicted / total_tokens < 0.16
  assert abs(counts["mask"] / predicted - 0.8) < 0.03, counts
  assert abs(counts["keep"] / predicted - 0.1) < 0.025, counts
  assert abs(counts["random"] / predicted - 0.1) < 0.025, counts


def test_dynamic_masking_is_deterministic_given_the_seed():
  def masks(seed):
    dataset = input_pipeline.pretraining_dataset(
        ORIGINAL_RECORDS, SEQ, PRED, batch_size=32, is_training=False,
        dynamic_masking=masking_config(seed))
    return np.concatenate([b["input_word_ids"].numpy() for b in dataset])

  np.testing.assert_array_equal(masks(1), masks(1))
  assert not np.array_equal(masks(1), masks(2))


def test_dynamic_masking_from_vocab():
  vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5}
  config = remasking.DynamicMasking.from_vocab(vocab, masked_lm_prob=0.2, seed=9)
  assert (config.vocab_size, config.pad_id, config.cls_id, config.sep_id, config.mask_id,
          config.masked_lm_prob, config.seed) == (6, 0, 2, 3, 4, 0.2, 9)
  with pytest.raises(record_files.InputError, match=r"\[MASK\]"):
    remasking.DynamicMasking.from_vocab({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2})


def test_dynamic_masking_rounds_half_to_even_and_respects_max_predictions():
  # 30 tokens * 0.15 = 4.5 -> 4 (Python 3 rounding); 70 -> 10.5 -> 10, capped at P = 8.
  seq = 72
  ids = np.zeros((2, seq), np.int32)
  mask = np.zeros((2, seq), np.int32)
  for row, length in enumerate((30, 70)):
    ids[row, :length] = [CLS_ID] + [2000 + j for j in range(length - 2)] + [SEP_ID]
    mask[row, :length] = 1
  batch = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
           "segment_ids": tf.zeros_like(ids), "masked_lm_positions": tf.zeros((2, 8), tf.int32),
           "masked_lm_ids": tf.zeros((2, 8), tf.int32),
           "masked_lm_weights": tf.zeros((2, 8), tf.float32),
           "next_sentence_labels": tf.zeros((2, 1), tf.int32)}
  out = remasking.apply_dynamic_masking(batch, masking_config(), tf.constant([1, 2]))
  np.testing.assert_array_equal(out["masked_lm_weights"].numpy().sum(axis=1), [4, 8])
  positions = out["masked_lm_positions"].numpy()
  assert positions[0, :4].min() >= 1 and positions[0, :4].max() <= 28
  assert positions[1].min() >= 1 and positions[1].max() <= 68


def test_the_pipelines_prefetch_with_tf_datas_autotuning_model_off():
  """record_files.prefetched: deleting an iterator whose autotuning model is on can block
  for up to a minute in TensorFlow 2.20, so every pipeline turns it off, and still
  prefetches."""
  for is_training in (True, False):
    dataset = input_pipeline.pretraining_dataset(ORIGINAL_RECORDS, 128, 20, 4,
                                                 is_training=is_training)
    assert dataset.options().autotune.enabled is False
    assert "Prefetch" in type(dataset._input_dataset).__name__  # pylint: disable=protected-access


def test_token_ids_outside_the_model_vocab_fail_naming_the_flags(tmp_path):
  """Records made with a larger vocab than the model's: the batch that holds such an id fails
  in the input pipeline (a GPU's embedding lookup would read zeros for it), naming
  --input_file and --bert_config_file; ids within the vocab pass as they are."""
  path = str(tmp_path / "part.tfrecord")
  write_numbered_records(path, 0, 8)  # input ids up to 1007
  inside = input_pipeline.pretraining_dataset(path, SMALL_SEQ, SMALL_PRED, batch_size=4,
                                              is_training=False, vocab_size=1008)
  assert numbers(inside) == list(range(8))
  outside = input_pipeline.pretraining_dataset(path, SMALL_SEQ, SMALL_PRED, batch_size=4,
                                               is_training=False, vocab_size=1006)
  iterator = iter(outside)
  next(iterator)  # ids up to 1003
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"--input_file={re.escape(path)}: a record holds a token id outside "
                           r"\[0, 1006\), the vocab_size of --bert_config_file.*1007") as raised:
    next(iterator)
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  assert cli.describe_failure(raised.value) == (
      f"--input_file={path}: a record holds a token id outside [0, 1006), the vocab_size of "
      "--bert_config_file: the data was made with a larger vocab than the model; the largest id "
      "in the batch is 1007")
