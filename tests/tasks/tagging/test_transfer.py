"""run_ner --transfer_file: plain text sentences without tags that only a teacher's soft targets
train on: how lines are read, the loss of their words against NumPy, the refusal without
--teacher, and a run whose records and steps count them.

Data: tests/data/ner/transfer.txt (tests/data/README.md).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks.tagging import data as tagging_data
from bert_tf.tasks.tagging import loss as tagging
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.training.errors import TrainingError
from tests.helpers import TEST_DATA
from tests.tasks.tagging.test_run import CONFIG, settings

TRANSFER = os.path.join(TEST_DATA, "ner", "transfer.txt")


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_lines_are_sentences_split_at_whitespace_each_its_own_document(tmp_path):
  path = tmp_path / "t.txt"
  path.write_text("Mr. Darcy  walked\tto Pemberton .\n\n   \nEmma\n")
  sentences = tagging_data.read_plain_sentences(str(path))
  assert [s.words for s in sentences] == [("Mr.", "Darcy", "walked", "to", "Pemberton", "."),
                                          ("Emma",)]
  assert [(s.tags, s.document, s.line) for s in sentences] == [(None, 0, 1), (None, 1, 4)]
  assert len(tagging_data.read_plain_sentences(TRANSFER)) == 40
  (tmp_path / "blank.txt").write_text("\n \n")
  with pytest.raises(tagging_data.ConllFormatError, match="blank.txt has no line of text"):
    tagging_data.read_plain_sentences(str(tmp_path / "blank.txt"))


def test_a_transfer_file_without_teacher_is_refused_naming_it(tmp_path):
  with pytest.raises(TrainingError, match=r"--transfer_file=.*transfer.txt has no labels: only "
                     r"a --teacher's soft targets train on it; add --teacher"):
    settings(tmp_path / "out", do_train=True, transfer_file=TRANSFER).check(CONFIG)
  assert not (tmp_path / "out").exists()


def test_unlabelled_words_train_on_the_soft_targets_only():
  """Label id -1 (a transfer word): no hard loss and no metric sum; its soft loss counts, over
  every labelled position (label_mask 1) of the batch."""
  rng = np.random.default_rng(3)
  student, teacher = rng.standard_normal([2, 2, 4, 3]).astype(np.float32)
  labels = np.array([[2, 0, 1, 0], [-1, -1, 0, 0]], np.int32)
  mask = np.array([[1, 0, 1, 0], [1, 1, 0, 0]], np.int32)
  task = tagging.distillation_task(lambda batch: {"logits": tf.constant(teacher)}, 2.0, 0.4)
  batch = {"label_ids": tf.constant(labels), "label_mask": tf.constant(mask)}
  loss, sums = task.replica_loss({"logits": tf.constant(student)}, batch,
                                 {"label_weight": tf.constant(4.0)}, 2)
  gold = np.maximum(labels, 0)
  hard = -np.take_along_axis(_log_softmax(student), gold[..., None], -1)[..., 0]
  soft = -(np.exp(_log_softmax(teacher / 2)) * _log_softmax(student / 2)).sum(-1) * 4
  labelled = mask * (labels >= 0)
  expected = np.sum(0.4 * hard * labelled + 0.6 * soft * mask) / 4
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(sums["weight"]) == 2
  assert float(sums["correct"]) == np.sum(labelled * (student.argmax(-1) == gold))


@pytest.mark.slow
def test_transfer_sentences_reach_the_training_records_and_the_steps(tmp_path):
  """The training file's windows, then one per transfer sentence and one per --distill_augment
  copy (their words' label id -1), all counted in the steps; a resume with another transfer
  file is refused."""
  from tests.tasks.tagging.test_teacher_cache import NO_DROPOUT, _student, random_head_teacher
  teacher = random_head_teacher(str(tmp_path / "teacher"))
  student = _student(tmp_path / "student", teacher, transfer_file=TRANSFER, packing="exact",
                     num_train_epochs=0.2, distill_augment=1)
  copies = tagging_run.altered_copies(tagging_data.read_conll(student.file("train")), 1,
                                      student.seed or 0)
  result = tagging_run.run_ner(NO_DROPOUT, student)
  records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
      str(tmp_path / "student" / "train.tf_record"))]
  # After the training file's 737 windows (test_teacher_cache), theirs: every labelled
  # position -1. (The last window of a long sentence can hold only the ends of words already
  # predicted, and so predicts nothing.)
  transfer = records[737:]
  assert len(transfer) >= 40 + len(copies)
  assert not any(-1 in r.features.feature["label_ids"].int64_list.value for r in records[:737])
  with open(TRANSFER, encoding="utf-8") as f:
    lines = f.read().splitlines()
  words = 0
  for record in transfer:
    ids = np.array(record.features.feature["label_ids"].int64_list.value)
    mask = np.array(record.features.feature["label_mask"].int64_list.value)
    assert set(ids[mask == 1]) <= {-1} and set(ids[mask == 0]) == {0}
    words += int(mask.sum())
  assert words == sum(len(line.split()) for line in lines) + sum(len(c.words) for c in copies)
  windows = 737 + len(transfer)
  assert result["train_windows"] == len(records) == windows
  assert result["num_train_steps"] == result["global_step"] == int(windows / 16 * 0.2)
  other = tmp_path / "other.txt"
  other.write_text("\n".join(lines[:10]) + "\n")
  with pytest.raises(TrainingError, match="other.txt"):
    tagging_run.run_ner(NO_DROPOUT, _student(tmp_path / "student", teacher,
                                             transfer_file=str(other), num_train_epochs=0.4))
