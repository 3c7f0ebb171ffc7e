"""run_ner --teacher: the per-token distillation loss against NumPy, and a distilled run with
its teacher's scores first.

Data: tests/data/ner (tests/data/README.md). The teacher: a tiny random tagger written as the
original's checkpoint with our task_info.json, so no teacher is trained here.
"""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks import start as start_lib
from bert_tf.tasks.tagging import loss as tagging
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.training import evaluation
from bert_tf.training.errors import TrainingError
from tests.tasks.tagging.test_run import CONFIG, _fine_tuned, settings


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_tagger_distillation_loss_counts_the_taggers_positions_only():
  rng = np.random.default_rng(3)
  student = rng.standard_normal([2, 4, 3]).astype(np.float32)
  teacher = rng.standard_normal([2, 4, 3]).astype(np.float32)
  labels = rng.integers(0, 3, [2, 4]).astype(np.int32)
  mask = np.array([[1, 0, 1, 0], [1, 1, 0, 0]], np.int32)  # first pieces; padding weighs 0
  task = tagging.distillation_task(lambda batch: {"logits": tf.constant(teacher)}, 2.0, 0.4)
  batch = {"label_ids": tf.constant(labels), "label_mask": tf.constant(mask)}
  loss, sums = task.replica_loss({"logits": tf.constant(student)}, batch,
                                 {"label_weight": tf.constant(8.0)}, 2)
  hard = -np.take_along_axis(_log_softmax(student), labels[..., None], -1)[..., 0]
  soft = -(np.exp(_log_softmax(teacher / 2)) * _log_softmax(student / 2)).sum(-1) * 4
  assert float(loss) == pytest.approx(np.sum(mask * (0.4 * hard + 0.6 * soft)) / 8, rel=1e-5)
  assert float(sums["weight"]) == 4


def _teacher(tmp_path, labels=None):
  directory = tmp_path / "teacher"
  directory.mkdir()
  if labels is None:
    base = settings(tmp_path / "unused", do_train=True)
    labels = tagging_run.TASK.read(base, start_lib.find_start(base), None).info["labels"]
  prefix = _fine_tuned(directory, labels, "ner")
  CONFIG.to_json_file(str(directory / "bert_config.json"))
  return prefix


def test_a_classifier_cannot_teach_a_tagger(tmp_path):
  prefix = _teacher(tmp_path)
  info = (tmp_path / "teacher" / "task_info.json")
  info.write_text(info.read_text().replace('"ner"', '"generic"'))
  with pytest.raises(TrainingError, match="has a classifier head but the student a tagger"):
    tagging_run.run_ner(CONFIG, settings(tmp_path / "student", do_train=True, teacher=prefix))
  assert not (tmp_path / "student").exists()


@pytest.mark.slow
def test_a_distilled_tagger_trains_and_reports_its_teachers_scores(tmp_path):
  prefix = _teacher(tmp_path)
  teacher_only = tagging_run.run_ner(CONFIG, settings(
      tmp_path / "teacher_eval", do_eval=True, init_checkpoint=prefix))
  result = tagging_run.run_ner(CONFIG, settings(
      tmp_path / "student", do_train=True, do_eval=True, teacher=prefix, num_train_epochs=0.5,
      distill_alpha=0.0, packing="exact"))
  written = evaluation.read_eval_results(str(tmp_path / "student" / "eval_results.txt"))
  assert written["teacher_eval_loss"] == pytest.approx(teacher_only["eval"]["loss"], rel=1e-5)
  assert written["eval_loss"] != pytest.approx(written["teacher_eval_loss"])
  assert result["global_step"] == result["num_train_steps"] > 0


@pytest.mark.slow
def test_a_narrower_tagger_learns_the_teachers_layers_on_packed_rows(tmp_path):
  """--distill_hidden_weight (through a projection), --distill_attention_weight and
  --distill_value_weight on packed rows: every loss is logged, finite and above 0, and the
  student's model is a plain tagger of its own config."""
  prefix = _teacher(tmp_path)
  student = CONFIG.replace(hidden_size=16, num_hidden_layers=1, intermediate_size=20)
  result = tagging_run.run_ner(student, settings(
      tmp_path / "student", do_train=True, teacher=prefix, num_train_epochs=0.5,
      packing="exact", distill_hidden_weight=1.0, distill_attention_weight=1.0,
      distill_value_weight=1.0))
  for name in ("hidden_loss", "attention_loss", "value_loss"):
    assert np.isfinite(result[f"train_{name}"]) and result[f"train_{name}"] > 0, name
  assert result["model"].get_layer("classifier").kernel.shape[0] == 16
  assert not [w for w in result["model"].weights if "distill" in w.path]
