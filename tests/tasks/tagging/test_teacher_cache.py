"""run_ner --cache_teacher: the teacher's per-position logits written once into the training
records (the window's real positions only), read back cut and packed as the inputs are, and a
student trained on them exactly as with the teacher in the step; the stamp's refusal; resume.

Data: tests/data/ner (tests/data/README.md). The teacher: a tiny random tagger whose head has
random weights (so that its soft targets differ from tag to tag), written as the original's
checkpoint with our task_info.json; no teacher is trained here.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.model import checkpoints
from bert_tf.tasks import start as start_lib
from bert_tf.tasks import teaching
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.tasks.tagging.test_run import CONFIG, SEQ, VOCAB, settings

NO_DROPOUT = CONFIG.replace(hidden_dropout_prob=0.0)


def random_head_teacher(directory, seed=1):
  """A teacher tagger with a random head (the labels of the ner fixtures' training file):
  its checkpoint prefix, with bert_config.json and task_info.json beside it."""
  os.makedirs(directory, exist_ok=True)
  base = settings(os.path.join(directory, "unused"), do_train=True)
  labels = tagging_run.TASK.read(base, start_lib.find_start(base), None).info["labels"]
  values = helpers.random_original_weights(CONFIG, np.random.default_rng(0))
  rng = np.random.default_rng(seed)
  values["output_weights"] = rng.standard_normal([len(labels), CONFIG.hidden_size]).astype(
      np.float32)
  values["output_bias"] = rng.standard_normal([len(labels)]).astype(np.float32)
  prefix = checkpoints.write_tf1_checkpoint(values, os.path.join(directory, "model.ckpt"))
  with open(os.path.join(directory, "task_info.json"), "w", encoding="utf-8") as f:
    json.dump(dict(task_name="ner", labels=list(labels), do_lower_case=True,
                   max_seq_length=SEQ, vocab_md5=record_schema.vocab_checksum(VOCAB)), f)
  CONFIG.to_json_file(os.path.join(directory, "bert_config.json"))
  return prefix


def _student(output_dir, teacher, **changes):
  values = dict(do_train=True, teacher=teacher, num_train_epochs=0.3, distill_alpha=0.3,
                save_checkpoints_steps=5, iterations_per_loop=5)
  values.update(changes)
  return settings(output_dir, **values)


def _records(path):
  return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]


@pytest.fixture(scope="module")
def cached_run(tmp_path_factory):
  """The teacher and a cached, unpacked distilled run (length buckets fitted to the data)."""
  tmp = tmp_path_factory.mktemp("ner_cache")
  teacher = random_head_teacher(str(tmp / "teacher"))
  result = tagging_run.run_ner(NO_DROPOUT, _student(tmp / "cached", teacher,
                                                    cache_teacher=True, packing="none"))
  return tmp, teacher, result


def _assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
  a, b = checkpoints.get_original_weights(a), checkpoints.get_original_weights(b)
  assert set(a) == set(b)
  for name in a:
    np.testing.assert_allclose(b[name], a[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.slow
def test_the_cache_holds_the_teachers_logits_of_each_windows_real_positions(cached_run):
  """Each record stores n x labels float32 values, n its real positions, equal to the
  teacher's logits there; the stamp names what they were computed with."""
  tmp, teacher, _ = cached_run
  examples = _records(tmp / "cached" / "train.tf_record")
  stamp = json.loads((tmp / "cached" / teaching.CACHE_STAMP_FILE).read_text())
  labels = stamp["labels"]
  assert stamp["head"] == tagging_head.TAGGER and stamp["max_seq_length"] == SEQ
  model = tagging_head.build_tagger_model(CONFIG, len(labels))
  checkpoints.load_weights(model, teacher, strict=True)
  picked = examples[:3] + [e for e in examples if sum(
      e.features.feature["input_mask"].int64_list.value) < SEQ][:3]
  for example in picked:
    feature = example.features.feature
    mask = np.array(feature["input_mask"].int64_list.value)
    n = int(mask.sum())
    stored = np.array(feature["teacher_logits"].float_list.value, np.float32)
    assert stored.shape == (n * len(labels),)
    inputs = {"input_word_ids": np.array([feature["input_ids"].int64_list.value], np.int32),
              "input_mask": mask[None].astype(np.int32),
              "input_type_ids": np.array([feature["segment_ids"].int64_list.value], np.int32)}
    logits = model(inputs, training=False)["logits"].numpy()[0, :n]
    np.testing.assert_allclose(stored.reshape(n, -1), logits, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_cached_teacher_trains_the_student_as_the_teacher_in_the_step(cached_run):
  tmp, teacher, cached = cached_run
  step = tagging_run.run_ner(NO_DROPOUT, _student(tmp / "step", teacher, packing="none"))
  assert cached["global_step"] == step["global_step"] == cached["num_train_steps"] > 10
  assert cached["train_loss"] == pytest.approx(step["train_loss"], rel=1e-5)
  _assert_same_weights(step["model"], cached["model"])


@pytest.mark.slow
def test_packed_rows_read_the_cache_as_unpacked_rows_do(cached_run):
  """The cached logits are packed with their windows: packed == unpacked (the tagger's loss
  packs exactly)."""
  tmp, teacher, cached = cached_run
  packed = tagging_run.run_ner(NO_DROPOUT, _student(tmp / "packed", teacher,
                                                    cache_teacher=True, packing="exact"))
  assert packed["train_loss"] == pytest.approx(cached["train_loss"], rel=1e-4)
  _assert_same_weights(cached["model"], packed["model"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_cached_run_resumes_to_the_uninterrupted_weights(cached_run):
  """Interrupted after its step-10 checkpoint, the run writes its records and cache again
  and resumes to the uninterrupted run's weights."""
  tmp, teacher, cached = cached_run
  last = cached["global_step"]
  cut = helpers.run_folder_at_step(tmp / "cached", tmp / "cut", 10)
  resumed = tagging_run.run_ner(NO_DROPOUT, _student(cut, teacher, cache_teacher=True,
                                                     packing="none"))
  assert resumed["global_step"] == last
  _assert_same_weights(cached["model"], resumed["model"])


@pytest.mark.slow
def test_a_cache_of_another_teacher_is_refused_naming_both(cached_run):
  tmp, _, _ = cached_run
  other = random_head_teacher(str(tmp / "other"), seed=7)
  with pytest.raises(TrainingError, match=r"--cache_teacher: .*teacher_cache.json holds "
                     r"teacher outputs for teacher=.*teacher/model.ckpt but this run's are "
                     r"teacher=.*other/model.ckpt"):
    tagging_run.run_ner(NO_DROPOUT, _student(tmp / "cached", other, cache_teacher=True))
