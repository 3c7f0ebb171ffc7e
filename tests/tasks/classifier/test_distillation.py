"""run_classifier --teacher: the distillation loss against NumPy, the teacher's guards with real
mismatched folders, its dev results first, and a distilled run that trains like the plain one
when the teacher weighs nothing.

Data: tests/data/classifier/source (real sentences; tests/data/README.md). Teachers: tiny
random classifiers written as the original's checkpoints with our task_info.json
(test_run.fine_tuned_checkpoint), so no teacher is trained here.
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.model import checkpoints
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import repeats
from bert_tf.tasks import teaching
from bert_tf.tasks.classifier import data as cd
from bert_tf.tasks.classifier import loss as classifier
from bert_tf.tasks.classifier import run as cr
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.training import evaluation
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.helpers import REPO_ROOT, subprocess_env
from tests.tasks.classifier.test_run import CONFIG, SOURCE, VOCAB, fine_tuned_checkpoint, \
    source_settings

LABELS = ("austen", "bible", "linux")


def _teacher(directory, labels=LABELS, config=CONFIG, **info):
  """A teacher: a random fine-tuned classifier (the original's checkpoint: its prefix is
  returned) with bert_config.json and task_info.json beside it."""
  os.makedirs(directory, exist_ok=True)
  prefix, _ = fine_tuned_checkpoint(directory, labels, **info)
  config.to_json_file(os.path.join(directory, "bert_config.json"))
  return prefix


# === The loss ===


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("alpha, temperature", [(0.0, 2.0), (0.3, 3.0), (1.0, 1.0)])
def test_classifier_distillation_loss_equals_numpy(alpha, temperature):
  rng = np.random.default_rng(7)
  student = rng.standard_normal([5, 3]).astype(np.float32)
  teacher = rng.standard_normal([5, 3]).astype(np.float32) * 2
  labels = np.array([0, 2, 1, 1, 0], np.int32)
  real = np.array([1, 1, 1, 0, 1], np.int32)  # a TPU padding example weighs 0
  task = classifier.distillation_task(lambda batch: {"logits": tf.constant(teacher)},
                                      temperature, alpha)
  batch = {"label_ids": tf.constant(labels), "is_real_example": tf.constant(real)}
  loss, sums = task.replica_loss({"logits": tf.constant(student)}, batch, {}, 8)
  hard = -_log_softmax(student)[np.arange(5), labels]
  soft = -(np.exp(_log_softmax(teacher / temperature))
           * _log_softmax(student / temperature)).sum(-1) * temperature ** 2
  expected = np.sum(real * (alpha * hard + (1 - alpha) * soft)) / 8
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(sums["examples"]) == 4 == float(sums["labelled"])
  assert float(sums["correct"]) == np.sum(real * (student.argmax(-1) == labels))


def test_regression_distillation_loss_is_squared_error_to_the_teacher():
  student, teacher = np.array([[0.5], [2.0]], np.float32), np.array([[1.0], [1.0]], np.float32)
  targets = np.array([0.0, 3.0], np.float32)
  task = classifier.distillation_task(lambda batch: {"logits": tf.constant(teacher)}, 5.0, 0.25,
                                      regression=True)
  loss, _ = task.replica_loss({"logits": tf.constant(student)},
                              {"label_ids": tf.constant(targets)}, {}, 2)
  expected = (0.25 * (0.25 + 1.0) + 0.75 * (0.25 + 1.0)) / 2  # no temperature for scores
  assert float(loss) == pytest.approx(expected)


# === The guards, before anything is written ===


@pytest.mark.parametrize("change, message", [
    (dict(labels=("bible", "austen", "linux")), "in another order"),
    (dict(labels=("a", "b", "c")), "has the labels ['a', 'b', 'c']"),
    (dict(vocab_md5="0" * 32), "its vocab has md5 " + "0" * 32),
    (dict(do_lower_case=False), "do_lower_case=False"),
    (dict(max_seq_length=64), "max_seq_length=64"),
    (dict(head=tagging_head.TAGGER), "has a tagger head but the student a classifier head"),
    (dict(pair=True), "it was trained on text pairs but the student trains on single texts"),
])
def test_a_teacher_that_contradicts_the_run_is_refused_before_writing(tmp_path, change,
                                                                       message):
  labels = change.pop("labels", LABELS)
  teacher = _teacher(tmp_path / "teacher", labels, **change)
  output_dir = tmp_path / "student"
  with pytest.raises(TrainingError, match="--teacher=") as error:
    cr.run_classifier(CONFIG, source_settings(output_dir, teacher=teacher))
  assert message in str(error.value) and "\n" not in str(error.value)
  # The student's side is named by where its value comes from (a flag, its data), never by a
  # task_info.json the refused run did not write.
  assert "student: " in str(error.value) and "student/task_info.json" not in str(error.value)
  assert not output_dir.exists()


def test_a_teacher_never_fine_tuned_or_unreadable_is_refused(tmp_path):
  pretrained = tmp_path / "pretrained"
  pretrained.mkdir()
  checkpoints.write_tf1_checkpoint(
      {"bert/embeddings/word_embeddings": np.zeros([4, 2], np.float32)},
      str(pretrained / "model.ckpt"))
  with pytest.raises(TrainingError, match="records no head: a teacher must be a model "
                     "fine-tuned on the student's task"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "a", teacher=str(pretrained)))
  with pytest.raises(TrainingError, match="--teacher=.* teaches a run that trains"):
    source_settings(tmp_path / "b", teacher=str(pretrained), do_train=False).check(CONFIG)
  with pytest.raises(TrainingError, match="--distill_alpha must be in"):
    source_settings(tmp_path / "c", distill_alpha=1.5).check(CONFIG)
  assert not (tmp_path / "a").exists()
  with pytest.raises(TrainingError, match="is the run's own --output_dir"):
    cr.run_classifier(CONFIG, source_settings(pretrained, teacher=str(pretrained)))
  with pytest.raises(TrainingError, match=r"--teacher=.*nowhere: no such folder, file or "
                     "checkpoint"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "a", teacher=str(tmp_path / "nowhere")))
  (tmp_path / "empty").mkdir()
  with pytest.raises(TrainingError, match=r"--teacher=.*empty is an empty folder"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "a", teacher=str(tmp_path / "empty")))
  assert not (tmp_path / "a").exists()


def test_the_teachers_step_and_cache_stamp_name_the_teacher_not_its_spelling(tmp_path,
                                                                              monkeypatch):
  assert teaching.teacher_step(str(tmp_path / "model.ckpt-1200")) == 1200
  assert teaching.teacher_step(str(tmp_path / "bert_model.ckpt")) == 0
  monkeypatch.chdir(tmp_path)
  info = dict(vocab_md5="x", labels=["a", "b"], head="classifier")
  stamps = [teaching.cache_stamp(source_settings(tmp_path / "o", teacher=path), info)
            for path in ("teacher/model.ckpt", str(tmp_path / "teacher" / "model.ckpt"))]
  assert stamps[0] == stamps[1]
  assert stamps[0]["teacher"] == str(tmp_path / "teacher" / "model.ckpt")


def test_seed_summaries_keep_the_teachers_dev_results():
  result = {"eval_accuracy": 0.5, "teacher_eval_accuracy": 0.9, "teacher_loss": 0.1,
            "label_list": ["a"], "global_step": 3}
  assert repeats._scalar_results(result) == {  # pylint: disable=protected-access
      "eval_accuracy": 0.5, "teacher_eval_accuracy": 0.9, "global_step": 3.0}


def test_a_teacher_without_its_heads_weights_is_refused(tmp_path):
  """task_info.json says classifier, but the checkpoint holds no head: refused strictly."""
  teacher = _teacher(tmp_path / "teacher")
  values = checkpoints.read_weights(teacher)
  del values["output_weights"], values["output_bias"]
  teacher = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "teacher" / "headless"))
  with pytest.raises(TrainingError, match="cannot load it as the task's model"):
    cr.run_classifier(CONFIG, source_settings(tmp_path / "student", teacher=teacher,
                                              do_predict=False))


# === Distilled runs ===

NO_DROPOUT = CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.mark.slow
def test_the_teachers_results_come_first_and_alpha_one_trains_as_without_teacher(tmp_path):
  """The teacher's dev results (teacher_*) are its own evaluation's (a run evaluating the teacher
  checkpoint); with --distill_alpha=1 the student trains exactly as a run without teacher, with
  0 it learns something else."""
  teacher = _teacher(tmp_path / "teacher")
  plain_eval = cr.run_classifier(CONFIG, source_settings(
      tmp_path / "eval_only", init_checkpoint=teacher, do_train=False, do_predict=False))
  runs = {}
  for name, extra in (("plain", {}), ("alpha1", dict(teacher=teacher, distill_alpha=1.0)),
                      ("alpha0", dict(teacher=teacher, distill_alpha=0.0))):
    runs[name] = cr.run_classifier(NO_DROPOUT, source_settings(
        tmp_path / name, do_predict=False, num_train_epochs=0.5, **extra))
  written = evaluation.read_eval_results(str(tmp_path / "alpha0" / "eval_results.txt"))
  for key in ("eval_accuracy", "eval_loss"):
    assert written[f"teacher_{key}"] == pytest.approx(plain_eval[key], rel=1e-6)
    assert runs["alpha0"][f"teacher_{key}"] == pytest.approx(plain_eval[key], rel=1e-6)
  assert written["eval_accuracy"] == pytest.approx(runs["alpha0"]["eval_accuracy"])
  assert (tmp_path / "alpha0" / "teacher" / "eval_results.txt").exists()
  plain, alpha1, alpha0 = (runs[n]["model"].get_layer("classifier").kernel.numpy()
                           for n in ("plain", "alpha1", "alpha0"))
  np.testing.assert_allclose(alpha1, plain, rtol=1e-5, atol=1e-6)
  assert np.abs(alpha0 - plain).max() > 1e-3
  # Interrupted after its step-10 checkpoint, the distilled run resumes (the teacher loaded
  # again) to the uninterrupted run's weights.
  cut = helpers.run_folder_at_step(tmp_path / "alpha0", tmp_path / "cut", 10)
  resumed = cr.run_classifier(NO_DROPOUT, source_settings(
      cut, do_predict=False, do_eval=False, num_train_epochs=0.5, teacher=teacher,
      distill_alpha=0.0))
  a = checkpoints.get_original_weights(runs["alpha0"]["model"])
  b = checkpoints.get_original_weights(resumed["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)


_MIRRORED = r"""
import json, os, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
from tests.tasks.classifier import test_distillation as t
from bert_tf.tasks.classifier import run as cr
from bert_tf.training import distribution
out = sys.argv[2]
import pathlib
teacher = t._teacher(pathlib.Path(out) / "teacher")
results = {}
for name, strategy, packing in (
    ("one", tf.distribute.OneDeviceStrategy("/cpu:0"), "none"),
    ("two_packed", distribution.select_strategy("mirrored"), "exact")):
  settings = t.source_settings(os.path.join(out, name), do_predict=False, num_train_epochs=0.5,
                               eval_batch_size=6, teacher=teacher, distill_alpha=0.3,
                               packing=packing)
  result = cr.run_classifier(t.NO_DROPOUT, settings, strategy)
  results[name] = {k: v for k, v in result.items() if k.startswith(("eval_", "teacher_"))}
json.dump(results, sys.stdout)
"""


@pytest.mark.slow
def test_two_replicas_with_packed_rows_distil_like_one_device(tmp_path):
  """Mirrored over two logical CPUs and exact packed rows: the teacher's outputs align with the
  student's slots on every replica, so training and both models' dev results are one
  device's, unpacked (dropout off)."""
  script = tmp_path / "mirrored.py"
  script.write_text(_MIRRORED)
  done = subprocess.run([sys.executable, str(script), REPO_ROOT, str(tmp_path)],
                        env=subprocess_env(), capture_output=True, text=True, timeout=900,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads(done.stdout.strip().splitlines()[-1])
  one, two = results["one"], results["two_packed"]
  assert set(one) == set(two) >= {"eval_accuracy", "teacher_eval_accuracy"}
  for key in one:
    assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-5), key


# === Transfer data: inputs without labels that only the teacher labels ===


def test_transfer_lines_are_unlabelled_examples_and_bad_ones_name_the_line(tmp_path):
  single = tmp_path / "single.txt"
  single.write_text("One sentence.\n\n  Another\tone.  \n")
  examples = cr.read_transfer_file(str(single), pair=False)
  assert [(e.text_a, e.text_b) for e in examples] == [("One sentence.", None),
                                                      ("Another\tone.", None)]
  assert all(e.label is cd.UNLABELLED for e in examples)
  with pytest.raises(TrainingError, match=r"single.txt:1: a pair task's transfer line"):
    cr.read_transfer_file(str(single), pair=True)
  pairs = tmp_path / "pairs.txt"
  pairs.write_text("A one.\tB one.\n")
  assert [(e.text_a, e.text_b) for e in cr.read_transfer_file(str(pairs), pair=True)] == [
      ("A one.", "B one.")]
  with pytest.raises(TrainingError, match="add --teacher"):
    source_settings(tmp_path, transfer_file=str(single)).check(CONFIG)


def test_transfer_examples_train_on_the_soft_targets_only():
  """Label id -1 (a transfer example): no hard loss, no metric sum; its soft loss counts."""
  rng = np.random.default_rng(2)
  student, teacher = rng.standard_normal([2, 3, 3]).astype(np.float32)
  task = classifier.distillation_task(lambda batch: {"logits": tf.constant(teacher)}, 1.0, 0.5)
  batch = {"label_ids": tf.constant([2, -1, 0]), "is_real_example": tf.constant([1, 1, 1])}
  loss, sums = task.replica_loss({"logits": tf.constant(student)}, batch, {}, 3)
  hard = -_log_softmax(student)[[0, 2], [2, 0]]
  soft = -(np.exp(_log_softmax(teacher)) * _log_softmax(student)).sum(-1)
  assert float(loss) == pytest.approx((0.5 * hard.sum() + 0.5 * soft.sum()) / 3, rel=1e-5)
  assert float(sums["examples"]) == 3 and float(sums["labelled"]) == 2
  correct = float(np.sum(student[[0, 2]].argmax(-1) == [2, 0]))
  assert float(sums["correct"]) == correct
  assert task.train_metrics(dict(sums, loss=1.0), 1)["accuracy"] == correct / 2


@pytest.mark.slow
def test_a_run_with_transfer_data_counts_its_examples_in_the_steps(tmp_path):
  """Training records hold the labelled examples, then the transfer examples, then the altered
  copies of --distill_augment (those two with label id -1), packed rows included; the steps
  are counted over all; a resume with another transfer file, or other copies, is refused."""
  teacher = _teacher(tmp_path / "teacher")
  transfer = tmp_path / "transfer.txt"
  transfer.write_text("".join(f"Sentence number {i} of the transfer set.\n" for i in range(40)))
  settings = source_settings(tmp_path / "student", do_eval=False, do_predict=False,
                             num_train_epochs=0.25, teacher=teacher, transfer_file=str(transfer),
                             distill_augment=1, packing="exact")
  result = cr.run_classifier(CONFIG, settings)
  assert result["num_train_steps"] == result["global_step"] == int((360 + 40 + 360) / 16 * 0.25)
  records = [tf.train.Example.FromString(r.numpy()).features.feature
             for r in tf.data.TFRecordDataset(str(tmp_path / "student" / "train.tf_record"))]
  labels = [int(r["label_ids"].int64_list.value[0]) for r in records]
  assert labels[:360].count(-1) == 0 and labels[360:] == [-1] * 400
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  copies = cr.altered_copies(cr.make_processor(settings).get_train_examples(SOURCE), settings)
  assert len(copies) == 360  # one each: the source sentences are long enough
  first = list(records[400]["input_ids"].int64_list.value)
  assert tokenizer.convert_ids_to_tokens(first[1:first.index(102)]) == \
      tokenizer.tokenize(copies[0].text_a)[:30]
  with pytest.raises(TrainingError, match=r"--distill_augment \(md5"):
    cr.run_classifier(CONFIG, dataclasses.replace(settings, distill_augment=2))
  transfer.write_text("Another sentence.\n")
  with pytest.raises(TrainingError, match="transfer.txt"):
    cr.run_classifier(CONFIG, dataclasses.replace(settings, num_train_epochs=1.0))


@pytest.mark.slow
def test_the_cache_pass_reuses_the_step_that_traced_the_teachers_dev_evaluation(
    tmp_path, monkeypatch):
  """--cache_teacher predicts the training records with the Trainer whose predict step the
  teacher's dev evaluation traced (eval batches of 7, the cache's of 16): no second trace
  (packed rows, whose batch shapes do not depend on the batch size; the two callers keep
  different entries, fine_tuning.predict_keep), and each caller gets back what it asked for."""
  teacher = _teacher(tmp_path / "teacher")
  calls, returned = [], []
  original_predict, original_driver_predict = evaluation.predict, fine_tuning.predict

  def predict(trainer, *args, **kwargs):
    out = original_predict(trainer, *args, **kwargs)
    calls.append((trainer, trainer.predict_step.experimental_get_tracing_count(), sorted(out)))
    return out

  def driver_predict(*args, **kwargs):
    out = original_driver_predict(*args, **kwargs)
    returned.append(sorted(out))
    return out

  monkeypatch.setattr(evaluation, "predict", predict)
  monkeypatch.setattr(fine_tuning, "predict", driver_predict)
  result = cr.run_classifier(CONFIG, source_settings(
      tmp_path / "run", do_predict=False, num_train_epochs=0.1, teacher=teacher,
      cache_teacher=True, packing="exact"))
  (dev, dev_traces, dev_entries), (cache, cache_traces, cache_entries) = calls[:2]
  assert cache is dev and dev_traces == cache_traces == 1
  assert dev_entries == cache_entries == ["example_index", "is_real_example", "label_ids",
                                          "logits"]
  assert returned[:2] == [["example_index", "is_real_example", "label_ids", "logits"],
                          ["example_index", "is_real_example", "logits"]]
  assert len(calls) == 3 and calls[2][0] is not dev  # the student's dev evaluation
  assert 0.0 <= result["teacher_eval_accuracy"] <= 1.0


@pytest.mark.slow
def test_cached_teacher_outputs_train_as_the_teacher_in_the_step(tmp_path):
  """--cache_teacher: the teacher's logits in the training records, computed once, train the
  student to the weights the teacher in the step gives (packed rows, dropout off); a cache
  stamped for another teacher is refused naming both."""
  teacher = _teacher(tmp_path / "teacher")
  runs = {}
  for name, cache in (("step", False), ("cached", True)):
    runs[name] = cr.run_classifier(NO_DROPOUT, source_settings(
        tmp_path / name, do_eval=False, do_predict=False, num_train_epochs=0.5, teacher=teacher,
        distill_alpha=0.3, cache_teacher=cache, packing="exact"))
  # Neither run evaluates nor predicts: no teacher results, and no empty teacher/ folder.
  assert "teacher_eval_accuracy" not in runs["step"]
  assert not (tmp_path / "step" / "teacher").exists()
  first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(
      str(tmp_path / "cached" / "train.tf_record")))).numpy())
  assert len(first.features.feature["teacher_logits"].float_list.value) == 3
  a = checkpoints.get_original_weights(runs["step"]["model"])
  b = checkpoints.get_original_weights(runs["cached"]["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)
  other = _teacher(tmp_path / "other", seed=5)
  files = {name: (tmp_path / "cached" / name).read_bytes()
           for name in ("train.tf_record", "teacher_cache.json", "run_settings.json")}
  with pytest.raises(TrainingError, match=r"--cache_teacher: .*teacher_cache.json holds "
                     r"teacher outputs for teacher=.*teacher/model.ckpt but this run's are "
                     r"teacher=.*other/model.ckpt"):
    cr.run_classifier(NO_DROPOUT, source_settings(
        tmp_path / "cached", do_eval=False, do_predict=False, num_train_epochs=1.0,
        teacher=other, cache_teacher=True))
  # Refused before the records or anything else were written again.
  for name, data in files.items():
    assert (tmp_path / "cached" / name).read_bytes() == data, name
