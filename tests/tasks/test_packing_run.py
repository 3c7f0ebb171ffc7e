"""--packing in the fine-tuning runs: the batches hold the unpacked run's examples (exact), the
trained weights, eval results and prediction files equal the unpacked run's, and static packing
trains on a fixed number of rows.

Data: tests/data/classifier/source (real sentences; tests/data/README.md).
"""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import row_packing
from bert_tf.model import checkpoints
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import start as start_lib
from bert_tf.tasks.classifier import data as classifier_data
from bert_tf.tasks.classifier import run as cr
from bert_tf.training import bucketing
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows
from bert_tf.training import record_files
from bert_tf.training.errors import TrainingError
from bert_tf.tasks.squad import head as squad_head
from tests.tasks.classifier.test_run import CONFIG, source_settings

NO_DROPOUT = dataclasses.replace(CONFIG, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)


def _classifier_dataset(path, max_seq_length, batch_size, is_training, **options):
  spec = input_pipeline.parsing_spec(classifier_data.record_spec(max_seq_length))
  return input_pipeline.record_dataset(path, spec, batch_size, is_training, **options)


def _write_source_records(tmp_path, max_seq_length=32):
  """The source task's training examples as the original's records; (path, count)."""
  settings = source_settings(tmp_path / "unused", max_seq_length=max_seq_length)
  inputs = cr.TASK.read(settings, start_lib.find_start(settings), None)
  from bert_tf.tokenization import FullTokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = FullTokenizer(settings.vocab_file, do_lower_case=True)
  path = str(tmp_path / "train.tf_record")
  count = classifier_data.file_based_convert_examples_to_features(
      inputs.data["train"], inputs.data["labels"], max_seq_length, tokenizer, path)
  return path, count


def _examples_of(batch):
  """The set of (tokens, label) of the real examples of a batch, packed or not."""
  ids, mask = batch["input_word_ids"].numpy(), batch["input_mask"].numpy()
  labels = batch["label_ids"].numpy().reshape(-1)
  weights = batch["is_real_example"].numpy().reshape(-1)
  found = []
  if row_packing.CLS_POSITIONS not in batch:
    for i in range(len(ids)):
      if weights[i]:
        found.append((tuple(ids[i][mask[i] > 0]), int(labels[i])))
    return sorted(found)
  cls = batch[row_packing.CLS_POSITIONS].numpy()
  k = cls.shape[1]
  for slot in np.flatnonzero(weights):
    r, j = divmod(slot, k)
    found.append((tuple(ids[r][mask[r] == j + 1]), int(labels[slot])))
  return sorted(found)


def test_exact_batches_hold_the_unpacked_examples_in_fewer_rows(tmp_path):
  path, count = _write_source_records(tmp_path)
  def batches(packing, buckets):
    return list(_classifier_dataset(
        path, 32, 16, is_training=True, seed=5, length_buckets=buckets,
        packing=packing).take(6))
  plain = batches(None, None)
  packed = batches(packed_rows.Packing(row_packing.EXACT), (8, 16, 24, 32))
  rows = []
  for a, b in zip(plain, packed):
    assert _examples_of(a) == _examples_of(b)
    assert len(_examples_of(b)) == 16
    rows.append(b["input_word_ids"].shape[0])
    assert rows[-1] in row_packing.row_ladder(16)
    assert b["input_word_ids"].shape[1] in (8, 16, 24, 32)  # cut to a bucket
  assert max(rows) < 16  # short sentences share rows
  real = sum(int((b["input_mask"].numpy() > 0).sum()) for b in packed)
  computed = sum(b["input_mask"].shape[0] * b["input_mask"].shape[1] for b in packed)
  assert real / computed > 0.75
  assert count == 360


def test_eval_batches_packed_keep_every_example_once(tmp_path):
  path, count = _write_source_records(tmp_path)
  batches = list(_classifier_dataset(
      path, 32, 7, is_training=False, num_examples=count,
      packing=packed_rows.Packing(row_packing.EXACT)))
  assert len(batches) == input_pipeline.eval_steps(count, 7)
  index = np.concatenate([b[record_files.EXAMPLE_INDEX].numpy() for b in batches])
  assert sorted(index[index >= 0]) == list(range(count))


def test_static_batches_have_one_shape_and_the_batch_on_average(tmp_path):
  path, count = _write_source_records(tmp_path)
  counts = bucketing.length_counts(path, 32)
  rows = row_packing.static_rows(counts, 16, 32)
  packing = packed_rows.Packing(row_packing.STATIC, rows=rows)
  batches = list(_classifier_dataset(path, 32, 16, is_training=True, seed=1,
                                     packing=packing).take(40))
  shapes = {tuple(b["input_word_ids"].shape) for b in batches}
  assert shapes == {(rows, 32)}
  per_step = [int(b["is_real_example"].numpy().sum()) for b in batches]
  assert 12 <= np.mean(per_step) <= 20  # 16 on average, up to the estimate's sampling
  assert batches[0]["label_ids"].shape == (rows * row_packing.MAX_EXAMPLES_PER_ROW,)


def test_packing_flag_checks():
  settings = source_settings("/tmp/unused", packing="tight")
  with pytest.raises(TrainingError, match="--packing must be one of"):
    settings.check(CONFIG)
  settings = source_settings("/tmp/unused", packing="exact", group_by_length=True)
  with pytest.raises(TrainingError, match="--group_by_length does not apply"):
    settings.check(CONFIG)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The source task trained one epoch (22 steps, dropout off) unpacked, exact and static."""
  out = {}
  for mode in ("none", "exact", "static"):
    settings = source_settings(tmp_path_factory.mktemp(f"packing_{mode}"), packing=mode)
    out[mode] = (settings, cr.run_classifier(NO_DROPOUT, settings))
  return out


@pytest.mark.slow
def test_exact_packing_trains_evaluates_and_predicts_as_unpacked(runs):
  (plain_settings, plain), (exact_settings, exact) = runs["none"], runs["exact"]
  assert exact["global_step"] == plain["global_step"] == 22
  # The run returns the unpacked model (the encoder's inputs) holding the trained weights.
  assert sorted(exact["model"].input) == ["input_mask", "input_type_ids", "input_word_ids"]
  a = checkpoints.get_original_weights(plain["model"])
  b = checkpoints.get_original_weights(exact["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], atol=2e-5, rtol=1e-4, err_msg=name)
  for key in ("eval_accuracy", "eval_loss", "loss"):
    assert exact[key] == pytest.approx(plain[key], abs=1e-5)
  lines = {}
  for settings in (plain_settings, exact_settings):
    with open(os.path.join(settings.output_dir, "test_predictions.tsv")) as f:
      lines[settings.packing] = [line.split("\t") for line in f]
  assert [row[:2] for row in lines["exact"]] == [row[:2] for row in lines["none"]]
  np.testing.assert_allclose(np.array([row[2:] for row in lines["exact"][1:]], float),
                             np.array([row[2:] for row in lines["none"][1:]], float),
                             atol=1e-5)


@pytest.mark.slow
def test_static_packing_trains_the_same_steps(runs):
  settings, static = runs["static"]
  assert static["global_step"] == 22
  assert np.isfinite(static["eval_loss"])
  # Predictions through exact-packed eval batches cover every test example.
  with open(os.path.join(settings.output_dir, "test_predictions.tsv")) as f:
    assert len(f.readlines()) == 1 + 60


@pytest.mark.slow
def test_exact_packing_tags_as_unpacked(tmp_path):
  """run_ner two epochs (dropout off): the same weights and prediction files packed or not."""
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  from tests.tasks.tagging import test_run as tr  # pylint: disable=g-import-not-at-top
  config = dataclasses.replace(tr.CONFIG, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
  results = {}
  for mode in ("none", "exact"):
    results[mode] = tagging_run.run_ner(config, tr.settings(
        tmp_path / mode, do_train=True, do_eval=True, packing=mode, num_train_epochs=2.0))
  a = checkpoints.get_original_weights(results["none"]["model"])
  b = checkpoints.get_original_weights(results["exact"]["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], atol=1e-4, rtol=1e-3, err_msg=name)
  assert results["exact"]["eval"]["f1"] == results["none"]["eval"]["f1"]
  with open(tmp_path / "none" / "eval_predictions.txt") as f:
    plain = f.read()
  with open(tmp_path / "exact" / "eval_predictions.txt") as f:
    assert f.read() == plain


def test_packed_span_loss_is_the_unpacked_loss_with_padding_masked():
  """SQuAD's softmax over a packed window's own positions equals the unpacked model's softmax
  with the padding positions masked out (not the original's, which includes them)."""
  from bert_tf.tasks.squad import loss as squad  # pylint: disable=g-import-not-at-top
  from tests.model import test_packed_rows as tp  # pylint: disable=g-import-not-at-top
  plain = squad_head.build_span_model(tp.CONFIG)
  packed = squad_head.build_span_model(tp.CONFIG, packed=True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(plain), "plain")
  lengths = [12, 32, 5, 20, 9, 1]
  features = tp._examples(lengths, seed=4)
  rng = np.random.default_rng(4)
  starts = np.array([int(rng.integers(0, n)) for n in lengths], np.int32)
  ends = np.array([int(rng.integers(s, n)) for s, n in zip(starts, lengths)], np.int32)
  unique_ids = np.arange(1000000000, 1000000000 + len(lengths), dtype=np.int32)
  rows = row_packing.pack_arrays(features, dict(unique_ids=unique_ids, start_positions=starts,
                                                end_positions=ends), tp.SEQ, rows=5)
  batch = {k: tf.constant(v) for k, v in rows.items()}
  outputs = packed(squad.model_inputs(batch))
  normalizers = squad.normalizers(batch)
  assert float(normalizers["examples"]) == len(lengths)
  loss, sums = squad.replica_loss(outputs, batch, normalizers, 999)
  # The reference: the unpacked logits, softmax over each window's real positions only.
  reference = plain(features)
  expected = 0.0
  for side, gold in (("start", starts), ("end", ends)):
    logits = reference[f"{side}_logits"].numpy().astype(np.float64)
    for i, n in enumerate(lengths):
      row = logits[i, :n]
      expected += np.log(np.exp(row - row.max()).sum()) + row.max() - row[gold[i]]
  expected /= 2 * len(lengths)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(sums["examples"]) == len(lengths)
  # The original's unmasked softmax differs: the padding positions count there.
  original = squad.replica_loss(reference, dict(features, start_positions=starts,
                                                end_positions=ends), {}, len(lengths))[0]
  assert abs(float(original) - expected) > 1e-3


@pytest.mark.slow
def test_packed_squad_predictions_equal_unpacked(tmp_path):
  """The same weights predict the same answers with packed eval batches (the logits at every
  real position agree; padding positions are never answers)."""
  import json  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  from tests.tasks.squad import test_run as sq  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(3)
  weights = str(tmp_path / "span.keras")  # a span model's weights (random: any will do)
  squad_head.build_span_model(sq.CONFIG).save(weights)
  answers = {}
  for mode in ("none", "exact"):
    squad_run.run_squad(sq.CONFIG, sq.squad_settings(
        tmp_path / mode, do_train=False, init_checkpoint=weights, packing=mode))
    with open(tmp_path / mode / "predictions.json") as f:
      answers[mode] = json.load(f)
  assert len(answers["none"]) == 120
  assert answers["exact"] == answers["none"]


def test_auto_packing_is_resolved_per_task_and_device():
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  settings = source_settings("/tmp/unused")
  assert settings.packing == "auto"
  # Tasks that pack exactly: decided from the training records' lengths (packing_for_records).
  assert fine_tuning.resolved_packing(cr.TASK, settings).packing == "auto"
  assert fine_tuning.resolved_packing(tagging_run.TASK, settings).packing == "auto"
  assert fine_tuning.resolved_packing(squad_run.TASK, settings).packing == "none"
  for change in (dict(use_tpu=True), dict(jit_compile=True), dict(group_by_length=True)):
    assert fine_tuning.resolved_packing(
        cr.TASK, dataclasses.replace(settings, **change)).packing == "none", change
  assert fine_tuning.resolved_packing(
      cr.TASK, dataclasses.replace(settings, packing="static", use_tpu=True)).packing == "static"


def _mask_records(path, lengths, max_seq_length, sequences=1):
  """Records holding only an input_mask: `sequences` sequences of each length in `lengths`."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for length in lengths:
      mask = ([1] * length + [0] * (max_seq_length - length)) * sequences
      feature = {"input_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=mask))}
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=feature)).SerializeToString())
  return str(path)


def test_auto_packing_packs_only_batches_that_packing_makes_smaller(tmp_path):
  settings = dataclasses.replace(source_settings("/tmp/unused"), max_seq_length=64,
                                 train_batch_size=16, length_buckets="none")
  rng = np.random.default_rng(0)
  short = _mask_records(tmp_path / "short", rng.integers(8, 20, 200), 64)
  assert fine_tuning.packing_for_records(settings, short, 1).packing == "exact"
  # Four choices of ~50 tokens each in rows of 64: one a row, packed or not.
  pairs = _mask_records(tmp_path / "pairs", rng.integers(45, 64, 200), 64, sequences=4)
  assert bucketing.sequences_per_record(pairs, 64) == 4
  assert fine_tuning.packing_for_records(settings, pairs, 1).packing == "none"
  assert fine_tuning.packing_for_records(settings, None, 1).packing == "exact"  # nothing to measure
  # Choices counted each at its own length: pairs of 25-63 tokens (the multiple-choice
  # benchmark's) pack below 90% at 64 only where enough of them are short.
  mixed = _mask_records(tmp_path / "mixed", rng.integers(25, 64, 200), 64, sequences=4)
  assert fine_tuning.packing_for_records(settings, mixed, 1).packing == "exact"
  for mode in ("none", "exact", "static"):  # only auto is decided here
    fixed = dataclasses.replace(settings, packing=mode)
    assert fine_tuning.packing_for_records(fixed, pairs, 1).packing == mode
