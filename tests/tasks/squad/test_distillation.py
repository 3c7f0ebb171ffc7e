"""run_squad --teacher: the per-position span distillation loss against NumPy, and a distilled
run with its teacher's scores first.

Data: tests/data/squad (tests/data/README.md). The teacher: a tiny random span model written as
the original's checkpoint with our task_info.json, so no teacher is trained here.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.model import checkpoints
from bert_tf.tasks.squad import loss as squad
from bert_tf.tasks.squad import metrics as squad_metrics
from bert_tf.tasks.squad import run as sr
from tests.helpers import random_original_weights
from tests.tasks.squad.test_run import CONFIG, VOCAB, squad_settings


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_span_distillation_loss_averages_start_and_end_over_the_batch():
  rng = np.random.default_rng(5)
  logits = {name: rng.standard_normal([3, 6]).astype(np.float32)
            for name in ("s_start", "s_end", "t_start", "t_end")}
  starts, ends = np.array([1, 0, 4], np.int32), np.array([2, 0, 5], np.int32)
  task = squad.distillation_task(lambda batch: {"start_logits": tf.constant(logits["t_start"]),
                                                "end_logits": tf.constant(logits["t_end"])},
                                 3.0, 0.2)
  batch = {"start_positions": tf.constant(starts), "end_positions": tf.constant(ends)}
  loss, _ = task.replica_loss({"start_logits": tf.constant(logits["s_start"]),
                               "end_logits": tf.constant(logits["s_end"])}, batch, {}, 4)
  total = 0.0
  for side, gold in (("start", starts), ("end", ends)):
    student, teacher = logits[f"s_{side}"], logits[f"t_{side}"]
    hard = -_log_softmax(student)[np.arange(3), gold]
    soft = -(np.exp(_log_softmax(teacher / 3)) * _log_softmax(student / 3)).sum(-1) * 9
    total += np.sum(0.2 * hard + 0.8 * soft) / 2
  assert float(loss) == pytest.approx(total / 4, rel=1e-5)


def _teacher(tmp_path):
  directory = tmp_path / "teacher"
  directory.mkdir()
  values = random_original_weights(CONFIG, np.random.default_rng(0))
  rng = np.random.default_rng(1)
  values["cls/squad/output_weights"] = rng.standard_normal([2, 32]).astype(np.float32)
  values["cls/squad/output_bias"] = np.zeros([2], np.float32)
  prefix = checkpoints.write_tf1_checkpoint(values, str(directory / "model.ckpt"))
  (directory / "task_info.json").write_text(json.dumps(dict(
      task_name="squad", head="squad", do_lower_case=True, max_seq_length=64,
      vocab_md5=record_schema.vocab_checksum(VOCAB))))
  CONFIG.to_json_file(str(directory / "bert_config.json"))
  return prefix


@pytest.mark.slow
def test_a_distilled_span_model_trains_and_reports_its_teachers_scores(tmp_path):
  prefix = _teacher(tmp_path)
  teacher_only = sr.run_squad(CONFIG, squad_settings(tmp_path / "teacher_eval", do_train=False,
                                                     init_checkpoint=prefix))
  result = sr.run_squad(CONFIG, squad_settings(tmp_path / "student", teacher=prefix,
                                               distill_alpha=0.5, num_train_epochs=0.5))
  written = json.loads((tmp_path / "student" / squad_metrics.EVAL_RESULTS_FILE).read_text())
  assert written["teacher_f1"] == pytest.approx(teacher_only["eval"]["f1"])
  assert written["teacher_exact_match"] == pytest.approx(teacher_only["eval"]["exact_match"])
  assert result["teacher_eval_f1"] == pytest.approx(teacher_only["eval"]["f1"])
  assert result["global_step"] == result["num_train_steps"] > 0


@pytest.mark.slow
def test_a_shallower_span_model_learns_the_teachers_last_layer(tmp_path):
  """--distill_layer_map=last at one width (no projection) with MiniLM's relations: every
  loss is logged, finite and above 0."""
  prefix = _teacher(tmp_path)
  student = CONFIG.replace(num_hidden_layers=1)
  result = sr.run_squad(student, squad_settings(
      tmp_path / "student", teacher=prefix, num_train_epochs=0.5, distill_layer_map="last",
      distill_hidden_weight=1.0, distill_attention_weight=1.0, distill_value_weight=1.0))
  for name in ("hidden_loss", "attention_loss", "value_loss"):
    assert np.isfinite(result[f"train_{name}"]) and result[f"train_{name}"] > 0, name
  assert result["global_step"] == result["num_train_steps"] > 0
