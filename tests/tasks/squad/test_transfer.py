"""run_squad --transfer_file: questions whose answers only a teacher gives (a SQuAD-format JSON,
its answers not read): the reader, the loss of their windows against NumPy, the refusal
without --teacher, and a run whose records and steps count them.

Data: tests/data/squad/transfer-v2.0.json, and dev-v1.1.json as a transfer file with answers
(tests/data/README.md).
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks.squad import loss as squad
from bert_tf.tasks.squad import run as sr
from bert_tf.training.errors import TrainingError
from tests.tasks.squad.test_run import CONFIG, SQUAD, squad_settings

TRANSFER = os.path.join(SQUAD, "transfer-v2.0.json")


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_questions_are_read_without_their_answers(tmp_path):
  examples = sr.read_transfer_examples(TRANSFER)
  assert len(examples) == 24
  with_answers = sr.read_transfer_examples(os.path.join(SQUAD, "dev-v1.1.json"))
  assert len(with_answers) == 120
  assert all(e.start_position is None and not e.is_impossible for e in with_answers)
  (tmp_path / "none.json").write_text(json.dumps({"data": []}))
  with pytest.raises(TrainingError, match="none.json has no question"):
    sr.read_transfer_examples(str(tmp_path / "none.json"))
  with pytest.raises(TrainingError, match="missing.json does not exist"):
    sr.read_transfer_examples(str(tmp_path / "missing.json"))


def test_a_transfer_file_without_teacher_is_refused_naming_it(tmp_path):
  with pytest.raises(TrainingError, match=r"--transfer_file=.*transfer-v2.0.json has no "
                     r"labels: only a --teacher's soft targets train on it; add --teacher"):
    sr.run_squad(CONFIG, squad_settings(tmp_path / "out", transfer_file=TRANSFER))
  assert not (tmp_path / "out").exists()


def test_unlabelled_windows_train_on_the_soft_targets_only():
  """Positions -1 (a transfer window): no hard loss and no accuracy; its soft loss counts, and
  the loss is over every window of the batch."""
  rng = np.random.default_rng(5)
  logits = {name: rng.standard_normal([3, 6]).astype(np.float32)
            for name in ("s_start", "s_end", "t_start", "t_end")}
  starts, ends = np.array([1, -1, 4], np.int32), np.array([2, -1, 5], np.int32)
  task = squad.distillation_task(lambda batch: {"start_logits": tf.constant(logits["t_start"]),
                                                "end_logits": tf.constant(logits["t_end"])},
                                 3.0, 0.2)
  batch = {"start_positions": tf.constant(starts), "end_positions": tf.constant(ends)}
  student = {"start_logits": tf.constant(logits["s_start"]),
             "end_logits": tf.constant(logits["s_end"])}
  loss, sums = task.replica_loss(student, batch, {}, 3)
  labelled = starts >= 0
  total, correct = 0.0, {}
  for side, gold in (("start", np.maximum(starts, 0)), ("end", np.maximum(ends, 0))):
    s, t = logits[f"s_{side}"], logits[f"t_{side}"]
    hard = -_log_softmax(s)[np.arange(3), gold] * labelled
    soft = -(np.exp(_log_softmax(t / 3)) * _log_softmax(s / 3)).sum(-1) * 9
    total += np.sum(0.2 * hard + 0.8 * soft) / 2
    correct[side] = np.sum(labelled * (s.argmax(-1) == gold))
  assert float(loss) == pytest.approx(total / 3, rel=1e-5)
  assert float(sums["examples"]) == 3 and float(sums["labelled"]) == 2
  assert float(sums["start_correct"]) == correct["start"]
  assert float(sums["end_correct"]) == correct["end"]
  metrics = task.train_metrics(dict(sums, loss=1.0), 1)
  assert metrics["start_accuracy"] == correct["start"] / 2


@pytest.mark.slow
def test_transfer_questions_reach_the_training_records_and_the_steps(tmp_path):
  """The training file's windows and then the transfer questions' (positions -1), their
  questions counted in the steps, with a cached teacher; a resume with another transfer
  file is refused."""
  from tests.tasks.squad.test_teacher_cache import NO_DROPOUT, _student, _teacher
  teacher = _teacher(tmp_path)
  result = sr.run_squad(NO_DROPOUT, _student(tmp_path / "student", teacher,
                                             transfer_file=TRANSFER, cache_teacher=True,
                                             num_train_epochs=0.3))
  records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
      str(tmp_path / "student" / "train.tf_record"))]
  positions = [(r.features.feature["start_positions"].int64_list.value[0],
                r.features.feature["end_positions"].int64_list.value[0]) for r in records]
  transfer = positions.count((-1, -1))
  assert transfer >= 24 and set(positions[-transfer:]) == {(-1, -1)}  # after the file's
  assert min(min(p) for p in positions[:-transfer]) >= 0
  assert result["train_stats"]["transfer_windows"] == transfer
  assert result["train_examples"] == 400 + 24 and result["train_features"] == len(records)
  assert result["num_train_steps"] == result["global_step"] == int(424 / 16 * 0.3)
  with pytest.raises(TrainingError, match="dev-v1.1.json"):
    sr.run_squad(NO_DROPOUT, _student(tmp_path / "student", teacher, num_train_epochs=0.5,
                                      transfer_file=os.path.join(SQUAD, "dev-v1.1.json")))
