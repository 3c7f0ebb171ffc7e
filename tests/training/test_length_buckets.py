"""Length-aware batches (--length_buckets, --group_by_length): the boundaries, the cut, the
length-grouped training order, and the model outputs, which must not change."""

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import length_buckets
from bert_tf.training import evaluation, loop
from bert_tf.training import bucketing
from bert_tf.training import input_pipeline
from bert_tf.training import record_files
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

SEQ = 64
BUCKETS = length_buckets.parse("auto", SEQ)


# === The boundaries ===


def test_auto_boundaries_are_a_small_ladder_ending_at_max_seq_length():
  assert length_buckets.auto_buckets(128) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128)
  assert length_buckets.auto_buckets(384) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128,
                                              160, 192, 224, 256, 320, 384)
  assert len(length_buckets.auto_buckets(512)) == 20
  assert length_buckets.auto_buckets(100) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 100)
  assert length_buckets.auto_buckets(8) == (8,)
  assert length_buckets.auto_buckets(5) == (5,)
  assert BUCKETS == (8, 16, 24, 32, 40, 48, 56, 64)


def test_flag_values():
  assert length_buckets.parse("none", 128) is None
  assert length_buckets.parse(None, 128) is None
  assert length_buckets.parse("AUTO", 128) == length_buckets.auto_buckets(128)
  assert length_buckets.parse("64, 32", 128) == (32, 64, 128)
  assert length_buckets.parse("128", 128) == (128,)
  # TPUs: one static shape.
  assert length_buckets.parse("auto", 128, use_tpu=True) is None
  with pytest.raises(length_buckets.LengthBucketsError, match="--length_buckets=32,64: TPUs"):
    length_buckets.parse("32,64", 128, use_tpu=True)
  with pytest.raises(length_buckets.LengthBucketsError, match=r"'x' is not a length"):
    length_buckets.parse("32,x", 128)
  with pytest.raises(length_buckets.LengthBucketsError, match=r"256 is outside 1\.\.128"):
    length_buckets.parse("32,256", 128)
  assert length_buckets.bucket_for(17, (16, 32, 64)) == 32
  assert length_buckets.bucket_for(16, (16, 32, 64)) == 16
  assert length_buckets.bucket_for(99, (16, 32, 64)) == 64


# === Boundaries fitted to a record file ('auto' for its batches) ===


def _brute_force_width(distribution, max_seq_length, max_boundaries):
  """The least expected width over every set of at most max_boundaries boundaries that ends at
  max_seq_length."""
  lengths = range(1, max_seq_length)
  best = float("inf")
  for k in range(max_boundaries):
    for chosen in itertools.combinations(lengths, k):
      best = min(best, length_buckets.expected_width(distribution,
                                                     tuple(chosen) + (max_seq_length,)))
  return best


@pytest.mark.parametrize("seed", range(12))
def test_fitted_boundaries_are_the_best_few_for_the_batches_longest_rows(seed):
  rng = np.random.default_rng(seed)
  seq = int(rng.integers(6, 13))
  counts = [0] * (seq + 1)
  for length in rng.integers(0, seq + 1, int(rng.integers(1, 40))):
    counts[int(length)] += 1
  rows = int(rng.choice([1, 2, 4, 32]))
  k = int(rng.integers(1, 4))
  fitted = length_buckets.fit_buckets(counts, rows, seq, max_boundaries=k)
  assert fitted[-1] == seq and list(fitted) == sorted(set(fitted)) and len(fitted) <= k
  distribution = length_buckets.batch_longest_distribution(counts, rows)
  best = _brute_force_width(distribution, seq, k)
  width = length_buckets.expected_width(distribution, fitted)
  assert width <= best * (1 + length_buckets.FIT_TOLERANCE) + 1e-9
  # No fit with fewer boundaries is within the tolerance (the fewest programs).
  if len(fitted) > 1:
    assert _brute_force_width(distribution, seq, len(fitted) - 1) > best * (
        1 + length_buckets.FIT_TOLERANCE)


def test_the_longest_row_distribution_and_fitted_boundaries_by_hand():
  # Rows of length 2 and 4, one each: the longest of two rows drawn at random is 2 with
  # chance 1/4, 4 with 3/4.
  counts = [0, 0, 1, 0, 1, 0, 0, 0, 0]
  assert length_buckets.batch_longest_distribution(counts, 2) == [0, 0, 0.25, 0, 0.75, 0, 0,
                                                                  0, 0]
  # Two boundaries: 2 and 8 (1.5 + 6 = 7.5 positions) lose to 4 and 8 (4); one boundary: 8.
  assert length_buckets.fit_buckets(counts, 2, 8, max_boundaries=2) == (4, 8)
  assert length_buckets.fit_buckets(counts, 2, 8, max_boundaries=3) == (2, 4, 8)
  assert length_buckets.fit_buckets(counts, 2, 8, max_boundaries=1) == (8,)
  # Every row of one length: that length and max_seq_length.
  assert length_buckets.fit_buckets([0] * 20 + [5] + [0] * 107, 32, 127) == (20, 127)
  # On GPUs the boundaries are multiples of 8 (and max_seq_length).
  assert length_buckets.fit_buckets([0] * 20 + [5] + [0] * 107, 32, 127, multiple=8) == (24,
                                                                                        127)
  # A file without rows: the ladder.
  assert length_buckets.fit_buckets([0] * 129, 32, 128) == length_buckets.auto_buckets(128)
  with pytest.raises(ValueError, match="expected max_seq_length \\+ 1 = 129"):
    length_buckets.fit_buckets([1] * 10, 32, 128)


def test_fitted_boundaries_of_random_batches_of_short_rows_beat_the_ladder():
  # Sentences of 5..38 positions (CoNLL-like), batches of 32: the longest row is almost always
  # 35-38, where a few boundaries sit; the ladder pays for 40.
  counts = [0] * 129
  for length in np.random.default_rng(0).integers(5, 39, 5000):
    counts[int(length)] += 1
  fitted = length_buckets.fit_buckets(counts, 32, 128)
  distribution = length_buckets.batch_longest_distribution(counts, 32)
  exact = sum(length * p for length, p in enumerate(distribution))
  assert len(fitted) <= length_buckets.FIT_BOUNDARIES and fitted[-1] == 128
  assert length_buckets.expected_width(distribution, fitted) < exact + 0.7
  assert length_buckets.expected_width(distribution, length_buckets.auto_buckets(128)) > (
      exact + 2)


def test_length_counts_of_a_record_file(tmp_path):
  lengths = _lengths(45)
  _write_records(tmp_path / "r.tfrecord", lengths)
  counts = bucketing.length_counts(str(tmp_path / "r.tfrecord"), SEQ)
  assert counts == np.bincount(lengths, minlength=SEQ + 1).tolist()
  fitted = bucketing.fitted_buckets(str(tmp_path / "r.tfrecord"), SEQ, 8)
  assert fitted == length_buckets.fit_buckets(counts, 8, SEQ)


# === The cut ===


def _rows(lengths, seq=SEQ, seed=0):
  """Records-like rows: [CLS]-ish ids for the first `length` positions, zeros after."""
  rng = np.random.default_rng(seed)
  ids = np.zeros([len(lengths), seq], np.int32)
  mask = np.zeros([len(lengths), seq], np.int32)
  types = np.zeros([len(lengths), seq], np.int32)
  for i, length in enumerate(lengths):
    ids[i, :length] = rng.integers(5, helpers.VOCAB, length)
    mask[i, :length] = 1
    types[i, length // 2:length] = 1
  return ids, mask, types


def test_a_batch_is_cut_to_its_longest_row_rounded_up_to_a_boundary():
  for lengths, width in (([3, 17, 5], 24), ([16, 2], 16), ([SEQ, 1], SEQ), ([33], 40),
                         ([0, 0], 8)):
    ids, mask, types = _rows(lengths)
    batch = dict(input_word_ids=ids, input_mask=mask, input_type_ids=types,
                 label_ids=np.arange(len(lengths)), label_mask=mask * 2)
    cut = bucketing.cut_to_bucket(
        {k: tf.constant(v) for k, v in batch.items()}, BUCKETS)
    assert cut["input_word_ids"].shape == (len(lengths), width)
    for key in ("input_word_ids", "input_mask", "input_type_ids", "label_mask"):
      np.testing.assert_array_equal(cut[key].numpy(), batch[key][:, :width])
      # Only padding went.
      assert not batch["input_mask"][:, width:].any()
    np.testing.assert_array_equal(cut["label_ids"].numpy(), batch["label_ids"])


def test_the_real_length_is_the_last_real_position_not_the_count():
  mask = tf.constant([[1, 1, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(bucketing.real_length(mask).numpy(), [4, 1, 0])


def _write_records(path, lengths, seed=0):
  ids, mask, types = _rows(lengths, seed=seed)
  spec = {}
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i in range(len(lengths)):
      feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=values[i]))
                 for name, values in (("input_ids", ids), ("input_mask", mask),
                                      ("segment_ids", types), ("label_mask", mask))}
      feature["label_ids"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
      feature["is_real_example"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())
  ids_spec = tf.io.FixedLenFeature([SEQ], tf.int64)
  spec = dict(input_ids=ids_spec, input_mask=ids_spec, segment_ids=ids_spec,
              label_mask=ids_spec, label_ids=tf.io.FixedLenFeature([], tf.int64),
              is_real_example=tf.io.FixedLenFeature([], tf.int64))
  return spec


def _lengths(count, seed=1):
  rng = np.random.default_rng(seed)
  # Short rows with a few full-length ones (pairs truncated at max_seq_length) and rows of
  # exactly a boundary's length.
  lengths = list(rng.integers(3, 40, count))
  lengths[::7] = [SEQ] * len(lengths[::7])
  lengths[3::11] = [16] * len(lengths[3::11])
  lengths[5::13] = [32] * len(lengths[5::13])
  return [int(n) for n in lengths]


def test_eval_batches_hold_the_same_examples_in_order_cut_to_their_bucket(tmp_path):
  lengths = _lengths(45)
  spec = _write_records(tmp_path / "r.tfrecord", lengths)
  args = (str(tmp_path / "r.tfrecord"), spec, 8, False)
  full = list(input_pipeline.record_dataset(*args, num_examples=45))
  cut = list(input_pipeline.record_dataset(*args, num_examples=45, length_buckets=BUCKETS))
  assert len(full) == len(cut) == 6
  for a, b in zip(full, cut):
    width = b["input_word_ids"].shape[1]
    longest = int(a["input_mask"].numpy().sum(axis=1).max())
    assert width == length_buckets.bucket_for(max(longest, 1), BUCKETS)
    for key in a:
      np.testing.assert_array_equal(b[key].numpy(), a[key].numpy()[..., :width]
                                    if a[key].shape.rank == 2 else a[key].numpy())


def test_fine_tuning_pipelines_turn_tf_datas_autotuning_model_off(tmp_path):
  """As the pretraining pipeline (record_files.prefetched): training, grouped and
  eval/predict datasets alike."""
  spec = _write_records(tmp_path / "r.tfrecord", _lengths(20))
  path = str(tmp_path / "r.tfrecord")
  for dataset in (input_pipeline.record_dataset(path, spec, 4, True, seed=1),
                  input_pipeline.record_dataset(path, spec, 4, True, seed=1,
                                                length_buckets=BUCKETS, group_by_length=True),
                  input_pipeline.record_dataset(path, spec, 4, False, num_examples=20)):
    assert dataset.options().autotune.enabled is False
    next(iter(dataset))


def _training_examples(dataset, batches):
  """(label id, width) of each example of the first `batches` batches."""
  out = []
  for batch in dataset.take(batches):
    width = batch["input_word_ids"].shape[1]
    out += [(int(i), width) for i in batch["label_ids"].numpy()]
  return out


def test_grouped_training_batches_cover_every_example_once_and_are_seeded(tmp_path):
  count, batch = 200, 4
  lengths = _lengths(count)
  spec = _write_records(tmp_path / "r.tfrecord", lengths)
  window = batch * bucketing.GROUP_WINDOW_BATCHES

  def dataset(seed, group, buckets=BUCKETS):
    return input_pipeline.record_dataset(
        str(tmp_path / "r.tfrecord"), spec, batch, True, seed=seed, shuffle_buffer_size=count,
        length_buckets=buckets, group_by_length=group)

  assert window == count
  # Each epoch of the stream (here one window) holds every example exactly once.
  grouped = _training_examples(dataset(7, True), 3 * count // batch)
  for epoch in range(3):
    part = grouped[epoch * count:(epoch + 1) * count]
    assert collections.Counter(i for i, _ in part) == collections.Counter(range(count))
  # Each batch is cut to its bucket, and grouping computes fewer positions than the plain
  # shuffle with the same buckets.
  plain = _training_examples(dataset(7, False), 3 * count // batch)
  assert sum(width for _, width in grouped) < 0.8 * sum(width for _, width in plain)
  for start in range(0, len(grouped), batch):
    members = grouped[start:start + batch]
    width = members[0][1]
    assert width == length_buckets.bucket_for(max(lengths[i] for i, _ in members), BUCKETS)
  # Seeded: the same order again (resume-by-skip replays it); another seed, another order.
  assert _training_examples(dataset(7, True), 30) == grouped[:30 * batch]
  assert _training_examples(dataset(7, True).skip(10), 5) == grouped[40:60]
  assert _training_examples(dataset(8, True), 30) != grouped[:30 * batch]
  # An update's examples do not depend on its split into micro-batches (or replicas).
  split = input_pipeline.record_dataset(
      str(tmp_path / "r.tfrecord"), spec, batch // 2, True, seed=7, shuffle_buffer_size=count,
      length_buckets=BUCKETS, group_by_length=True, batches_per_update=2)
  assert [i for i, _ in _training_examples(split, 40)] == [i for i, _ in grouped[:80]]
  # Without buckets, grouping keeps the static length.
  assert {w for _, w in _training_examples(dataset(7, True, None), 10)} == {SEQ}


def test_grouped_batches_are_random_samples_of_a_bucket_not_runs_of_one_paragraph(tmp_path):
  """SQuAD-like files hold runs of examples of one exact length (a paragraph's windows, one per
  question) in file order. A grouped batch must be a random sample of its length bucket: with
  the original's shuffle buffer of 100 and a sort by exact length, a batch held one paragraph's
  windows (dev F1 of the MiniLM SQuAD test fell from 44 to 3.6)."""
  paragraphs, questions, batch = 25, 10, 5  # one window of 50 batches is one epoch
  # Paragraph p's windows all have length 41 + p % 8: every one in the bucket 48 of BUCKETS.
  lengths = [41 + p % 8 for p in range(paragraphs) for _ in range(questions)]
  spec = _write_records(tmp_path / "r.tfrecord", lengths)
  dataset = input_pipeline.record_dataset(
      str(tmp_path / "r.tfrecord"), spec, batch, True, seed=3, shuffle_buffer_size=100,
      length_buckets=BUCKETS, group_by_length=True)
  examples = _training_examples(dataset, 2 * paragraphs * questions // batch)
  assert {width for _, width in examples} == {48}
  # Each epoch holds every example once.
  for epoch in range(2):
    part = examples[epoch * len(lengths):(epoch + 1) * len(lengths)]
    assert sorted(i for i, _ in part) == list(range(len(lengths)))
  # Distinct paragraphs per batch: a random draw of 5 of the 250 windows (10 per paragraph)
  # has 4.6 on average; one paragraph per batch would be 1.
  per_batch = [len({examples[k][0] // questions for k in range(start, start + batch)})
               for start in range(0, len(examples), batch)]
  assert np.mean(per_batch) > 4.0, per_batch


# === Outputs do not change ===


def _predictions(build_model, path, spec, buckets, batch_size, count, keep=()):
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  tf.keras.utils.set_random_seed(3)
  with strategy.scope():
    model = build_model()
  trainer = loop.Trainer(strategy, model, keras_optimizer(), TASK, batch_size)

  def dataset_fn(ctx):
    return input_pipeline.record_dataset(path, spec, batch_size, False, ctx, num_examples=count,
                                         length_buckets=buckets)

  iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
  return evaluation.predict(trainer, iterator, input_pipeline.eval_steps(count, batch_size),
                      keep=keep, sequence_length=SEQ)


def keras_optimizer():
  import keras  # pylint: disable=g-import-not-at-top
  return keras.optimizers.SGD()


TASK = loop.Task(model_inputs=lambda batch: {k: batch[k] for k in
                                             ("input_word_ids", "input_mask", "input_type_ids")},
                 normalizers=None, replica_loss=None, sum_names=(), train_metrics=None,
                 eval_sums=None, eval_results=None)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classifier", "span", "tagger"])
def test_outputs_with_length_buckets_equal_those_at_full_padding(tmp_path, task):
  config = helpers.tiny_config(max_position_embeddings=SEQ)
  build = {"classifier": lambda: classifier_head.build_classifier_model(config, 3),
           "span": lambda: squad_head.build_span_model(config),
           "tagger": lambda: tagging_head.build_tagger_model(config, 5)}[task]
  lengths = _lengths(27)
  path = str(tmp_path / "r.tfrecord")
  spec = _write_records(path, lengths)
  full = _predictions(build, path, spec, None, 8, 27, keep=("input_mask",))
  cut = _predictions(build, path, spec, BUCKETS, 8, 27, keep=("input_mask",))
  assert set(full) == set(cut)
  np.testing.assert_array_equal(full["example_index"], np.arange(27))
  np.testing.assert_array_equal(cut["example_index"], np.arange(27))
  mask = full["input_mask"].astype(bool)
  for key, value in full.items():
    if key in ("example_index", "input_mask"):
      continue
    assert cut[key].shape == value.shape, key
    if value.ndim >= 2 and value.shape[1] == SEQ:
      # Per-position outputs: equal at every real position; padding positions hold
      # PADDED_LOGIT where the batch was cut.
      np.testing.assert_allclose(cut[key][mask], value[mask], rtol=1e-5, atol=1e-5)
      cut_off = cut[key][~mask]
      assert np.all((cut_off == input_pipeline.PADDED_LOGIT)
                    | np.isclose(cut_off, value[~mask], atol=1e-5))
    else:
      np.testing.assert_allclose(cut[key], value, rtol=1e-5, atol=1e-5)


# === Training on cut batches ===


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_training_on_cut_batches_traces_once_and_gives_the_full_length_updates(
    tmp_path, jit_compile):
  """The classifier's loss reads only the pooled output, so an update on batches cut to their
  buckets equals the update at full padding; the step is traced once whatever the lengths
  (XLA then compiles one program per bucket met, at most len(BUCKETS)). Under XLA, for the
  suite's time (each program is a compile of the whole step), the buckets are two, the batches
  not grouped by length (a grouping by other buckets would batch other examples together) and
  the full-length reference is trained without XLA."""
  from bert_tf.tasks.classifier import loss as classifier  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  config = helpers.tiny_config(max_position_embeddings=SEQ)
  lengths = _lengths(64, seed=4)
  path = str(tmp_path / "r.tfrecord")
  spec = _write_records(path, lengths)
  spec["label_ids"] = spec["label_ids"]
  weights = {}
  cut = (40, SEQ) if jit_compile else BUCKETS
  for buckets in (None, cut):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    tf.keras.utils.set_random_seed(5)
    with strategy.scope():
      model = classifier_head.build_classifier_model(config, 64)
      optimizer = optimization.create_optimizer("adamw", 1e-3, 8, 1)
      optimizer.build(model.trainable_variables)
    trainer = loop.Trainer(strategy, model, optimizer, classifier.TASK, 8,
                           jit_compile=jit_compile and buckets is not None)
    def dataset():
      return input_pipeline.record_dataset(path, spec, 8, True, seed=1, shuffle_buffer_size=64,
                                           length_buckets=buckets,
                                           group_by_length=not jit_compile)
    if buckets is not None:  # the batches meet more than one shape (a dataset of their own:
      # a second pass over one dataset would be shuffled anew)
      assert len({int(b["input_word_ids"].shape[1]) for b in dataset().take(8)}) > 1
    iterator = iter(strategy.experimental_distribute_dataset(dataset()))
    steps, _, totals = trainer.train_loop(iterator, tf.constant(8))
    assert int(steps) == 8 and np.isfinite(float(totals["loss"]))
    assert trainer._replica_step.experimental_get_tracing_count() == 1
    weights[buckets] = [v.numpy() for v in model.trainable_variables]
  for a, b in zip(weights[None], weights[cut]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_commands_fit_auto_to_their_record_files_but_not_other_values(tmp_path, caplog):
  from bert_tf.tasks import common  # pylint: disable=g-import-not-at-top
  lengths = _lengths(45)
  _write_records(tmp_path / "r.tfrecord", lengths)
  path = str(tmp_path / "r.tfrecord")

  def boundaries(grouped=False, **values):
    return common.FineTuningSettings(**values).record_buckets(path, SEQ, 8, grouped=grouped)

  with caplog.at_level("INFO"):
    fitted = boundaries()
  assert fitted == length_buckets.fit_buckets(np.bincount(lengths, minlength=SEQ + 1).tolist(),
                                              8, SEQ)
  assert fitted != BUCKETS
  assert f"Length buckets fitted to {path} (45 records, batches of 8 per replica): " + (
      ",".join(map(str, fitted))) in caplog.text
  # Length-grouped batches are sorted: the ladder. Other values are taken as they are.
  assert boundaries(grouped=True) == BUCKETS
  assert boundaries(length_buckets="none") is None
  assert boundaries(length_buckets="16,48") == (16, 48, SEQ)
  assert boundaries(use_tpu=True) is None
