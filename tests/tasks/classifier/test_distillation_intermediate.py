"""run_classifier --teacher with the intermediate losses (--distill_hidden_weight,
--distill_attention_weight, --distill_value_weight): their flag errors before anything is
written, and a run whose projection trains, resumes, and stays out of the student's model.

Data: tests/data/classifier/source (tests/data/README.md). The teacher is a tiny random
classifier (test_distillation._teacher); the student is narrower and shallower, so the hidden
loss goes through a projection.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.tasks.classifier import export as classifier_export
from bert_tf.tasks.classifier import run as cr
from bert_tf.training import run_folder
from bert_tf.training.distillation import intermediate
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.tasks.classifier.test_distillation import _teacher
from tests.tasks.classifier.test_run import CONFIG, source_settings

STUDENT = CONFIG.replace(hidden_size=16, num_hidden_layers=1, intermediate_size=20,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
ALL_LOSSES = dict(distill_hidden_weight=1.0, distill_attention_weight=0.5,
                  distill_value_weight=0.5)


@pytest.mark.parametrize("changes, message", [
    (dict(distill_hidden_weight=-1.0),
     "--distill_hidden_weight must be >= 0 and finite, got -1.0"),
    (dict(distill_hidden_weight=float("inf")),
     "--distill_hidden_weight must be >= 0 and finite, got inf"),
    (dict(distill_temperature=float("inf")),
     "--distill_temperature must be positive and finite, got inf"),
    (dict(teacher=None, distill_alpha=0.3),
     "--distill_alpha=0.3 weighs what a teacher teaches: add --teacher or drop it"),
    (dict(teacher=None, distill_temperature=1.0),
     "--distill_temperature=1.0 weighs what a teacher teaches: add --teacher or drop it"),
    (dict(distill_layer_map="9:9"),
     "--distill_layer_map=9:9 pairs the layers of the hidden-state loss: add "
     "--distill_hidden_weight or drop it"),
    (dict(distill_relation_heads=0), "--distill_relation_heads must be positive, got 0"),
    (dict(teacher=None, distill_value_weight=1.0),
     "--distill_value_weight=1.0 distils from a teacher's layers: add --teacher"),
    (dict(cache_teacher=True, distill_attention_weight=1.0),
     "--distill_attention_weight=1.0 reads the teacher's layers in every step but "
     "--cache_teacher keeps only its head's outputs"),
])
def test_intermediate_flag_errors_are_one_line_each(tmp_path, changes, message):
  settings = dict(teacher=str(tmp_path / "teacher"))
  settings.update(changes)
  with pytest.raises(TrainingError) as error:
    source_settings(tmp_path / "out", **settings).check(CONFIG)
  assert message in str(error.value)
  assert all(line.startswith("--") for line in str(error.value).splitlines()[1:])


@pytest.mark.parametrize("changes, message", [
    (dict(distill_hidden_weight=1.0, distill_layer_map="1:3"),
     "--distill_layer_map: teacher layer 3 in '1:3' is out of range 1..2"),
    (dict(distill_attention_weight=1.0, distill_relation_heads=3),
     "--distill_relation_heads=3 must divide both hidden sizes: the student's 16 and the "
     "teacher's 32"),
])
def test_a_plan_the_two_models_cannot_have_is_refused_before_writing(tmp_path, changes,
                                                                     message):
  teacher = _teacher(tmp_path / "teacher")
  output_dir = tmp_path / "student"
  with pytest.raises(TrainingError, match="^" + message.replace(".", r"\.")) as error:
    cr.run_classifier(STUDENT, source_settings(output_dir, teacher=teacher, **changes))
  assert "\n" not in str(error.value)
  assert not output_dir.exists()


def _projection(checkpoint):
  """The projection's kernel and bias saved in a run's checkpoint (beside the model)."""
  projection = intermediate.HiddenProjection(32)
  projection([tf.zeros([1, 1, 16])])
  holder = tf.Module()
  holder.projection = projection
  status = tf.train.Checkpoint(**{run_folder.EXTRA_WEIGHTS: holder}).read(checkpoint)
  status.expect_partial().assert_existing_objects_matched()
  return projection.kernel.numpy(), projection.bias.numpy()


@pytest.mark.slow
def test_the_projection_trains_resumes_and_stays_out_of_the_student(tmp_path):
  """A distilled run with every intermediate loss: its model, its checkpoints' model weights and
  its export are a plain run's (the same layers and shapes, no projection), the projection is
  saved beside them and trained; interrupted after its step-10 checkpoint, it resumes to the uninterrupted
  run's student and projection."""
  teacher = _teacher(tmp_path / "teacher")
  common = dict(do_predict=False, num_train_epochs=0.5)
  plain = cr.run_classifier(STUDENT, source_settings(tmp_path / "plain", do_eval=False,
                                                     **common))
  distilled = cr.run_classifier(STUDENT, source_settings(
      tmp_path / "distilled", teacher=teacher, distill_alpha=0.5, export=True, **common,
      **ALL_LOSSES), exporter=classifier_export.EXPORTER)
  assert np.isfinite(distilled["eval_loss"]) and "teacher_eval_accuracy" in distilled
  shapes = lambda model: {w.path: tuple(w.shape) for w in model.weights}
  assert shapes(distilled["model"]) == shapes(plain["model"])
  # The export holds the student's weights alone: the shapes of a plain classifier's.
  exported = tf.train.list_variables(os.path.join(distilled["export_dir"], "variables",
                                                  "variables"))
  assert sorted(tuple(shape) for name, shape in exported if name.startswith("variables/")) == \
      sorted(tuple(w.shape) for w in plain["model"].weights)
  latest = tf.train.latest_checkpoint(str(tmp_path / "distilled"))
  assert (checkpoints.training_checkpoint_layers(latest)
          == checkpoints.training_checkpoint_layers(
              tf.train.latest_checkpoint(str(tmp_path / "plain"))))
  # What export, --init_checkpoint and --teacher read: the student's weights alone.
  read = checkpoints.read_training_checkpoint(latest, STUDENT)
  assert set(read) == set(checkpoints.get_original_weights(plain["model"]))
  kernel, bias = _projection(latest)
  assert kernel.shape == (1, 16, 32) and np.abs(bias).max() > 0  # trained from zeros
  # Interrupted after its step-10 checkpoint: resumed, the same student and projection.
  cut = helpers.run_folder_at_step(tmp_path / "distilled", tmp_path / "cut", 10)
  resumed = cr.run_classifier(STUDENT, source_settings(
      cut, teacher=teacher, distill_alpha=0.5, do_eval=False, **common, **ALL_LOSSES))
  a = checkpoints.get_original_weights(distilled["model"])
  b = checkpoints.get_original_weights(resumed["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)
  for got, expected in zip(_projection(tf.train.latest_checkpoint(str(cut))), (kernel, bias)):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  # The projection is recorded with the flags; a resume without it (or with another) is refused
  # by name before anything is written, not left to fail restoring the checkpoints.
  with open(cut / "run_settings.json") as f:
    recorded = json.load(f)
  assert recorded["distill_projection"] == [1, 16, 32]
  assert recorded["distill_hidden_weight"] == 1.0 and recorded["teacher"] == teacher
  before = sorted(os.listdir(cut))
  with pytest.raises(TrainingError, match=r"--distill_hidden_weight, --distill_layer_map, "
                     r"--teacher: the checkpoints in .* were trained with a hidden-state "
                     r"projection of 1 layer pair\(s\), width 16 to 32, this run's is none"):
    cr.run_classifier(STUDENT, source_settings(cut, teacher=teacher, do_eval=False, **common))
  assert sorted(os.listdir(cut)) == before
