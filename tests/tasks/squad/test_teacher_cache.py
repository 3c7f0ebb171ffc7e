"""run_squad --cache_teacher: the teacher's start and end logits at every position of each
window written once into the training records, read back cut and packed as the inputs are, and
a student trained on them exactly as with the teacher in the step; the stamp's refusal; resume.

Data: tests/data/squad (tests/data/README.md). The teacher: a tiny random span model
(test_distillation._teacher), so no teacher is trained here.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.tasks import teaching
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.squad import run as sr
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.tasks.squad.test_distillation import _teacher
from tests.tasks.squad.test_run import CONFIG, squad_settings

NO_DROPOUT = CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SEQ = 64


def _student(output_dir, teacher, **changes):
  values = dict(do_predict=False, teacher=teacher, num_train_epochs=0.5, distill_alpha=0.3,
                save_checkpoints_steps=5, iterations_per_loop=5)
  values.update(changes)
  return squad_settings(output_dir, **values)


def _assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
  a, b = checkpoints.get_original_weights(a), checkpoints.get_original_weights(b)
  assert set(a) == set(b)
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def cached_run(tmp_path_factory):
  """The teacher and a cached, unpacked distilled run (length buckets fitted to the data)."""
  tmp = tmp_path_factory.mktemp("squad_cache")
  teacher = _teacher(tmp)
  result = sr.run_squad(NO_DROPOUT, _student(tmp / "cached", teacher, cache_teacher=True))
  return tmp, teacher, result


@pytest.mark.slow
def test_the_cache_holds_the_teachers_logits_at_every_position(cached_run):
  """Each window stores max_seq_length start and end logits, padding positions included (an
  unpacked window's softmax runs over them), equal to the teacher's."""
  tmp, teacher, _ = cached_run
  examples = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
      str(tmp / "cached" / "train.tf_record"))]
  short = [e for e in examples if 0 in e.features.feature["input_mask"].int64_list.value]
  examples = examples[:2] + short[:2]
  stamp = json.loads((tmp / "cached" / teaching.CACHE_STAMP_FILE).read_text())
  assert stamp["head"] == squad_head.SQUAD and stamp["max_seq_length"] == SEQ
  model = squad_head.build_span_model(CONFIG)
  checkpoints.load_weights(model, teacher, strict=True)
  feature = [e.features.feature for e in examples]
  inputs = {name: np.array([f[stored].int64_list.value for f in feature], np.int32)
            for name, stored in (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
                                 ("input_type_ids", "segment_ids"))}
  assert (inputs["input_mask"] == 0).any()  # padding positions are compared too
  outputs = model(inputs, training=False)
  for side in ("start", "end"):
    stored = np.array([f[f"teacher_{side}_logits"].float_list.value for f in feature])
    assert stored.shape == (4, SEQ)
    np.testing.assert_allclose(stored, outputs[f"{side}_logits"].numpy(), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.slow
def test_a_cached_teacher_trains_the_student_as_the_teacher_in_the_step(cached_run):
  tmp, teacher, cached = cached_run
  step = sr.run_squad(NO_DROPOUT, _student(tmp / "step", teacher))
  assert cached["global_step"] == step["global_step"] == cached["num_train_steps"] > 10
  assert cached["train_loss"] == pytest.approx(step["train_loss"], rel=1e-5)
  _assert_same_weights(step["model"], cached["model"])


@pytest.mark.slow
def test_packed_rows_read_the_cache_as_the_packed_teacher_gives_it(tmp_path):
  """Packed, a window's softmax is over its own positions (tasks/squad/loss.py): the cached
  logits packed with their windows train as the packed teacher in the step does."""
  teacher = _teacher(tmp_path)
  runs = {name: sr.run_squad(NO_DROPOUT, _student(tmp_path / name, teacher, packing="exact",
                                                  cache_teacher=cache))
          for name, cache in (("step", False), ("cached", True))}
  assert runs["cached"]["train_loss"] == pytest.approx(runs["step"]["train_loss"], rel=1e-5)
  _assert_same_weights(runs["step"]["model"], runs["cached"]["model"])


@pytest.mark.slow
def test_a_cached_run_resumes_to_the_uninterrupted_weights(cached_run):
  tmp, teacher, cached = cached_run
  last = cached["global_step"]
  cut = helpers.run_folder_at_step(tmp / "cached", tmp / "cut", 10)
  resumed = sr.run_squad(NO_DROPOUT, _student(cut, teacher, cache_teacher=True))
  assert resumed["global_step"] == last
  _assert_same_weights(cached["model"], resumed["model"])


@pytest.mark.slow
def test_a_cache_of_another_teacher_is_refused_naming_both(cached_run):
  tmp, _, _ = cached_run
  (tmp / "other").mkdir()
  other = _teacher(tmp / "other")
  with pytest.raises(TrainingError, match=r"--cache_teacher: .*teacher_cache.json holds "
                     r"teacher outputs for teacher=.*squad_cache\d*/teacher/model.ckpt but "
                     r"this run's are teacher=.*other/teacher/model.ckpt"):
    sr.run_squad(NO_DROPOUT, _student(tmp / "cached", other, cache_teacher=True))
